// One client process: its control socket, its device objects (through the
// Owner), and the translation of control messages into device calls.
#pragma once

#include <utility>  // Boost 1.74 asio needs std::exchange declared first

#include <boost/asio.hpp>

#include "emulator/seq_packet.h"

#include <cstdint>
#include <vector>

#include "device/objects.h"
#include "emulator/object_table.h"
#include "uroce/abi.h"

namespace uroce::emulator {

class Engine;

class Session {
 public:
  Session(Engine& engine, SeqPacket::socket socket, uint64_t id);
  ~Session();
  void start();
  const device::Owner& owner() const { return owner_; }
  void post_port_event(uint32_t type) { owner_.post_async(type, 1 /* port_num */); }

 private:
  // tests/fuzz/control_fuzz.cc: feeds requests straight to dispatch().
  friend class SessionTestPeer;

  void wait_readable();
  bool handle_readable();  // false: the peer is gone
  void dispatch(const abi::CtlRequestHeader& hdr, const uint8_t* body, std::vector<int>& fds);
  void reply(int status, const void* body, size_t len, const int* fds = nullptr, size_t nfds = 0);

  Engine& engine_;
  SeqPacket::socket socket_;
  device::Owner owner_;
  ObjectTable objects_;  // this client's handles
};

}  // namespace uroce::emulator
