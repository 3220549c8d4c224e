// Hardware tag matching (IBV_SRQT_TM): the tag list of one TM-SRQ, its
// list operations (ibv_post_srq_ops) and the matching of incoming tagged
// messages. Rules: rdma-core's mlx5 provider (providers/mlx5/verbs.c, qp.c
// mlx5_post_srq_ops, cq.c) and Documentation/tag_matching.md.
// The responder (responder.cc) parses the TMH and asks match(); this file
// knows nothing of packets or memory.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <list>
#include <optional>
#include <vector>

#include <infiniband/tm_types.h>

#include "uroce/abi.h"

namespace uroce::device {

// The tag-matching header at the start of every message to a TM-SRQ
// (tm_types.h struct ibv_tmh; big-endian on the wire) and the rendezvous
// header after it (struct ibv_rvh).
struct Tmh {
  uint8_t opcode = 0;  // enum ibv_tmh_op
  uint32_t app_ctx = 0;
  uint64_t tag = 0;
};
constexpr uint32_t kTmhSize = 16;
constexpr uint32_t kRvhSize = 16;
// Parses the first bytes of a message; nullopt if shorter than a TMH.
std::optional<Tmh> parse_tmh(const uint8_t* data, size_t len);
struct Rvh {
  uint64_t va = 0;
  uint32_t rkey = 0, len = 0;
};
// The RVH after the TMH of a rendezvous request; nullopt if the message's
// first packet is too short to hold both.
std::optional<Rvh> parse_rvh(const uint8_t* data, size_t len);
// A FIN (tag_matching.md, IBV_TM_OP_FIN): "a copy of the original TMH and
// RVH of the rendezvous request, apart the opcode", 32 bytes big-endian.
constexpr uint32_t kFinSize = kTmhSize + kRvhSize;
void write_fin(uint8_t* out, const Tmh& tmh, const Rvh& rvh);

// A posted tagged buffer (TAG_ADD), as software gave it: the SGE is checked
// when a message lands in it, as a receive WQE's is.
struct TaggedBuffer {
  uint64_t recv_wr_id = 0;
  uint32_t num_sge = 0;
  abi::Sge sge{};
};

class TagList {
 public:
  TagList(uint32_t max_num_tags, uint32_t max_ops);

  // One list operation, in the order posted. `cq_pos` is where its
  // completion would be written in the SRQ's CQ, `cq_consumed` the CQ's
  // consumer index now (for the outstanding-op limit). Fills *cqe and
  // returns true if a completion is due (IBV_OPS_SIGNALED); *err is the
  // errno that refuses the op (nothing changed then, but it counts as
  // retired). A TAG_ADD takes op.handle, which must be free: the provider
  // allocates handles and refuses a full list itself, as mlx5 does
  // (mlx5_post_srq_ops, srq->tm_head), so a taken handle here is a bad client.
  struct OpResult {
    int err = 0;
    bool signaled = false;
    uint32_t handle = 0;  // TAG_ADD
    abi::Cqe cqe{};
  };
  OpResult post(const abi::SrqOp& op, uint32_t cq_pos, uint32_t cq_consumed);

  // The oldest eligible entry whose masked tag agrees with `tag`; it leaves
  // the list (consumed) and its handle stays taken until release().
  struct Match {
    uint32_t handle;
    TaggedBuffer buf;
  };
  std::optional<Match> match(uint64_t tag);
  void release(uint32_t handle);  // the consuming message's last completion is out
  bool is_free(uint32_t handle) const {
    return handle < slots() && entries_[handle].state == State::kFree;
  }
  // The handles there are: max_num_tags for ibv_post_srq_ops; in mlx5's
  // format max_num_tags + 1, as mlx5's list (srq.c tm_list), whose software
  // keeps one free entry to name where the next append goes.
  uint32_t slots() const { return program_managed_ ? uint32_t(entries_.size()) : max_num_tags_; }
  // The program posts its list operations as mlx5 TAG_MATCHING WQEs and
  // keeps its own entries (mlx5dv_init_obj on the SRQ): no op limit but its
  // command QP's ring, and freed handles go nowhere.
  void adopt_mlx5_format() {
    program_managed_ = true;
    sink_ = {};
    freed_.clear();
  }
  bool program_managed() const { return program_managed_; }
  // Where freed handles go (DEL done, release()): straight into the
  // provider's shared ring once attached (abi::TmOpsHeader::freed), so it
  // finds them without asking; else kept for take_freed().
  void attach_freed(uint32_t* ring, uint32_t mask, std::atomic<uint32_t>* count) {
    sink_ = {ring, mask, count, 0};
  }
  // Handles that became free since the last call, oldest first.
  template <class Fn>
  void take_freed(Fn&& fn) {
    for (uint32_t h : freed_) fn(h);
    freed_.clear();
  }
  // Retires the ops whose signaled completion the CQ's consumer has passed.
  void retire(uint32_t cq_consumed);
  uint32_t retired() const { return retired_; }  // ops retired or refused, ever

  // An EAGER or RNDV message that matched nothing. Returns whether its
  // completion carries IBV_WC_TM_SYNC_REQ.
  bool count_unexpected();

  uint32_t live() const { return uint32_t(order_.size()); }
  uint32_t max_num_tags() const { return max_num_tags_; }
  uint32_t max_ops() const { return max_ops_; }
  uint32_t outstanding_ops() const { return outstanding_; }

 private:
  enum class State : uint8_t { kFree, kPosted, kConsumed };
  struct Entry {
    State state = State::kFree;
    bool eligible = false;  // the phase rule (rdma-core's tag_matching.md)
    uint64_t tag = 0, mask = 0;
    TaggedBuffer buf;
    std::list<uint32_t>::iterator pos;  // in order_, while posted
  };
  void sync(uint32_t unexpected_cnt);
  void give_back(uint32_t handle) {
    if (program_managed_) return;
    if (!sink_.ring) {
      freed_.push_back(handle);
      return;
    }
    sink_.ring[sink_.n++ & sink_.mask] = handle;
    sink_.count->store(sink_.n, std::memory_order_release);
  }
  OpResult refuse(int err) {
    ++retired_;
    OpResult r;
    r.err = err;
    return r;
  }

  uint32_t max_num_tags_, max_ops_;
  std::vector<Entry> entries_;
  std::vector<uint32_t> freed_;  // freed, not yet given back to the provider
  struct {
    uint32_t* ring = nullptr;
    uint32_t mask = 0;
    std::atomic<uint32_t>* count = nullptr;
    uint32_t n = 0;
  } sink_;
  std::list<uint32_t> order_;   // posted entries, oldest first
  uint32_t unexpected_ = 0;     // U: messages classified unexpected
  uint32_t synced_ = 0;         // S: software's last unexpected_cnt
  // Outstanding ops as mlx5's command QP counts them: a signaled op retires,
  // with the unsignaled ones before it, once its completion is polled.
  struct Signaled {
    uint32_t cq_pos, ops;
  };
  std::deque<Signaled> signaled_;
  uint32_t unsignaled_run_ = 0;
  uint32_t outstanding_ = 0;
  uint32_t retired_ = 0;
  bool program_managed_ = false;
};

}  // namespace uroce::device
