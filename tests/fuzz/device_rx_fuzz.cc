// libFuzzer target: the whole receive path of a device (ingress checks,
// responder, completer, their NAKs and retransmissions) fed arbitrary frames
// against live QPs of every receiving kind: RC pairs (one on an SRQ), UC, UD,
// a DCI and its DCT (mlx5 mode: DC frames reach the DCT's dispatcher).
// Each input gets a fresh device, so every finding replays on its own.
//
// Input: records of [target][flags][length: 2 bytes, big-endian][frame].
// `target` picks the QP whose number the frame's BTH is given (when the frame
// parses), flags bit 0 gives it that QP's expected PSN, bit 1 posts a SEND and
// bit 2 an RDMA READ on an RC requester first (so ACKs and READ responses find
// outstanding work; with bit 4 on the DCI, to its DCT), bit 3 lets 100 ms
// pass after the frame (ACK timers, RNR waits). Findings: crashes, sanitizer reports, a device that never goes idle.
#include <infiniband/verbs.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "device/device.h"
#include "tests/fuzz/fuzz_world.h"
#include "net/packet.h"

namespace uroce::device {

// Declared a friend by device.h: queues a frame as a port would.
class DeviceTestPeer {
 public:
  static void inject(Device& dev, const uint8_t* frame, size_t len) {
    net::Packet* p = dev.pool_.get();
    std::memcpy(p->data, frame, len);
    p->len = uint32_t(len);
    p->checksummed = false;
    dev.loopback_.tx(p);
  }
};

using fuzz::World;
}  // namespace uroce::device

using namespace uroce;

namespace {

// One record: aims the frame, injects it, runs the device until idle.
void feed(device::World& w, uint8_t target, uint8_t flags, const uint8_t* frame, size_t len) {
  const auto& q = w.qps[target % w.qps.size()];
  device::Qp* qp = w.dev.qp(q.qpn);
  if (!w.ready(q)) w.connect(q);
  for (const auto& each : w.qps)
    if (w.dev.qp(each.qpn)->srq == 0 && !each.dc) w.refill(w.dev.qp(each.qpn)->rq, 4);
  w.refill(w.dev.srq(w.srq)->ring, 8);
  // Sends first from the first RC QP, or from the DCI (flag bit 4).
  const uint32_t sender = (flags & 16) ? w.qps[w.qps.size() - 2].qpn : w.qps[0].qpn;
  if (flags & 2) w.post_send(sender, IBV_WR_SEND);
  if (flags & 4) w.post_send(sender, IBV_WR_RDMA_READ);

  if (len == 0) return;
  std::vector<uint8_t> copy(frame, frame + len);
  auto p = std::make_unique<net::Packet>();
  std::memcpy(p->data, copy.data(), len);
  p->len = uint32_t(len);
  if (net::parse_roce_packet(*p, false) == net::ParseError::kOk) {
    auto* bth = reinterpret_cast<net::Bth*>(copy.data() + p->bth_off);
    bth->dest_qp = q.qpn;
    if (flags & 1) {
      const bool response = p->info().flags & net::kResponse;
      const uint32_t psn = response ? qp->comp_psn : qp->resp_epsn;
      bth->ack_psn = (uint32_t(bth->ack_psn) & net::Bth::kAckReq) | (psn & net::Bth::kPsnMask);
    }
  }
  device::DeviceTestPeer::inject(w.dev, copy.data(), len);
  w.run();
  if (flags & 8) {
    w.now += 100'000'000;
    w.run();
  }
  w.drain_cq();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  device::World w;
  size_t off = 0;
  for (int records = 0; records < 64 && off + 4 <= size; ++records) {
    const uint8_t target = data[off], flags = data[off + 1];
    const size_t len = size_t(data[off + 2]) << 8 | data[off + 3];
    off += 4;
    if (len > size - off || len > net::kFrameCapacity) break;
    feed(w, target, flags, data + off, len);
    off += len;
  }
  // Let every timer run out: retransmissions end in success or an error,
  // never in a device that stays busy.
  for (int i = 0; i < 40; ++i) {
    w.now += 100'000'000;
    w.run();
    w.drain_cq();
  }
  return 0;
}
