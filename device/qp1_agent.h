// What the device asks of the agent that serves QP1, the general services
// interface (IBA 13.5): management datagrams in, its timers, and word of
// addresses and clients that go away. The connection manager (cm/) is that
// agent; the device, the transport and net/ know nothing more of it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace uroce::device {

struct Owner;

// QP1's fixed numbers (IBA 13.5.1 C13-23, 13.4.1): every GSI datagram is one
// 256-byte MAD to QPN 1 with the well-known Q_Key, on the default P_Key.
constexpr uint32_t kGsiQpn = 1;
constexpr uint32_t kGsiQkey = 0x80010000;
constexpr uint16_t kGsiPkey = 0xffff;
constexpr size_t kMadBytes = 256;

class Qp1Agent {
 public:
  virtual ~Qp1Agent() = default;
  // A MAD (kMadBytes) that reached QP1: sgid is the sender's port GID, dgid
  // ours that it was sent to. False: not a class the agent serves (the
  // device counts it dropped).
  virtual bool receive_mad(const uint8_t* sgid, const uint8_t* dgid, const uint8_t* mad) = 0;
  // Its timers (retransmissions): true if it did anything; the next one due (0: none).
  virtual bool poll_timers(uint64_t now_ns) = 0;
  virtual uint64_t next_deadline_ns() const = 0;
  // An address of the bound interface went (its GID is gone).
  virtual void address_removed(const uint8_t gid[16]) = 0;
  // A client is gone: first its peers hear of it, then its QPs go.
  virtual void release_owner(Owner* o) = 0;
  // How long a destroyed QP's number is held after a disconnect (time-wait).
  virtual uint64_t timewait_ns() const = 0;
};

}  // namespace uroce::device
