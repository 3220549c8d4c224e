// mlx5 send WQEs read back into a work request: what a program that writes
// mlx5's segments itself means (mlx5dv_wr_raw_wqe; the engine reading an
// mlx5-format send queue). Layouts and codes are those of rdma-core 44's
// <infiniband/mlx5dv.h> (struct mlx5_wqe_ctrl_seg, _raddr_seg, _atomic_seg,
// _data_seg, _inl_data_seg, _datagram_seg / mlx5_wqe_av; MLX5_OPCODE_*,
// MLX5_WQE_CTRL_*, MLX5_EXTENDED_UD_AV),
// written out here so that the engine needs no rdma-core header.
// Header-only, no dependencies: shared by the drop-in libmlx5 and the engine.
#pragma once

#include <endian.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace uroce::mlx5 {

// mlx5_wqe_ctrl_seg's opcode byte (MLX5_OPCODE_*).
enum : uint8_t {
  kOpNop = 0x00,
  kOpSendInval = 0x01,
  kOpRdmaWrite = 0x08,
  kOpRdmaWriteImm = 0x09,
  kOpSend = 0x0a,
  kOpSendImm = 0x0b,
  kOpRdmaRead = 0x10,
  kOpAtomicCs = 0x11,
  kOpAtomicFa = 0x12,
  kOpTagMatching = 0x28,  // a tag-list operation on the SRQ of the QP it is posted to
};
// fm_ce_se (MLX5_WQE_CTRL_*).
enum : uint8_t {
  kCtrlSolicited = 1 << 1,
  kCtrlCqUpdate = 2 << 2,
  kCtrlSmallFence = 1 << 5,
  kCtrlFence = 4 << 5,
};
constexpr uint32_t kInlineSeg = 0x80000000u;  // MLX5_INLINE_SEG, in byte_count
constexpr size_t kSegBytes = 16;              // the unit of qpn_ds's ds
constexpr uint32_t kMaxDecodedSges = 30;      // ds is 6 bits: 63 units less ctrl and raddr/atomic

// The fields of mlx5_wqe_ctrl_seg (16 bytes, big-endian words).
struct CtrlSeg {
  uint32_t opmod_idx_opcode;
  uint32_t qpn_ds;
  uint8_t signature;
  uint8_t stream_id[2];
  uint8_t fm_ce_se;
  uint32_t imm;
};
static_assert(sizeof(CtrlSeg) == kSegBytes);

// mlx5_wqe_av (big-endian fields): the datagram segment of a UD WQE or a
// DCI's, and what mlx5dv_init_obj hands out for an AH, which programs copy
// into their WQEs (UCX's ud_mlx5 and dc_mlx5).
struct WqeAv {
  uint32_t qkey;  // key.qkey.qkey; a DCI's: key.dc_key, these 8 bytes
  uint32_t key_reserved;
  uint32_t dqp_dct;  // the destination QP, kExtendedUdAv
  uint8_t stat_rate_sl;  // Ethernet: the static rate 7:4, the SL 3:1 (verbs.c mlx5_create_ah)
  uint8_t fl_mlid;
  uint16_t rlid;  // RoCEv2: the UDP source port (mlx5_ah_set_udp_sport)
  uint8_t reserved0[4];
  uint8_t rmac[6];
  uint8_t tclass;
  uint8_t hop_limit;
  uint32_t grh_gid_fl;  // the SGID index 27:20, the flow label 19:0
  uint8_t rgid[16];
};
static_assert(sizeof(WqeAv) == 48 && offsetof(WqeAv, dqp_dct) == 8 && offsetof(WqeAv, rlid) == 14 &&
              offsetof(WqeAv, rmac) == 20 && offsetof(WqeAv, grh_gid_fl) == 28 && offsetof(WqeAv, rgid) == 32);
constexpr uint32_t kExtendedUdAv = 0x80000000u;  // MLX5_EXTENDED_UD_AV: the AV has its GRH half
constexpr size_t kCompactAvBytes = 16;           // an AV without it (InfiniBand without a GRH)

// Where a UD or DCI WQE goes: its datagram segment's address, in host order.
struct Datagram {
  uint32_t remote_qpn;  // a DCI's: the DCT's number
  uint32_t qkey;
  uint64_t dc_key;      // a DCI's: the DCT's access key
  uint8_t dgid[16];
  uint32_t flow_label;
  uint8_t sgid_index, hop_limit, traffic_class, sl;
  uint16_t udp_sport;
};

// The datagram segment of an address (libmlx5's create_ah and
// set_datagram_seg in one: verbs.c mlx5_create_ah on Ethernet, qp.c
// _set_datagram_seg).
inline void encode_av(const Datagram& d, WqeAv* av) {
  *av = WqeAv{};
  av->qkey = htobe32(d.qkey);
  av->dqp_dct = htobe32((d.remote_qpn & 0xffffff) | kExtendedUdAv);
  av->stat_rate_sl = uint8_t((d.sl & 0x7) << 1);
  av->rlid = htobe16(d.udp_sport);
  av->tclass = d.traffic_class;
  av->hop_limit = d.hop_limit;
  av->grh_gid_fl = htobe32(uint32_t(d.sgid_index) << 20 | (d.flow_label & 0xfffff));
  std::memcpy(av->rgid, d.dgid, 16);
}

// A decoded send WQE: an ibv_wr_opcode with its ibv_send_flags and
// arguments, and its data: inline bytes (pointers into the WQE), SGEs, or
// inline bytes then SGEs (UCX's rc_mlx5 sends an active message's header
// inline and its payload by pointer), in that order in the message.
// IBV_SEND_INLINE is set when all of it is inline.
struct DecodedSend {
  ibv_wr_opcode opcode;
  unsigned send_flags;  // IBV_SEND_SIGNALED, _SOLICITED, _FENCE, _INLINE
  uint32_t imm;         // network order; the R_Key (host order) for SEND_WITH_INV
  uint64_t remote_addr;
  uint32_t rkey;
  uint64_t compare_add, swap;
  uint32_t num_sge;
  ibv_sge sge[kMaxDecodedSges];
  uint32_t num_inline;
  ibv_data_buf inline_bufs[kMaxDecodedSges];
  Datagram datagram;  // a UD or DCI WQE's
};

// What follows a WQE's control segment before its operation's segments.
enum class WqeAddress : uint8_t {
  kNone,  // RC, UC: nothing
  kUd,    // UD: a datagram segment; SEND with or without immediate only
  kDc,    // a DCI: a datagram segment whose key is the DCT's; RC's operations
};

// Reads the WQE at `wqe` (its size is ds * 16 bytes, from the control
// segment; at most `bytes` are read). 0, or EINVAL for what this device does
// not take: an opcode other than the RC/UC ones above (NOP, UMR, TSO, ...),
// a size that does not hold its segments, inline data after a data segment.
// With a datagram segment (`address`), an AV without its GRH half is
// refused too (RoCE routes by the GID: mlx5_create_ah refuses an AH without
// a GRH on Ethernet, so libmlx5 never writes one there).
inline int decode_send_wqe(const void* wqe, size_t bytes, DecodedSend* out,
                           WqeAddress address = WqeAddress::kNone) {
  const auto* p = static_cast<const uint8_t*>(wqe);
  if (bytes < kSegBytes) return EINVAL;
  CtrlSeg ctrl;
  std::memcpy(&ctrl, p, sizeof(ctrl));
  const size_t size = size_t(be32toh(ctrl.qpn_ds) & 0x3f) * kSegBytes;
  if (size < kSegBytes || size > bytes) return EINVAL;
  *out = DecodedSend{};
  const uint8_t fm_ce_se = ctrl.fm_ce_se;
  if (fm_ce_se & kCtrlCqUpdate) out->send_flags |= IBV_SEND_SIGNALED;
  if (fm_ce_se & kCtrlSolicited) out->send_flags |= IBV_SEND_SOLICITED;
  if (fm_ce_se & (kCtrlFence | kCtrlSmallFence)) out->send_flags |= IBV_SEND_FENCE;
  size_t at = kSegBytes;
  auto take_raddr = [&]() {
    if (size - at < kSegBytes) return false;
    uint64_t raddr;
    uint32_t rkey;
    std::memcpy(&raddr, p + at, 8);
    std::memcpy(&rkey, p + at + 8, 4);
    out->remote_addr = be64toh(raddr);
    out->rkey = be32toh(rkey);
    at += kSegBytes;
    return true;
  };
  if (address != WqeAddress::kNone) {
    const uint8_t op = be32toh(ctrl.opmod_idx_opcode) & 0xff;
    if (address == WqeAddress::kUd && op != kOpSend && op != kOpSendImm) return EINVAL;
    WqeAv av;
    if (size - at < kCompactAvBytes) return EINVAL;
    std::memcpy(&av, p + at, kCompactAvBytes);
    if (!(be32toh(av.dqp_dct) & kExtendedUdAv) || size - at < sizeof(av)) return EINVAL;
    std::memcpy(&av, p + at, sizeof(av));
    at += sizeof(av);
    Datagram& d = out->datagram;
    d.remote_qpn = be32toh(av.dqp_dct) & 0xffffff;
    d.qkey = be32toh(av.qkey);
    uint64_t dc_key;
    std::memcpy(&dc_key, &av, 8);
    d.dc_key = be64toh(dc_key);
    std::memcpy(d.dgid, av.rgid, 16);
    const uint32_t gid_fl = be32toh(av.grh_gid_fl);
    d.flow_label = gid_fl & 0xfffff;
    d.sgid_index = uint8_t(gid_fl >> 20);
    d.hop_limit = av.hop_limit;
    d.traffic_class = av.tclass;
    d.sl = (av.stat_rate_sl >> 1) & 0x7;
    d.udp_sport = be16toh(av.rlid);
  }
  switch (be32toh(ctrl.opmod_idx_opcode) & 0xff) {
    case kOpSend: out->opcode = IBV_WR_SEND; break;
    case kOpSendImm:
      out->opcode = IBV_WR_SEND_WITH_IMM;
      out->imm = ctrl.imm;
      break;
    case kOpSendInval:
      out->opcode = IBV_WR_SEND_WITH_INV;
      out->imm = be32toh(ctrl.imm);
      break;
    case kOpRdmaWrite:
    case kOpRdmaWriteImm:
    case kOpRdmaRead: {
      const uint8_t op = be32toh(ctrl.opmod_idx_opcode) & 0xff;
      out->opcode = op == kOpRdmaWrite ? IBV_WR_RDMA_WRITE : op == kOpRdmaRead ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE_WITH_IMM;
      if (op == kOpRdmaWriteImm) out->imm = ctrl.imm;
      if (!take_raddr()) return EINVAL;
      break;
    }
    case kOpAtomicCs:
    case kOpAtomicFa: {
      const bool cs = (be32toh(ctrl.opmod_idx_opcode) & 0xff) == kOpAtomicCs;
      out->opcode = cs ? IBV_WR_ATOMIC_CMP_AND_SWP : IBV_WR_ATOMIC_FETCH_AND_ADD;
      if (!take_raddr() || size - at < kSegBytes) return EINVAL;
      uint64_t swap_add, compare;
      std::memcpy(&swap_add, p + at, 8);
      std::memcpy(&compare, p + at + 8, 8);
      // mlx5_wqe_atomic_seg: swap_add, then compare (for fetch-and-add unused).
      out->compare_add = cs ? be64toh(compare) : be64toh(swap_add);
      out->swap = cs ? be64toh(swap_add) : 0;
      at += kSegBytes;
      break;
    }
    default: return EINVAL;
  }
  // The data: data segments, or inline segments (each its byte count with
  // MLX5_INLINE_SEG, then the bytes, padded to 16).
  while (at < size) {
    uint32_t count;
    std::memcpy(&count, p + at, 4);
    count = be32toh(count);
    if (count & kInlineSeg) {
      const uint32_t len = count & ~kInlineSeg;
      if (out->num_sge || out->num_inline == kMaxDecodedSges || size - at - 4 < len) return EINVAL;
      out->inline_bufs[out->num_inline++] = {const_cast<uint8_t*>(p + at + 4), len};
      at += (4 + size_t(len) + kSegBytes - 1) / kSegBytes * kSegBytes;
    } else {
      if (out->num_sge == kMaxDecodedSges || size - at < kSegBytes) return EINVAL;
      uint32_t lkey;
      uint64_t addr;
      std::memcpy(&lkey, p + at + 4, 4);
      std::memcpy(&addr, p + at + 8, 8);
      out->sge[out->num_sge++] = {be64toh(addr), count, be32toh(lkey)};
      at += kSegBytes;
    }
  }
  if (out->num_inline && !out->num_sge) out->send_flags |= IBV_SEND_INLINE;
  return 0;
}

// A TAG_MATCHING WQE (MLX5_OPCODE_TAG_MATCHING): what software posts on the
// command QP of a tag-matching SRQ to change its tag list (rdma-core's
// providers/mlx5/qp.c mlx5_post_srq_ops and set_tm_seg; UCX's
// rc_mlx5.inl uct_rc_mlx5_iface_common_post_srq_op): the control segment,
// struct mlx5_wqe_tm_seg, and for an append the buffer's data segment.
// mlx5_wqe_tm_seg's opcode (its high nibble: MLX5_TM_OPCODE_*) and flags
// (MLX5_SRQ_FLAG_TM_*, providers/mlx5/mlx5.h).
enum : uint8_t { kTmNop = 0, kTmAppend = 1, kTmRemove = 2 };
enum : uint8_t {
  kTmFlagSwCnt = 1 << 6,   // sw_cnt is software's count of unexpected messages
  kTmFlagCqeReq = 1 << 7,  // the operation completes with a CQE
};
struct TmSeg {
  uint8_t opcode;
  uint8_t flags;
  uint16_t index;  // append: the list entry the NEXT append fills; remove: the entry
  uint8_t rsvd0[2];
  uint16_t sw_cnt;
  uint8_t rsvd1[8];
  uint64_t append_tag;
  uint64_t append_mask;
};
static_assert(sizeof(TmSeg) == 32 && offsetof(TmSeg, sw_cnt) == 6 && offsetof(TmSeg, append_tag) == 16);
constexpr uint32_t kInvalidLkey = 0x100;  // MLX5_INVALID_LKEY: an append without a buffer

struct DecodedTagOp {
  uint8_t op;     // kTmNop, kTmAppend, kTmRemove
  uint8_t flags;  // kTmFlag*
  uint16_t index, sw_cnt;
  uint64_t tag, mask;  // host order (the segment's are big-endian)
  bool has_buffer;     // an append's data segment names bytes
  ibv_sge buffer;
};

// Reads a TAG_MATCHING WQE at `wqe` (at most `bytes`): 0, or EINVAL for a
// WQE too short for its segments or an unknown list opcode.
inline int decode_tag_wqe(const void* wqe, size_t bytes, DecodedTagOp* out) {
  const auto* p = static_cast<const uint8_t*>(wqe);
  if (bytes < kSegBytes + sizeof(TmSeg)) return EINVAL;
  CtrlSeg ctrl;
  std::memcpy(&ctrl, p, sizeof(ctrl));
  const size_t size = size_t(be32toh(ctrl.qpn_ds) & 0x3f) * kSegBytes;
  if (size < kSegBytes + sizeof(TmSeg) || size > bytes) return EINVAL;
  TmSeg tm;
  std::memcpy(&tm, p + kSegBytes, sizeof(tm));
  *out = DecodedTagOp{};
  out->op = tm.opcode >> 4;
  if (out->op > kTmRemove) return EINVAL;
  out->flags = tm.flags;
  out->index = be16toh(tm.index);
  out->sw_cnt = be16toh(tm.sw_cnt);
  out->tag = be64toh(tm.append_tag);
  out->mask = be64toh(tm.append_mask);
  const size_t data_at = kSegBytes + sizeof(TmSeg);
  if (out->op == kTmAppend && size >= data_at + kSegBytes) {
    uint32_t count, lkey;
    uint64_t addr;
    std::memcpy(&count, p + data_at, 4);
    std::memcpy(&lkey, p + data_at + 4, 4);
    std::memcpy(&addr, p + data_at + 8, 8);
    out->buffer = {be64toh(addr), be32toh(count), be32toh(lkey)};
    // set_data_ptr_seg_end: an empty message's buffer (byte count 0, MLX5_INVALID_LKEY).
    out->has_buffer = out->buffer.length != 0 && out->buffer.lkey != kInvalidLkey;
  }
  return 0;
}

}  // namespace uroce::mlx5
