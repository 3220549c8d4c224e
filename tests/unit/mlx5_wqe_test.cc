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

}  // namespace
}  // namespace uroce::mlx5
