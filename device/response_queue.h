// The responder's answers not yet sent, in PSN order (IBA 9.7.5.1.1): READ
// data, and the ACKs, NAKs and atomic ACKs that must not overtake it (a
// positive ACK always waits here until the end of the receive burst, so
// that one ACK answers the burst). A fixed ring of kCapacity entries,
// allocated the first time a QP answers a request (about 4 KiB; a QP that
// only sends never does), never again; nothing is allocated per packet.
#pragma once

#include <cstdint>
#include <memory>

namespace uroce::device {

// A response the responder still owes: READ data is emitted a budget of
// packets per poll, and ACKs/NAKs/atomic ACKs for later requests queue
// behind it so no answer overtakes an earlier one.
struct Response {
  enum class Kind : uint8_t { kRead, kAeth, kAtomicAck };
  Kind kind = Kind::kRead;
  bool first = true;
  bool fatal = false;     // kAeth: a NAK after which the responder QP errs
  uint8_t syndrome = 0;   // kAeth, kAtomicAck
  bool replay = false;    // answers a duplicate request: holds no responder resource (C9-149)
  uint32_t psn = 0;       // next response PSN
  uint32_t msn = 0;       // kAeth: the responder's MSN as of psn
  uint32_t end_psn = 0;   // kRead: one past the READ's last response PSN
  uint32_t remaining = 0; // kRead: bytes still to send
  uint32_t mr_key = 0;    // kRead
  uint32_t mr_pd = 0;     // kRead: the PD the key was checked in (a key freed and reused meanwhile is another PD's)
  uint64_t va = 0;        // kRead: in the MR owner's address space
  uint64_t orig = 0;      // kAtomicAck
};

class ResponseQueue {
 public:
  // Entries at most: the READs and atomics C9-149 lets a requester have
  // outstanding (params.h kMaxQpRdAtomic + 1), the answers to duplicates the
  // responder queues (responder.cc kMaxQueuedResponses) and the ACKs and
  // NAKs behind them (consecutive ACKs are merged: one covers the other).
  static constexpr uint32_t kCapacity = 64;

  bool empty() const { return count_ == 0; }
  bool full() const { return count_ == kCapacity; }
  uint32_t size() const { return count_; }
  // The i-th entry from the front.
  Response& operator[](uint32_t i) { return ring_[(head_ + i) & (kCapacity - 1)]; }
  const Response& operator[](uint32_t i) const { return ring_[(head_ + i) & (kCapacity - 1)]; }
  Response& front() { return (*this)[0]; }
  Response& back() { return (*this)[count_ - 1]; }

  // Callers check full() first.
  void push_back(const Response& r) {
    if (!ring_) ring_.reset(new Response[kCapacity]);
    (*this)[count_++] = r;
  }
  // Puts r at position pos, the entries from pos on one further back.
  void insert(uint32_t pos, const Response& r) {
    if (!ring_) ring_.reset(new Response[kCapacity]);
    for (uint32_t i = count_; i > pos; --i) (*this)[i] = (*this)[i - 1];
    (*this)[pos] = r;
    ++count_;
  }
  void erase(uint32_t pos) {
    for (uint32_t i = pos; i + 1 < count_; ++i) (*this)[i] = (*this)[i + 1];
    --count_;
  }
  void pop_front() {
    head_ = (head_ + 1) & (kCapacity - 1);
    --count_;
  }
  void clear() { head_ = count_ = 0; }

 private:
  std::unique_ptr<Response[]> ring_;
  uint32_t head_ = 0, count_ = 0;
};

}  // namespace uroce::device
