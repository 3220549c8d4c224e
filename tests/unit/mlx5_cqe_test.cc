// include/uroce/mlx5_cqe.h: completions written as mlx5 CQEs and read back,
// checked against rdma-core 44's <infiniband/mlx5dv.h> (its structs, and its
// inline readers mlx5dv_get_cqe_opcode / _owner, as programs that poll an
// mlx5 CQ by hand use them).
#include "uroce/mlx5_cqe.h"

#include <gtest/gtest.h>
#include <infiniband/mlx5dv.h>

#include <cstring>

namespace uroce::mlx5 {
namespace {

static_assert(offsetof(Cqe64, wqe_id) == offsetof(mlx5_cqe64, wqe_id));
static_assert(offsetof(Cqe64, ml_path) == offsetof(mlx5_cqe64, ml_path));
static_assert(offsetof(Cqe64, slid) == offsetof(mlx5_cqe64, slid));
static_assert(offsetof(Cqe64, flags_rqpn) == offsetof(mlx5_cqe64, flags_rqpn));
static_assert(offsetof(Cqe64, srqn_uidx) == offsetof(mlx5_cqe64, srqn_uidx));
static_assert(offsetof(Cqe64, imm_inval_pkey) == offsetof(mlx5_cqe64, imm_inval_pkey));
static_assert(offsetof(Cqe64, byte_cnt) == offsetof(mlx5_cqe64, byte_cnt));
static_assert(offsetof(Cqe64, timestamp) == offsetof(mlx5_cqe64, timestamp));
static_assert(offsetof(Cqe64, sop_drop_qpn) == offsetof(mlx5_cqe64, sop_drop_qpn));
static_assert(offsetof(Cqe64, wqe_counter) == offsetof(mlx5_cqe64, wqe_counter));
static_assert(offsetof(Cqe64, op_own) == offsetof(mlx5_cqe64, op_own));
static_assert(kErrSyndrome == offsetof(mlx5_err_cqe, syndrome));
static_assert(kErrVendorSyndrome == offsetof(mlx5_err_cqe, vendor_err_synd));
static_assert(int(kCqeReqErr) == int(MLX5_CQE_REQ_ERR) && int(kCqeRespErr) == int(MLX5_CQE_RESP_ERR) &&
              int(kCqeInvalid) == int(MLX5_CQE_INVALID));

mlx5_cqe64* as_dv(Cqe64* q) { return reinterpret_cast<mlx5_cqe64*>(q); }

TEST(Mlx5Cqe, RequesterCompletionNamesItsWqeOpcodeAndCounter) {
  Completion c;
  c.send = true;
  c.opcode = IBV_WC_RDMA_WRITE;
  c.wc_flags = IBV_WC_WITH_IMM;
  c.qp_num = 0x123456;
  c.byte_len = 4096;
  c.wqe_counter = 0xfffe;
  c.timestamp = 0x0102030405060708ull;
  c.wr_id = 0xdeadbeefcafef00dull;
  Cqe64 q;
  encode_cqe(c, false, &q);
  EXPECT_EQ(mlx5dv_get_cqe_opcode(as_dv(&q)), MLX5_CQE_REQ);
  EXPECT_EQ(mlx5dv_get_cqe_owner(as_dv(&q)), 0);
  EXPECT_EQ(be32toh(as_dv(&q)->sop_drop_qpn) >> 24, uint32_t(MLX5_OPCODE_RDMA_WRITE_IMM));
  EXPECT_EQ(be32toh(as_dv(&q)->sop_drop_qpn) & 0xffffff, 0x123456u);
  EXPECT_EQ(be16toh(as_dv(&q)->wqe_counter), 0xfffe);
  EXPECT_EQ(be64toh(as_dv(&q)->timestamp), 0x0102030405060708ull);
  Completion d;
  ASSERT_TRUE(decode_cqe(q, &d));
  EXPECT_TRUE(d.send);
  EXPECT_EQ(d.opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(d.wc_flags, unsigned(IBV_WC_WITH_IMM));
  EXPECT_EQ(d.qp_num, 0x123456u);
  EXPECT_EQ(d.byte_len, 4096u);
  EXPECT_EQ(d.wqe_counter, 0xfffe);
  EXPECT_EQ(d.wr_id, 0xdeadbeefcafef00dull);
}

TEST(Mlx5Cqe, EveryRequesterOpcodeReadsBack) {
  for (ibv_wc_opcode op : {IBV_WC_SEND, IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ, IBV_WC_COMP_SWAP,
                           IBV_WC_FETCH_ADD, IBV_WC_BIND_MW, IBV_WC_LOCAL_INV, IBV_WC_DRIVER2,
                           IBV_WC_DRIVER3}) {
    Completion c;
    c.send = true;
    c.opcode = op;
    c.byte_len = op == IBV_WC_COMP_SWAP || op == IBV_WC_FETCH_ADD ? 8 : 77;
    Cqe64 q;
    encode_cqe(c, true, &q);
    EXPECT_EQ(mlx5dv_get_cqe_owner(as_dv(&q)), 1);
    Completion d;
    ASSERT_TRUE(decode_cqe(q, &d));
    EXPECT_EQ(d.opcode, op);
    EXPECT_EQ(d.byte_len, c.byte_len) << op;
  }
}

TEST(Mlx5Cqe, ReceivesCarryImmediateInvalidatedKeyAndSource) {
  Completion c;
  c.opcode = IBV_WC_RECV;
  c.wc_flags = IBV_WC_WITH_IMM | IBV_WC_GRH;
  c.imm = htobe32(0xa1b2c3d4);
  c.qp_num = 7;
  c.src_qp = 0xabcdef;
  c.byte_len = 100;
  Cqe64 q;
  encode_cqe(c, false, &q);
  EXPECT_EQ(mlx5dv_get_cqe_opcode(as_dv(&q)), MLX5_CQE_RESP_SEND_IMM);
  EXPECT_EQ(as_dv(&q)->imm_inval_pkey, htobe32(0xa1b2c3d4));
  EXPECT_EQ(be32toh(as_dv(&q)->flags_rqpn) & 0xffffff, 0xabcdefu);
  Completion d;
  ASSERT_TRUE(decode_cqe(q, &d));
  EXPECT_FALSE(d.send);
  EXPECT_EQ(d.opcode, IBV_WC_RECV);
  EXPECT_EQ(d.wc_flags, unsigned(IBV_WC_WITH_IMM | IBV_WC_GRH));
  EXPECT_EQ(d.imm, htobe32(0xa1b2c3d4));
  EXPECT_EQ(d.src_qp, 0xabcdefu);
  EXPECT_EQ(d.byte_len, 100u);

  c = {};
  c.opcode = IBV_WC_RECV;
  c.wc_flags = IBV_WC_WITH_INV;
  c.imm = 0x1234;  // the invalidated rkey, host order
  encode_cqe(c, false, &q);
  EXPECT_EQ(mlx5dv_get_cqe_opcode(as_dv(&q)), MLX5_CQE_RESP_SEND_INV);
  ASSERT_TRUE(decode_cqe(q, &d));
  EXPECT_EQ(d.wc_flags, unsigned(IBV_WC_WITH_INV));
  EXPECT_EQ(d.imm, 0x1234u);

  c = {};
  c.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
  c.wc_flags = IBV_WC_WITH_IMM;
  c.imm = htobe32(5);
  encode_cqe(c, false, &q);
  EXPECT_EQ(mlx5dv_get_cqe_opcode(as_dv(&q)), MLX5_CQE_RESP_WR_IMM);
  ASSERT_TRUE(decode_cqe(q, &d));
  EXPECT_EQ(d.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(d.imm, htobe32(5));
}

TEST(Mlx5Cqe, ErrorsCarryTheirSyndrome) {
  for (const SyndromeOfStatus& s : kSyndromes) {
    for (bool send : {true, false}) {
      Completion c;
      c.send = send;
      c.status = s.status;
      c.vendor_err = 0x42;
      c.qp_num = 99;
      c.wqe_counter = 3;
      Cqe64 q;
      encode_cqe(c, false, &q);
      const auto* e = reinterpret_cast<const mlx5_err_cqe*>(&q);
      EXPECT_EQ(mlx5dv_get_cqe_opcode(as_dv(&q)), send ? MLX5_CQE_REQ_ERR : MLX5_CQE_RESP_ERR);
      EXPECT_EQ(e->syndrome, s.syndrome);
      EXPECT_EQ(e->vendor_err_synd, 0x42);
      EXPECT_EQ(be32toh(e->s_wqe_opcode_qpn) & 0xffffff, 99u);
      Completion d;
      ASSERT_TRUE(decode_cqe(q, &d));
      EXPECT_EQ(d.status, s.status);
      EXPECT_EQ(d.send, send);
      EXPECT_EQ(d.qp_num, 99u);
      EXPECT_EQ(d.wqe_counter, 3);
    }
  }
  // A status mlx5 has no syndrome for reads back as a general error.
  Completion c;
  c.status = IBV_WC_LOC_EEC_OP_ERR;
  Cqe64 q;
  encode_cqe(c, false, &q);
  Completion d;
  ASSERT_TRUE(decode_cqe(q, &d));
  EXPECT_EQ(d.status, IBV_WC_GENERAL_ERR);
}

TEST(Mlx5Cqe, InvalidOpcodeIsNoCompletionAndOwnerFollowsThePass) {
  Cqe64 q{};
  q.op_own = uint8_t(MLX5_CQE_INVALID << 4);
  Completion d;
  EXPECT_FALSE(decode_cqe(q, &d));
  // A ring of 8: the first pass writes owner 0, the second 1, the third 0.
  EXPECT_FALSE(owner_for_index(0, 8));
  EXPECT_FALSE(owner_for_index(7, 8));
  EXPECT_TRUE(owner_for_index(8, 8));
  EXPECT_TRUE(owner_for_index(15, 8));
  EXPECT_FALSE(owner_for_index(16, 8));
}

}  // namespace
}  // namespace uroce::mlx5
