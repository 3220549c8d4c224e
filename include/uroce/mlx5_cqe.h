// mlx5 CQEs written from a completion and read back: what a CQ in mlx5's
// format holds (groundwork for issue 29's mlx5 queue formats: the engine
// writes these, programs that poll by hand and the drop-in libmlx5 read
// them). Layout and codes are those of rdma-core 44's <infiniband/mlx5dv.h>
// (struct mlx5_cqe64, struct mlx5_err_cqe, MLX5_CQE_*, MLX5_OPCODE_*), and
// what each field means is what providers/mlx5/cq.c reads from it
// (handle_good_req, handle_responder, mlx5_handle_error_cqe); written out
// here so that the engine needs no rdma-core header.
// Header-only, no dependencies beyond the verbs' enums.
#pragma once

#include <endian.h>
#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "uroce/mlx5_wqe.h"

namespace uroce::mlx5 {

// op_own's high nibble (MLX5_CQE_*).
enum : uint8_t {
  kCqeReq = 0,
  kCqeRespWrImm = 1,
  kCqeRespSend = 2,
  kCqeRespSendImm = 3,
  kCqeRespSendInv = 4,
  kCqeNoPacket = 6,  // a tag-matching event with no message: a list operation, a match
  kCqeReqErr = 13,
  kCqeRespErr = 14,
  kCqeInvalid = 15,
};
// A requester CQE's WQE opcode (sop_drop_qpn's top byte) beyond mlx5_wqe.h's.
// libmlx5 reads the completion opcode of UMR, NOP and MMO WQEs from its own
// per-WQE record (wq->wr_data), not from the CQE; uroce's reader, which has
// none, reads it from these codes: a window bind is UMR, a local invalidate
// LOCAL_INVAL, the DMA copy engine MMO, and a raw WQE (MLX5DV_WC_RAW_WQE)
// NOP.
enum : uint8_t {
  kOpLocalInval = 0x1b,  // MLX5_OPCODE_LOCAL_INVAL
  kOpUmr = 0x25,         // MLX5_OPCODE_UMR
  kOpMmo = 0x2f,         // MLX5_OPCODE_MMO
};

// struct mlx5_cqe64, big-endian fields; the error CQE (struct mlx5_err_cqe)
// overlays bytes 52-55 with vendor_err_synd and syndrome.
struct Cqe64 {
  uint8_t rsvd0[2];
  uint16_t wqe_id;
  uint8_t rsvd4[13];
  uint8_t ml_path;
  uint8_t rsvd20[4];
  uint16_t slid;
  uint32_t flags_rqpn;  // sl 27:24 (RoCE: 0), GRH 29:28, source QP 23:0
  uint8_t hds_ip_ext;
  uint8_t l4_hdr_type_etc;
  uint16_t vlan_info;
  uint32_t srqn_uidx;
  uint32_t imm_inval_pkey;
  uint8_t app;
  uint8_t app_op;
  uint16_t app_info;
  uint32_t byte_cnt;
  uint64_t timestamp;
  uint32_t sop_drop_qpn;  // requester: the WQE's opcode 31:24; the QPN 23:0
  uint16_t wqe_counter;
  uint8_t signature;
  uint8_t op_own;  // opcode 7:4, inline scatter 3:2, owner 0
};
static_assert(sizeof(Cqe64) == 64);
static_assert(offsetof(Cqe64, flags_rqpn) == 24 && offsetof(Cqe64, imm_inval_pkey) == 36 &&
              offsetof(Cqe64, byte_cnt) == 44 && offsetof(Cqe64, sop_drop_qpn) == 56 &&
              offsetof(Cqe64, wqe_counter) == 60 && offsetof(Cqe64, op_own) == 63);
constexpr size_t kErrVendorSyndrome = 54;  // mlx5_err_cqe.vendor_err_synd
constexpr size_t kErrSyndrome = 55;        // mlx5_err_cqe.syndrome
constexpr uint32_t kGrhInCqeFlags = 1u << 28;  // flags_rqpn: a GRH came with the packet
// uroce's own use of reserved bytes 4-11 (rsvd4, which mlx5 leaves zero on
// RoCE): the work request's wr_id, for the reader of a CQ whose QPs keep
// uroce's queues (the provider's ibv_poll_cq), where mlx5 reads its own
// per-WQE record instead. Programs that read mlx5 CQEs never look there.
constexpr size_t kCqeWrIdOffset = 4;

// Tag matching (rdma-core providers/mlx5/cq.c handle_tag_matching,
// mlx5_cq_read_wc_opcode and _flags; UCX's rc_mlx5.inl reads the same):
// app is MLX5_CQE_APP_TAG_MATCHING, app_op says what happened
// (MLX5_CQE_APP_OP_TM_*), app_info names the list entry of a match. A
// match's CQE carries the message's TMH in its first 16 bytes (tag and
// app_ctx big-endian, struct ibv_tmh); a list operation's the result
// (struct mlx5_tm_cqe: MLX5_TMC_SUCCESS, the hardware's phase count).
constexpr uint8_t kCqeAppTagMatching = 1;
enum : uint8_t {
  kAppOpConsumed = 0x1,         // matched; the data comes later (NO_PACKET)
  kAppOpExpected = 0x2,         // the data of an earlier match landed
  kAppOpUnexpected = 0x3,       // a tagged message in a WQE of the SRQ
  kAppOpNoTag = 0x4,            // an untagged one (NO_TAG, FIN, ...)
  kAppOpAppend = 0x5,           // list operations (NO_PACKET)
  kAppOpRemove = 0x6,
  kAppOpNoop = 0x7,
  kAppOpConsumedMsg = 0xA,      // matched and landed whole
  kAppOpConsumedMsgSwRndv = 0xB,  // a rendezvous request left to software
};
constexpr uint32_t kTmcSuccess = 0x80000000u;  // mlx5_tm_cqe.success
// uroce's own use, in a tag-matching CQE, of bytes that mlx5 leaves zero
// there (the first 16 may hold the TMH): the wr_id, and IBV_WC_TM_SYNC_REQ
// (which libmlx5 works out from its own counts) in bit 0 of hds_ip_ext.
constexpr size_t kTmCqeWrIdOffset = 16;
constexpr size_t kTmCqeSyncReqOffset = 28;

inline bool is_tm_opcode(unsigned op) {
  return op == IBV_WC_TM_ADD || op == IBV_WC_TM_DEL || op == IBV_WC_TM_SYNC || op == IBV_WC_TM_RECV ||
         op == IBV_WC_TM_NO_TAG;
}

// mlx5_err_cqe.syndrome (MLX5_CQE_SYNDROME_*) of each status libmlx5 tells
// apart (mlx5_handle_error_cqe); any other status reads as IBV_WC_GENERAL_ERR.
struct SyndromeOfStatus {
  uint8_t syndrome;
  ibv_wc_status status;
};
inline constexpr SyndromeOfStatus kSyndromes[] = {
    {0x01, IBV_WC_LOC_LEN_ERR},      {0x02, IBV_WC_LOC_QP_OP_ERR},     {0x04, IBV_WC_LOC_PROT_ERR},
    {0x05, IBV_WC_WR_FLUSH_ERR},     {0x06, IBV_WC_MW_BIND_ERR},       {0x10, IBV_WC_BAD_RESP_ERR},
    {0x11, IBV_WC_LOC_ACCESS_ERR},   {0x12, IBV_WC_REM_INV_REQ_ERR},   {0x13, IBV_WC_REM_ACCESS_ERR},
    {0x14, IBV_WC_REM_OP_ERR},       {0x15, IBV_WC_RETRY_EXC_ERR},     {0x16, IBV_WC_RNR_RETRY_EXC_ERR},
    {0x22, IBV_WC_REM_ABORT_ERR},
};
constexpr uint8_t kSyndromeGeneral = 0xff;  // no syndrome of its own: a general error

inline uint8_t syndrome_of(ibv_wc_status s) {
  for (const SyndromeOfStatus& e : kSyndromes)
    if (e.status == s) return e.syndrome;
  return kSyndromeGeneral;
}
inline ibv_wc_status status_of_syndrome(uint8_t syndrome) {
  for (const SyndromeOfStatus& e : kSyndromes)
    if (e.syndrome == syndrome) return e.status;
  return IBV_WC_GENERAL_ERR;
}

// What a completion says, as the verbs put it (the engine's abi::Cqe has
// these fields): the input of encode_cqe and the output of decode_cqe.
struct Completion {
  ibv_wc_status status = IBV_WC_SUCCESS;
  ibv_wc_opcode opcode = IBV_WC_SEND;
  unsigned wc_flags = 0;   // IBV_WC_WITH_IMM, _WITH_INV, _GRH
  uint32_t vendor_err = 0;
  uint32_t byte_len = 0;
  uint32_t imm = 0;        // network order; the invalidated rkey (host order) with WITH_INV
  uint32_t qp_num = 0;
  uint32_t src_qp = 0;
  uint16_t slid = 0;
  uint16_t pkey_index = 0;
  uint8_t sl = 0;
  uint8_t dlid_path_bits = 0;
  uint64_t timestamp = 0;  // the device clock
  bool send = false;       // a requester (send queue) completion
  uint16_t wqe_counter = 0;
  uint64_t wr_id = 0;      // at kCqeWrIdOffset (tag matching: kTmCqeWrIdOffset)
  // Tag matching (IBV_WC_TM_*; wc_flags IBV_WC_TM_MATCH, _DATA_VALID, _SYNC_REQ):
  uint64_t tm_tag = 0;     // IBV_WC_TM_MATCH: the TMH's
  uint32_t tm_priv = 0;    // IBV_WC_TM_MATCH: the TMH's app_ctx
  uint16_t tm_entry = 0;   // a match: the list entry (app_info)
  uint32_t srqn = 0;       // the SRQ of a receive or list operation (srqn_uidx)
};

// A requester completion's WQE opcode, from its ibv_wc opcode (the WQE that
// made it, as handle_good_req reads it back).
inline uint8_t wqe_opcode_of(ibv_wc_opcode op, unsigned wc_flags) {
  const bool imm = wc_flags & IBV_WC_WITH_IMM;
  switch (op) {
    case IBV_WC_SEND: return imm ? kOpSendImm : kOpSend;
    case IBV_WC_RDMA_WRITE: return imm ? kOpRdmaWriteImm : kOpRdmaWrite;
    case IBV_WC_RDMA_READ: return kOpRdmaRead;
    case IBV_WC_COMP_SWAP: return kOpAtomicCs;
    case IBV_WC_FETCH_ADD: return kOpAtomicFa;
    case IBV_WC_BIND_MW:
    case IBV_WC_DRIVER1: return kOpUmr;  // MLX5DV_WC_UMR: a memory registration
    case IBV_WC_LOCAL_INV: return kOpLocalInval;
    case IBV_WC_DRIVER3: return kOpMmo;  // MLX5DV_WC_MEMCPY
    default: return kOpNop;              // MLX5DV_WC_RAW_WQE (IBV_WC_DRIVER2)
  }
}

// A tag-matching completion's CQE opcode and app_op; false for one that is
// an ordinary error CQE (a failed receive), whose status mlx5 reports so.
inline bool tm_cqe_kind(const Completion& c, uint8_t* opcode, uint8_t* app_op) {
  const bool imm = c.wc_flags & IBV_WC_WITH_IMM;
  *opcode = imm ? kCqeRespSendImm : kCqeRespSend;
  const bool match = c.wc_flags & IBV_WC_TM_MATCH, data = c.wc_flags & IBV_WC_TM_DATA_VALID;
  switch (c.opcode) {
    case IBV_WC_TM_ADD:
    case IBV_WC_TM_DEL:
    case IBV_WC_TM_SYNC:
      *opcode = kCqeNoPacket;
      *app_op = c.opcode == IBV_WC_TM_ADD ? kAppOpAppend : c.opcode == IBV_WC_TM_DEL ? kAppOpRemove : kAppOpNoop;
      return c.status == IBV_WC_SUCCESS || (c.opcode == IBV_WC_TM_DEL && c.status == IBV_WC_TM_ERR);
    case IBV_WC_TM_NO_TAG: *app_op = kAppOpNoTag; return c.status == IBV_WC_SUCCESS;
    case IBV_WC_TM_RECV:
      if (match && data) {
        *app_op = c.status == IBV_WC_TM_RNDV_INCOMPLETE ? kAppOpConsumedMsgSwRndv : kAppOpConsumedMsg;
        return c.status == IBV_WC_SUCCESS || c.status == IBV_WC_TM_RNDV_INCOMPLETE;
      }
      if (match) *opcode = kCqeNoPacket;
      *app_op = match ? kAppOpConsumed : data ? kAppOpExpected : kAppOpUnexpected;
      return c.status == IBV_WC_SUCCESS;
    default: return false;
  }
}

inline void store_be(uint8_t* d, uint64_t v, int n) {
  for (int i = n - 1; i >= 0; --i, v >>= 8) d[i] = uint8_t(v);
}
inline uint64_t load_be(const uint8_t* d, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v = v << 8 | d[i];
  return v;
}

// The CQE of a tag-matching completion (tm_cqe_kind true).
inline void encode_tm_cqe(const Completion& c, uint8_t opcode, uint8_t app_op, bool owner, Cqe64* dst) {
  Cqe64 q{};
  auto* b = reinterpret_cast<uint8_t*>(&q);
  q.wqe_counter = htobe16(c.wqe_counter);
  q.timestamp = htobe64(c.timestamp);
  q.sop_drop_qpn = htobe32(c.qp_num & 0xffffff);
  q.srqn_uidx = htobe32(c.srqn & 0xffffff);
  q.app = kCqeAppTagMatching;
  q.app_op = app_op;
  if (opcode == kCqeNoPacket && app_op != kAppOpConsumed) {  // a list operation
    store_be(b, c.status == IBV_WC_SUCCESS ? kTmcSuccess : 0, 4);
  } else {
    q.byte_cnt = htobe32(c.byte_len);
    if (opcode == kCqeRespSendImm) q.imm_inval_pkey = c.imm;
    if (c.wc_flags & (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID)) q.app_info = htobe16(c.tm_entry);
    if (c.wc_flags & IBV_WC_TM_MATCH) {  // the TMH: tag and app_ctx (ibv_wc_read_tm_info)
      store_be(b + 4, c.tm_priv, 4);
      store_be(b + 8, c.tm_tag, 8);
    } else {
      q.flags_rqpn = htobe32(c.src_qp & 0xffffff);
    }
  }
  if (c.wc_flags & IBV_WC_TM_SYNC_REQ) b[kTmCqeSyncReqOffset] = 1;
  q.op_own = uint8_t(opcode << 4) | (owner ? 1 : 0);
  std::memcpy(b + kTmCqeWrIdOffset, &c.wr_id, sizeof(c.wr_id));
  std::memcpy(dst, &q, sizeof(q));
}

// The completion of a tag-matching CQE (app == kCqeAppTagMatching).
inline bool decode_tm_cqe(const Cqe64& q, Completion* c) {
  const auto* b = reinterpret_cast<const uint8_t*>(&q);
  const uint8_t opcode = q.op_own >> 4;
  std::memcpy(&c->wr_id, b + kTmCqeWrIdOffset, sizeof(c->wr_id));
  c->srqn = be32toh(q.srqn_uidx) & 0xffffff;
  if (b[kTmCqeSyncReqOffset] & 1) c->wc_flags |= IBV_WC_TM_SYNC_REQ;
  const bool ok = load_be(b, 4) & kTmcSuccess;
  switch (q.app_op) {
    case kAppOpAppend: c->opcode = IBV_WC_TM_ADD; return true;
    case kAppOpNoop: c->opcode = IBV_WC_TM_SYNC; return true;
    case kAppOpRemove:
      c->opcode = IBV_WC_TM_DEL;
      if (!ok) c->status = IBV_WC_TM_ERR;
      return true;
    default: break;
  }
  if (opcode != kCqeRespSend && opcode != kCqeRespSendImm && !(opcode == kCqeNoPacket && q.app_op == kAppOpConsumed))
    return false;
  c->byte_len = be32toh(q.byte_cnt);
  if (opcode == kCqeRespSendImm) {
    c->wc_flags |= IBV_WC_WITH_IMM;
    c->imm = q.imm_inval_pkey;
  }
  c->opcode = IBV_WC_TM_RECV;
  switch (q.app_op) {
    case kAppOpNoTag: c->opcode = IBV_WC_TM_NO_TAG; [[fallthrough]];
    case kAppOpUnexpected: c->src_qp = be32toh(q.flags_rqpn) & 0xffffff; return true;
    case kAppOpExpected: c->wc_flags |= IBV_WC_TM_DATA_VALID; break;
    case kAppOpConsumedMsgSwRndv: c->status = IBV_WC_TM_RNDV_INCOMPLETE; [[fallthrough]];
    case kAppOpConsumedMsg: c->wc_flags |= IBV_WC_TM_DATA_VALID; [[fallthrough]];
    case kAppOpConsumed:
      c->wc_flags |= IBV_WC_TM_MATCH;
      c->tm_priv = uint32_t(load_be(b + 4, 4));
      c->tm_tag = load_be(b + 8, 8);
      break;
    default: return false;
  }
  c->tm_entry = be16toh(q.app_info);
  return true;
}

// The CQE of a completion, its owner bit as given (the pass over the ring:
// (index / cqe_cnt) & 1). Every byte of dst is written.
inline void encode_cqe(const Completion& c, bool owner, Cqe64* dst) {
  if (is_tm_opcode(c.opcode)) [[unlikely]] {
    uint8_t opcode, app_op;
    if (tm_cqe_kind(c, &opcode, &app_op)) return encode_tm_cqe(c, opcode, app_op, owner, dst);
  }
  Cqe64 q{};
  q.wqe_counter = htobe16(c.wqe_counter);
  q.timestamp = htobe64(c.timestamp);
  uint8_t opcode;
  if (c.status != IBV_WC_SUCCESS) {
    opcode = c.send ? kCqeReqErr : kCqeRespErr;
    q.sop_drop_qpn = htobe32(c.qp_num & 0xffffff);
    reinterpret_cast<uint8_t*>(&q)[kErrVendorSyndrome] = uint8_t(c.vendor_err);
    reinterpret_cast<uint8_t*>(&q)[kErrSyndrome] = syndrome_of(c.status);
  } else if (c.send) {
    opcode = kCqeReq;
    q.sop_drop_qpn = htobe32(uint32_t(wqe_opcode_of(c.opcode, c.wc_flags)) << 24 | (c.qp_num & 0xffffff));
    q.byte_cnt = htobe32(c.byte_len);
  } else {
    if (c.opcode == IBV_WC_RECV_RDMA_WITH_IMM)
      opcode = kCqeRespWrImm;
    else if (c.wc_flags & IBV_WC_WITH_INV)
      opcode = kCqeRespSendInv;
    else
      opcode = c.wc_flags & IBV_WC_WITH_IMM ? kCqeRespSendImm : kCqeRespSend;
    q.byte_cnt = htobe32(c.byte_len);
    q.sop_drop_qpn = htobe32(c.qp_num & 0xffffff);
    q.slid = htobe16(c.slid);
    q.ml_path = c.dlid_path_bits & 0x7f;
    q.flags_rqpn = htobe32((c.src_qp & 0xffffff) | uint32_t(c.sl & 0xf) << 24 |
                           ((c.wc_flags & IBV_WC_GRH) ? kGrhInCqeFlags : 0));
    if (opcode == kCqeRespSendInv)
      q.imm_inval_pkey = htobe32(c.imm);
    else if (opcode != kCqeRespSend)
      q.imm_inval_pkey = c.imm;  // already in network order
    else
      q.imm_inval_pkey = htobe32(c.pkey_index);
  }
  q.op_own = uint8_t(opcode << 4) | (owner ? 1 : 0);
  std::memcpy(reinterpret_cast<uint8_t*>(&q) + kCqeWrIdOffset, &c.wr_id, sizeof(c.wr_id));
  std::memcpy(dst, &q, sizeof(q));
}

// The completion a CQE describes, as providers/mlx5/cq.c reads it; false
// for an opcode no completion has (an invalid or compressed CQE).
inline bool decode_cqe(const Cqe64& q, Completion* c) {
  *c = {};
  const uint8_t opcode = q.op_own >> 4;
  c->qp_num = be32toh(q.sop_drop_qpn) & 0xffffff;
  c->wqe_counter = be16toh(q.wqe_counter);
  c->timestamp = be64toh(q.timestamp);
  if (q.app == kCqeAppTagMatching && opcode != kCqeReqErr && opcode != kCqeRespErr) return decode_tm_cqe(q, c);
  std::memcpy(&c->wr_id, reinterpret_cast<const uint8_t*>(&q) + kCqeWrIdOffset, sizeof(c->wr_id));
  switch (opcode) {
    case kCqeReq: {
      c->send = true;
      c->byte_len = be32toh(q.byte_cnt);
      switch (be32toh(q.sop_drop_qpn) >> 24) {
        case kOpRdmaWriteImm: c->wc_flags |= IBV_WC_WITH_IMM; [[fallthrough]];
        case kOpRdmaWrite: c->opcode = IBV_WC_RDMA_WRITE; break;
        case kOpSendImm: c->wc_flags |= IBV_WC_WITH_IMM; [[fallthrough]];
        case kOpSend:
        case kOpSendInval: c->opcode = IBV_WC_SEND; break;
        case kOpRdmaRead: c->opcode = IBV_WC_RDMA_READ; break;
        case kOpAtomicCs: c->opcode = IBV_WC_COMP_SWAP; c->byte_len = 8; break;
        case kOpAtomicFa: c->opcode = IBV_WC_FETCH_ADD; c->byte_len = 8; break;
        case kOpUmr: c->opcode = IBV_WC_BIND_MW; break;
        case kOpLocalInval: c->opcode = IBV_WC_LOCAL_INV; break;
        case kOpMmo: c->opcode = IBV_WC_DRIVER3; break;
        default: c->opcode = IBV_WC_DRIVER2; break;
      }
      return true;
    }
    case kCqeRespWrImm:
    case kCqeRespSend:
    case kCqeRespSendImm:
    case kCqeRespSendInv: {
      c->byte_len = be32toh(q.byte_cnt);
      c->opcode = opcode == kCqeRespWrImm ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
      if (opcode == kCqeRespWrImm || opcode == kCqeRespSendImm) {
        c->wc_flags |= IBV_WC_WITH_IMM;
        c->imm = q.imm_inval_pkey;
      } else if (opcode == kCqeRespSendInv) {
        c->wc_flags |= IBV_WC_WITH_INV;
        c->imm = be32toh(q.imm_inval_pkey);
      }
      const uint32_t flags_rqpn = be32toh(q.flags_rqpn);
      c->src_qp = flags_rqpn & 0xffffff;
      c->sl = (flags_rqpn >> 24) & 0xf;
      if ((flags_rqpn >> 28) & 3) c->wc_flags |= IBV_WC_GRH;
      c->slid = be16toh(q.slid);
      c->dlid_path_bits = q.ml_path & 0x7f;
      c->pkey_index = be32toh(q.imm_inval_pkey) & 0xffff;
      return true;
    }
    case kCqeReqErr:
    case kCqeRespErr: {
      const auto* b = reinterpret_cast<const uint8_t*>(&q);
      c->send = opcode == kCqeReqErr;
      c->status = status_of_syndrome(b[kErrSyndrome]);
      c->vendor_err = b[kErrVendorSyndrome];
      return true;
    }
    default: return false;
  }
}

// The owner bit a CQE at free-running index i of a ring of cqe_cnt entries
// (a power of two) carries once written: software owns it when they agree.
inline bool owner_for_index(uint32_t i, uint32_t cqe_cnt) { return (i & cqe_cnt) != 0; }

}  // namespace uroce::mlx5
