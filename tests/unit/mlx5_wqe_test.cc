// include/uroce/mlx5_wqe.h: mlx5 send WQEs, as a program that builds them
// itself writes them (rdma-core 44's <infiniband/mlx5dv.h> layouts, built
// here with its own structs and helpers), read back into work requests.
#include "uroce/mlx5_wqe.h"

#include <gtest/gtest.h>
#include <infiniband/mlx5dv.h>

#include <cstring>

namespace uroce::mlx5 {
namespace {

// A WQE of up to 8 units: the control segment, then what each test adds.
struct Builder {
  alignas(16) uint8_t bytes[8 * 16] = {};
  unsigned units = 1;
  mlx5_wqe_ctrl_seg* ctrl() { return reinterpret_cast<mlx5_wqe_ctrl_seg*>(bytes); }
  void* next() { return bytes + 16 * units++; }
  void finish(uint8_t opcode, uint8_t fm_ce_se, uint32_t imm = 0) {
    mlx5dv_set_ctrl_seg(ctrl(), 5, opcode, 0, 0x1234, fm_ce_se, uint8_t(units), 0, imm);
  }
};

TEST(Mlx5Wqe, SendWithTwoDataSegmentsAndItsFlags) {
  Builder b;
  mlx5dv_set_data_seg(static_cast<mlx5_wqe_data_seg*>(b.next()), 100, 0x11, 0x1000);
  mlx5dv_set_data_seg(static_cast<mlx5_wqe_data_seg*>(b.next()), 28, 0x22, 0x2000);
  b.finish(MLX5_OPCODE_SEND, MLX5_WQE_CTRL_CQ_UPDATE | MLX5_WQE_CTRL_SOLICITED);
  DecodedSend d;
  ASSERT_EQ(decode_send_wqe(b.bytes, sizeof(b.bytes), &d), 0);
  EXPECT_EQ(d.opcode, IBV_WR_SEND);
  EXPECT_EQ(d.send_flags, unsigned(IBV_SEND_SIGNALED | IBV_SEND_SOLICITED));
  ASSERT_EQ(d.num_sge, 2u);
  EXPECT_EQ(d.sge[0].addr, 0x1000u);
  EXPECT_EQ(d.sge[0].length, 100u);
  EXPECT_EQ(d.sge[0].lkey, 0x11u);
  EXPECT_EQ(d.sge[1].addr, 0x2000u);
  EXPECT_EQ(d.num_inline, 0u);
}

TEST(Mlx5Wqe, WriteWithImmediateAndInlineData) {
  Builder b;
  auto* raddr = static_cast<mlx5_wqe_raddr_seg*>(b.next());
  raddr->raddr = htobe64(0xabcdef00);
  raddr->rkey = htobe32(0x77);
  // Inline: byte count with MLX5_INLINE_SEG, 20 bytes, padded to 32.
  auto* inl = static_cast<uint8_t*>(b.next());
  b.next();
  const uint32_t count = htobe32(20 | MLX5_INLINE_SEG);
  std::memcpy(inl, &count, 4);
  std::memcpy(inl + 4, "twenty bytes of data", 20);
  b.finish(MLX5_OPCODE_RDMA_WRITE_IMM, MLX5_WQE_CTRL_FENCE, htobe32(0xfeed));
  DecodedSend d;
  ASSERT_EQ(decode_send_wqe(b.bytes, sizeof(b.bytes), &d), 0);
  EXPECT_EQ(d.opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
  EXPECT_EQ(d.remote_addr, 0xabcdef00u);
  EXPECT_EQ(d.rkey, 0x77u);
  EXPECT_EQ(d.imm, htobe32(0xfeed));
  EXPECT_EQ(d.send_flags, unsigned(IBV_SEND_FENCE | IBV_SEND_INLINE));
  ASSERT_EQ(d.num_inline, 1u);
  EXPECT_EQ(d.inline_bufs[0].length, 20u);
  EXPECT_EQ(std::memcmp(d.inline_bufs[0].addr, "twenty bytes of data", 20), 0);
}

TEST(Mlx5Wqe, AtomicsTakeSwapAddThenCompare) {
  Builder b;
  auto* raddr = static_cast<mlx5_wqe_raddr_seg*>(b.next());
  raddr->raddr = htobe64(0x5000);
  raddr->rkey = htobe32(9);
  auto* atomic = static_cast<mlx5_wqe_atomic_seg*>(b.next());
  atomic->swap_add = htobe64(111);
  atomic->compare = htobe64(222);
  mlx5dv_set_data_seg(static_cast<mlx5_wqe_data_seg*>(b.next()), 8, 3, 0x6000);
  b.finish(MLX5_OPCODE_ATOMIC_CS, 0);
  DecodedSend d;
  ASSERT_EQ(decode_send_wqe(b.bytes, sizeof(b.bytes), &d), 0);
  EXPECT_EQ(d.opcode, IBV_WR_ATOMIC_CMP_AND_SWP);
  EXPECT_EQ(d.compare_add, 222u);
  EXPECT_EQ(d.swap, 111u);
  EXPECT_EQ(d.send_flags, 0u);
  b.finish(MLX5_OPCODE_ATOMIC_FA, 0);
  ASSERT_EQ(decode_send_wqe(b.bytes, sizeof(b.bytes), &d), 0);
  EXPECT_EQ(d.opcode, IBV_WR_ATOMIC_FETCH_AND_ADD);
  EXPECT_EQ(d.compare_add, 111u);  // the addend
}

TEST(Mlx5Wqe, RefusesWhatNoWorkRequestSays) {
  Builder b;
  b.finish(MLX5_OPCODE_NOP, 0);
  DecodedSend d;
  EXPECT_EQ(decode_send_wqe(b.bytes, sizeof(b.bytes), &d), EINVAL);
  // A WRITE whose size has no room for its remote address.
  Builder w;
  w.finish(MLX5_OPCODE_RDMA_WRITE, 0);
  EXPECT_EQ(decode_send_wqe(w.bytes, sizeof(w.bytes), &d), EINVAL);
  // More units than the bytes given.
  Builder big;
  for (int i = 0; i < 3; ++i) big.next();
  big.finish(MLX5_OPCODE_SEND, 0);
  EXPECT_EQ(decode_send_wqe(big.bytes, 32, &d), EINVAL);
  // Inline data after a data segment.
  Builder mixed;
  mlx5dv_set_data_seg(static_cast<mlx5_wqe_data_seg*>(mixed.next()), 8, 3, 0x6000);
  auto* inl = static_cast<uint8_t*>(mixed.next());
  const uint32_t count = htobe32(4 | MLX5_INLINE_SEG);
  std::memcpy(inl, &count, 4);
  mixed.finish(MLX5_OPCODE_SEND, 0);
  EXPECT_EQ(decode_send_wqe(mixed.bytes, sizeof(mixed.bytes), &d), EINVAL);
}

// UCX's rc_mlx5 active message by pointer (uct_rc_mlx5_ep_am_zcopy): its
// header inline, then the payload's data segment; all inline is INLINE.
TEST(Mlx5Wqe, InlineHeaderThenDataSegment) {
  Builder b;
  auto* inl = static_cast<uint8_t*>(b.next());
  const uint32_t count = htobe32(10 | MLX5_INLINE_SEG);
  std::memcpy(inl, &count, 4);
  std::memcpy(inl + 4, "0123456789", 10);
  mlx5dv_set_data_seg(static_cast<mlx5_wqe_data_seg*>(b.next()), 8184, 0x12a6, 0x7000);
  b.finish(MLX5_OPCODE_SEND, MLX5_WQE_CTRL_CQ_UPDATE);
  DecodedSend d;
  ASSERT_EQ(decode_send_wqe(b.bytes, sizeof(b.bytes), &d), 0);
  EXPECT_EQ(d.opcode, IBV_WR_SEND);
  EXPECT_EQ(d.send_flags, unsigned(IBV_SEND_SIGNALED)) << "not all of it inline";
  ASSERT_EQ(d.num_inline, 1u);
  EXPECT_EQ(d.inline_bufs[0].length, 10u);
  EXPECT_EQ(std::memcmp(d.inline_bufs[0].addr, "0123456789", 10), 0);
  ASSERT_EQ(d.num_sge, 1u);
  EXPECT_EQ(d.sge[0].addr, 0x7000u);
  EXPECT_EQ(d.sge[0].length, 8184u);
  EXPECT_EQ(d.sge[0].lkey, 0x12a6u);
}

// A UD WQE: the datagram segment (mlx5_wqe_av, as libmlx5's create_ah and
// set_datagram_seg fill it on Ethernet) names the destination; encode_av
// writes what libmlx5 would, and decoding gives it back.
TEST(Mlx5Wqe, DatagramSegmentOfAUdSend) {
  Datagram want{};
  want.remote_qpn = 0x123456;
  want.qkey = 0x11111111;
  for (int i = 0; i < 16; ++i) want.dgid[i] = uint8_t(0xf0 + i);
  want.flow_label = 0xabcde;
  want.sgid_index = 3;
  want.hop_limit = 64;
  want.traffic_class = 0x28;
  want.sl = 5;
  want.udp_sport = 0xc123;
  Builder b;
  auto* av = static_cast<mlx5_wqe_av*>(b.next());
  b.next();
  b.next();
  static_assert(sizeof(mlx5_wqe_av) == sizeof(WqeAv));
  encode_av(want, reinterpret_cast<WqeAv*>(av));
  // mlx5dv.h's names for the same bytes, as verbs.c mlx5_create_ah sets them.
  EXPECT_EQ(be32toh(av->dqp_dct), 0x123456u | MLX5_EXTENDED_UD_AV);
  EXPECT_EQ(be32toh(av->key.qkey.qkey), 0x11111111u);
  EXPECT_EQ(av->stat_rate_sl, 5 << 1) << "Ethernet: the SL in bits 3:1";
  EXPECT_EQ(be32toh(av->grh_gid_fl), 3u << 20 | 0xabcde);
  EXPECT_EQ(be16toh(av->rlid), 0xc123) << "RoCEv2: the UDP source port";
  mlx5dv_set_data_seg(static_cast<mlx5_wqe_data_seg*>(b.next()), 64, 0x9, 0x4000);
  b.finish(MLX5_OPCODE_SEND_IMM, MLX5_WQE_CTRL_CQ_UPDATE, htobe32(7));
  DecodedSend d;
  ASSERT_EQ(decode_send_wqe(b.bytes, sizeof(b.bytes), &d, WqeAddress::kUd), 0);
  EXPECT_EQ(d.opcode, IBV_WR_SEND_WITH_IMM);
  ASSERT_EQ(d.num_sge, 1u);
  EXPECT_EQ(d.sge[0].addr, 0x4000u);
  const Datagram& got = d.datagram;
  EXPECT_EQ(got.remote_qpn, want.remote_qpn);
  EXPECT_EQ(got.qkey, want.qkey);
  EXPECT_EQ(std::memcmp(got.dgid, want.dgid, 16), 0);
  EXPECT_EQ(got.flow_label, want.flow_label);
  EXPECT_EQ(got.sgid_index, want.sgid_index);
  EXPECT_EQ(got.hop_limit, want.hop_limit);
  EXPECT_EQ(got.traffic_class, want.traffic_class);
  EXPECT_EQ(got.sl, want.sl);
  EXPECT_EQ(got.udp_sport, want.udp_sport);

  // Not a SEND, or an AV without its GRH half (RoCE cannot route it), or a
  // WQE too short for the AV: refused.
  b.finish(MLX5_OPCODE_RDMA_WRITE, 0);
  EXPECT_EQ(decode_send_wqe(b.bytes, sizeof(b.bytes), &d, WqeAddress::kUd), EINVAL);
  b.finish(MLX5_OPCODE_SEND, 0);
  av->dqp_dct = htobe32(0x123456);
  EXPECT_EQ(decode_send_wqe(b.bytes, sizeof(b.bytes), &d, WqeAddress::kUd), EINVAL);
  av->dqp_dct = htobe32(0x123456 | MLX5_EXTENDED_UD_AV);
  Builder shorter;
  std::memcpy(shorter.bytes, b.bytes, sizeof(b.bytes));
  mlx5dv_set_ctrl_seg(shorter.ctrl(), 5, MLX5_OPCODE_SEND, 0, 0x1234, 0, 2, 0, 0);
  EXPECT_EQ(decode_send_wqe(shorter.bytes, sizeof(shorter.bytes), &d, WqeAddress::kUd), EINVAL);
  EXPECT_EQ(decode_send_wqe(b.bytes, sizeof(b.bytes), &d, WqeAddress::kUd), 0);
}

// A DCI's WQE (UCX's dc_mlx5): the datagram segment names the DCT by number
// and carries its key in the AV's first 8 bytes, and any RC operation
// follows it.
TEST(Mlx5Wqe, DatagramSegmentOfADciWrite) {
  Builder b;
  auto* av = static_cast<mlx5_wqe_av*>(b.next());
  b.next();
  b.next();
  Datagram to{};
  to.remote_qpn = 0x4321;
  to.sgid_index = 1;
  to.hop_limit = 1;
  for (int i = 0; i < 16; ++i) to.dgid[i] = uint8_t(i);
  encode_av(to, reinterpret_cast<WqeAv*>(av));
  av->key.dc_key = htobe64(0x1ee7a330u);
  auto* raddr = static_cast<mlx5_wqe_raddr_seg*>(b.next());
  raddr->raddr = htobe64(0x7000);
  raddr->rkey = htobe32(0x55);
  mlx5dv_set_data_seg(static_cast<mlx5_wqe_data_seg*>(b.next()), 100, 0x9, 0x4000);
  b.finish(MLX5_OPCODE_RDMA_WRITE, MLX5_WQE_CTRL_CQ_UPDATE);
  DecodedSend d;
  ASSERT_EQ(decode_send_wqe(b.bytes, sizeof(b.bytes), &d, WqeAddress::kDc), 0);
  EXPECT_EQ(d.opcode, IBV_WR_RDMA_WRITE);
  EXPECT_EQ(d.remote_addr, 0x7000u);
  EXPECT_EQ(d.rkey, 0x55u);
  ASSERT_EQ(d.num_sge, 1u);
  EXPECT_EQ(d.sge[0].length, 100u);
  EXPECT_EQ(d.datagram.remote_qpn, 0x4321u);
  EXPECT_EQ(d.datagram.dc_key, 0x1ee7a330u);
  EXPECT_EQ(std::memcmp(d.datagram.dgid, to.dgid, 16), 0);
  // The same bytes on a UD QP: no WRITE there.
  EXPECT_EQ(decode_send_wqe(b.bytes, sizeof(b.bytes), &d, WqeAddress::kUd), EINVAL);
}

// TAG_MATCHING WQEs as rdma-core's mlx5_post_srq_ops and UCX's
// uct_rc_mlx5_iface_common_post_srq_op write them.
static_assert(sizeof(TmSeg) == sizeof(mlx5_wqe_tm_seg) && offsetof(TmSeg, index) == offsetof(mlx5_wqe_tm_seg, index) &&
              offsetof(TmSeg, sw_cnt) == offsetof(mlx5_wqe_tm_seg, sw_cnt) &&
              offsetof(TmSeg, append_mask) == offsetof(mlx5_wqe_tm_seg, append_mask));
static_assert(kOpTagMatching == MLX5_OPCODE_TAG_MATCHING);

TEST(Mlx5Wqe, TagMatchingAppendRemoveAndNop) {
  Builder b;
  auto* tm = static_cast<mlx5_wqe_tm_seg*>(b.next());
  b.next();  // the segment is 32 bytes
  tm->opcode = kTmAppend << 4;
  tm->flags = kTmFlagCqeReq | kTmFlagSwCnt;
  tm->index = htobe16(3);
  tm->sw_cnt = htobe16(9);
  tm->append_tag = htobe64(0x1234);
  tm->append_mask = htobe64(~0ull);
  mlx5dv_set_data_seg(static_cast<mlx5_wqe_data_seg*>(b.next()), 4096, 0x55, 0x7000);
  b.finish(MLX5_OPCODE_TAG_MATCHING, 0);
  DecodedTagOp t;
  ASSERT_EQ(decode_tag_wqe(b.bytes, sizeof(b.bytes), &t), 0);
  EXPECT_EQ(t.op, kTmAppend);
  EXPECT_EQ(t.flags, kTmFlagCqeReq | kTmFlagSwCnt);
  EXPECT_EQ(t.index, 3);
  EXPECT_EQ(t.sw_cnt, 9);
  EXPECT_EQ(t.tag, 0x1234u);
  EXPECT_EQ(t.mask, ~0ull);
  ASSERT_TRUE(t.has_buffer);
  EXPECT_EQ(t.buffer.addr, 0x7000u);
  EXPECT_EQ(t.buffer.length, 4096u);
  EXPECT_EQ(t.buffer.lkey, 0x55u);

  // An empty message's buffer (set_data_ptr_seg_end): none.
  mlx5dv_set_data_seg(reinterpret_cast<mlx5_wqe_data_seg*>(b.bytes + 48), 0, MLX5_INVALID_LKEY, 0);
  ASSERT_EQ(decode_tag_wqe(b.bytes, sizeof(b.bytes), &t), 0);
  EXPECT_FALSE(t.has_buffer);

  // REMOVE and NOP: control and TM segments only.
  Builder r;
  tm = static_cast<mlx5_wqe_tm_seg*>(r.next());
  r.next();
  tm->opcode = kTmRemove << 4;
  tm->index = htobe16(3);
  r.finish(MLX5_OPCODE_TAG_MATCHING, 0);
  ASSERT_EQ(decode_tag_wqe(r.bytes, sizeof(r.bytes), &t), 0);
  EXPECT_EQ(t.op, kTmRemove);
  EXPECT_EQ(t.index, 3);
  EXPECT_FALSE(t.has_buffer);
  tm->opcode = 3 << 4;  // no such list operation
  EXPECT_EQ(decode_tag_wqe(r.bytes, sizeof(r.bytes), &t), EINVAL);
  // A control segment alone is too short for the TM segment.
  Builder s;
  s.finish(MLX5_OPCODE_TAG_MATCHING, 0);
  EXPECT_EQ(decode_tag_wqe(s.bytes, sizeof(s.bytes), &t), EINVAL);
}

}  // namespace
}  // namespace uroce::mlx5
