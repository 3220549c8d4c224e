// One client process: its control socket, its device objects (through the
// Owner), and the translation of control messages into device calls.
#pragma once

#include <utility>  // Boost 1.74 asio needs std::exchange declared first

#include <boost/asio.hpp>

#include "emulator/seq_packet.h"

#include <cstdint>
#include <string>
#include <vector>

#include "device/objects.h"
#include "emulator/access.h"
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
  const PeerCredentials& peer() const { return peer_; }
  void post_port_event(uint32_t type) { owner_.post_async(type, 1 /* port_num */); }

 private:
  // tests/fuzz/control_fuzz.cc: feeds requests straight to dispatch().
  friend class SessionTestPeer;

  // Why the engine hangs up on a client that is still there: junk (a
  // message no provider sends: cut short, of an unknown operation, of the
  // wrong size or fd count) or a flood (requests sent without reading the
  // replies, so one no longer fits in its socket). Either gets the reply
  // first, then the session ends and its objects are reclaimed.
  enum class Verdict { kServe, kJunk, kFlood };

  void wait_readable();
  bool handle_readable();  // false: the peer is gone or hung up on
  Verdict dispatch(const abi::CtlRequestHeader& hdr, const uint8_t* body, std::vector<int>& fds);
  // False when the reply does not fit in the client's socket (a flood).
  bool reply(int status, const void* body, size_t len, const int* fds = nullptr, size_t nfds = 0);
  void reply_text(int status, const std::string& text) { reply(status, text.data(), text.size()); }
  // Counts and logs a hang-up; always false (handle_readable's answer).
  bool hang_up(Verdict why, const abi::CtlRequestHeader* hdr, size_t bytes);

  Engine& engine_;
  SeqPacket::socket socket_;
  PeerCredentials peer_;  // as the kernel gave them at connect
  device::Owner owner_;
  ObjectTable objects_;  // this client's handles
  bool reply_failed_ = false;
};

}  // namespace uroce::emulator
