// Tag list operations and matching of a TM-SRQ (see tag_matching.h).
#include "device/tag_matching.h"

#include <infiniband/verbs.h>

#include <cerrno>

#include "device/params.h"

namespace uroce::device {

std::optional<Tmh> parse_tmh(const uint8_t* d, size_t len) {
  if (len < kTmhSize) return std::nullopt;
  Tmh h;
  h.opcode = d[0];
  for (int i = 4; i < 8; ++i) h.app_ctx = h.app_ctx << 8 | d[i];
  for (int i = 8; i < 16; ++i) h.tag = h.tag << 8 | d[i];
  return h;
}

namespace {
uint64_t load_be(const uint8_t* d, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v = v << 8 | d[i];
  return v;
}
void store_be(uint8_t* d, uint64_t v, int n) {
  for (int i = n - 1; i >= 0; --i, v >>= 8) d[i] = uint8_t(v);
}
}  // namespace

std::optional<Rvh> parse_rvh(const uint8_t* d, size_t len) {
  if (len < kTmhSize + kRvhSize) return std::nullopt;
  d += kTmhSize;
  return Rvh{load_be(d, 8), uint32_t(load_be(d + 8, 4)), uint32_t(load_be(d + 12, 4))};
}

void write_fin(uint8_t* out, const Tmh& tmh, const Rvh& rvh) {
  out[0] = IBV_TMH_FIN;
  out[1] = out[2] = out[3] = 0;
  store_be(out + 4, tmh.app_ctx, 4);
  store_be(out + 8, tmh.tag, 8);
  store_be(out + 16, rvh.va, 8);
  store_be(out + 24, rvh.rkey, 4);
  store_be(out + 28, rvh.len, 4);
}

TagList::TagList(uint32_t max_num_tags, uint32_t max_ops)
    : max_num_tags_(max_num_tags), max_ops_(max_ops), entries_(size_t(max_num_tags) + 1) {}

void TagList::sync(uint32_t unexpected_cnt) {
  synced_ = unexpected_cnt;
  if (synced_ != unexpected_) return;
  for (uint32_t h : order_) entries_[h].eligible = true;  // held entries join the list
}

void TagList::retire(uint32_t cq_consumed) {
  while (!signaled_.empty() && int32_t(cq_consumed - signaled_.front().cq_pos) > 0) {
    outstanding_ -= signaled_.front().ops;
    retired_ += signaled_.front().ops;
    signaled_.pop_front();
  }
}

TagList::OpResult TagList::post(const abi::SrqOp& op, uint32_t cq_pos, uint32_t cq_consumed) {
  if (op.opcode > IBV_WR_TAG_SYNC || (op.flags & ~uint32_t(IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC)))
    return refuse(EINVAL);
  if (!program_managed_) {
    retire(cq_consumed);
    // mlx5_post_srq_ops: the command QP is full (max_ops WQEs not yet retired).
    if (outstanding_ >= max_ops_) return refuse(ENOMEM);
  }
  OpResult r;
  abi::Cqe& c = r.cqe;
  c.wr_id = op.wr_id;
  c.status = IBV_WC_SUCCESS;
  switch (op.opcode) {
    case IBV_WR_TAG_ADD: {
      // More SGEs than tm_caps.max_sge is EINVAL (rdma-core providers/mlx5/
      // qp.c mlx5_post_srq_ops checks it in debug builds only; always here).
      // A full list is ENOMEM.
      if (op.num_sge > kTmMaxSge || !is_free(op.handle)) return refuse(EINVAL);
      if (op.flags & IBV_OPS_TM_SYNC) sync(op.unexpected_cnt);
      r.handle = op.handle;
      Entry& e = entries_[r.handle];
      e.state = State::kPosted;
      e.tag = op.tag;
      e.mask = op.mask;
      e.buf = {op.recv_wr_id, op.num_sge, op.sge};
      // Added while software has not seen every unexpected message: held
      // out of matching until a sync brings the counts together, and its
      // completion asks for that sync (rdma-core's tag_matching.md: matching
      // is disabled for new tags until software and hardware synchronize).
      e.eligible = synced_ == unexpected_;
      e.pos = order_.insert(order_.end(), r.handle);
      c.opcode = IBV_WC_TM_ADD;
      if (!e.eligible) c.wc_flags = IBV_WC_TM_SYNC_REQ;
      break;
    }
    case IBV_WR_TAG_DEL: {
      if (op.handle >= slots()) return refuse(EINVAL);
      if (op.flags & IBV_OPS_TM_SYNC) sync(op.unexpected_cnt);
      Entry& e = entries_[op.handle];
      c.opcode = IBV_WC_TM_DEL;
      if (e.state == State::kPosted) {
        order_.erase(e.pos);
        e.state = State::kFree;
        give_back(op.handle);
        if (!e.eligible) c.wc_flags = IBV_WC_TM_SYNC_REQ;
      } else {
        // Consumed by a message meanwhile (or never posted): the hardware
        // answers with an error completion (mlx5 cq.c, IBV_WC_TM_ERR).
        c.status = IBV_WC_TM_ERR;
        c.vendor_err = IBV_WC_TM_ERR;
      }
      break;
    }
    case IBV_WR_TAG_SYNC:
      if (op.flags & IBV_OPS_TM_SYNC) sync(op.unexpected_cnt);
      c.opcode = IBV_WC_TM_SYNC;
      break;
  }
  // An error completion is reported even unsignaled, as a failed send WQE is.
  r.signaled = (op.flags & IBV_OPS_SIGNALED) || c.status != IBV_WC_SUCCESS;
  if (program_managed_) {
    ++retired_;
    return r;
  }
  ++outstanding_;
  ++unsignaled_run_;
  if (r.signaled) {
    signaled_.push_back({cq_pos, unsignaled_run_});
    unsignaled_run_ = 0;
  }
  return r;
}

std::optional<TagList::Match> TagList::match(uint64_t tag) {
  for (uint32_t h : order_) {
    Entry& e = entries_[h];
    // The bits the entry's mask selects agree (man ibv_post_srq_ops(3)).
    if (!e.eligible || ((tag ^ e.tag) & e.mask) != 0) continue;
    order_.erase(e.pos);
    e.state = State::kConsumed;
    return Match{h, e.buf};
  }
  return std::nullopt;
}

void TagList::release(uint32_t handle) {
  if (handle >= slots() || entries_[handle].state != State::kConsumed) return;
  entries_[handle].state = State::kFree;
  give_back(handle);
}

bool TagList::count_unexpected() {
  ++unexpected_;
  return unexpected_ - synced_ > kTmSyncReqUnexpected;
}

}  // namespace uroce::device
