// libFuzzer target: the WQE decoder, as a hostile client drives it. Arbitrary
// bytes go into the send queues, receive queues, the SRQ and the CQ of live
// QPs of every receiving kind (RC pairs, one on an SRQ, UC, UD), with
// producer indices advanced, torn or overwritten and queue headers
// scribbled on; the device runs after each record. What a NIC does with such
// work (IBA 10.8.3, 11.6.2): error completions or the QP in error, never a
// read or write outside the rings and the registered buffer (ASan), never a
// device that stays busy. Each input gets a fresh device.
//
// Input: records of [qp][flags][index][length][bytes].
//   qp      which QP (modulo the QPs)
//   flags   bits 0-1: the ring (0 its SQ, 1 its RQ, 2 the SRQ, 3 its send CQ);
//           bit 2: `bytes` go into the slot at the producer index;
//           bit 3: the producer advances by index % 4 + 1;
//           bit 4: the producer is set to consumer + index * 2^(index % 32) (torn);
//           bit 5: `bytes` go over the queue header instead;
//           bit 6: 100 ms pass after the record (timers);
//           bit 7: then the slot's SGEs and remote address are aimed into
//                  the registered buffer with its keys (so that the fuzzer
//                  reaches the data path)
// Findings: crashes, sanitizer reports, a device that never goes idle.
#include <infiniband/verbs.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "device/device.h"
#include "tests/fuzz/fuzz_world.h"
#include "net/packet.h"

namespace uroce::device {

using fuzz::World;
using fuzz::kBuf;
using fuzz::kAll;
}  // namespace uroce::device

using namespace uroce;

namespace {

// Aims every SGE of a slot (a send WQE's, or a receive WQE's) and a send
// WQE's remote address into the registered buffer with its keys; a UD send's
// remote QPN picks one of the QPs (modulo) and gets its Q_Key.
void aim(device::World& w, uint8_t* slot, uint32_t stride, bool send) {
  const uint64_t base = reinterpret_cast<uint64_t>(w.buf.data());
  const size_t head = send ? sizeof(abi::SendWqe) : sizeof(abi::RecvWqe);
  if (send) {
    abi::SendWqe s;
    std::memcpy(&s, slot, sizeof(s));
    s.remote_addr = base + s.remote_addr % device::kBuf;
    s.rkey = w.key;
    s.remote_qpn = w.qps[s.remote_qpn % w.qps.size()].qpn;
    s.remote_qkey = 0x11111111;
    std::memcpy(slot, &s, sizeof(s));
  }
  for (size_t off = head; off + sizeof(abi::Sge) <= stride; off += sizeof(abi::Sge)) {
    abi::Sge g;
    std::memcpy(&g, slot + off, sizeof(g));
    g.addr = base + g.addr % device::kBuf;
    g.length %= 8192;
    g.lkey = w.key;
    std::memcpy(slot + off, &g, sizeof(g));
  }
}

void feed(device::World& w, uint8_t target, uint8_t flags, uint8_t index, const uint8_t* bytes, size_t len) {
  const auto& q = w.qps[target % w.qps.size()];
  device::Qp* qp = w.dev.qp(q.qpn);
  if (!w.ready(q)) w.connect(q);
  device::RingView* ring;
  bool send = false;
  switch (flags & 3) {
    case 0: ring = &qp->sq; send = true; break;
    case 1: ring = &qp->rq; break;
    case 2: ring = &w.dev.srq(w.srq)->ring; break;
    default: ring = &w.dev.cq(w.cq)->ring; break;
  }
  std::atomic<uint32_t>& producer = ring->hdr->producer;
  if (flags & 4) {
    uint8_t* slot = ring->slot(producer.load(std::memory_order_relaxed));
    std::memcpy(slot, bytes, std::min<size_t>(len, ring->stride));
    if (flags & 0x80) aim(w, slot, ring->stride, send);
  }
  if (flags & 8) producer.fetch_add(index % 4 + 1, std::memory_order_release);
  if (flags & 0x10)
    producer.store(ring->hdr->consumer.load() + (uint32_t(index) << (index % 32)), std::memory_order_release);
  if (flags & 0x20) std::memcpy(static_cast<void*>(ring->hdr), bytes, std::min(len, sizeof(abi::QueueHeader)));
  w.run();
  if (flags & 0x40) {
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
    const uint8_t target = data[off], flags = data[off + 1], index = data[off + 2];
    const size_t len = data[off + 3];
    off += 4;
    if (len > size - off) break;
    feed(w, target, flags, index, data + off, len);
    off += len;
  }
  for (int i = 0; i < 40; ++i) {
    w.now += 100'000'000;
    w.run();
    w.drain_cq();
  }
  return 0;
}
