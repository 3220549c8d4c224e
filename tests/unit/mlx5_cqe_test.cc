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

// Tag matching: what rdma-core's handle_tag_matching and UCX's rc_mlx5.inl
// read from a CQE of a TM-SRQ's CQ, and uroce's reader gets back.
// MLX5_CQE_APP_TAG_MATCHING is 1 (providers/mlx5/cq.c; not in mlx5dv.h).
static_assert(int(kCqeNoPacket) == int(MLX5_CQE_NO_PACKET) && kCqeAppTagMatching == 1);
static_assert(kTmcSuccess == MLX5_TMC_SUCCESS);
static_assert(offsetof(mlx5_cqe64, tmh) == 0 && offsetof(mlx5_cqe64, tm_cqe) == 0);

TEST(Mlx5Cqe, TagListOperationsAreNoPacketCqesWithTheirResult) {
  const struct {
    ibv_wc_opcode op;
    ibv_wc_status status;
    uint8_t app_op;
    bool success;
  } cases[] = {
      {IBV_WC_TM_ADD, IBV_WC_SUCCESS, 0x5, true},
      {IBV_WC_TM_DEL, IBV_WC_SUCCESS, 0x6, true},
      {IBV_WC_TM_DEL, IBV_WC_TM_ERR, 0x6, false},  // consumed meanwhile: not an error CQE
      {IBV_WC_TM_SYNC, IBV_WC_SUCCESS, 0x7, true},
  };
  for (const auto& k : cases) {
    Completion c;
    c.opcode = k.op;
    c.status = k.status;
    c.qp_num = 0x42;
    c.srqn = 0x17;
    c.wr_id = 0x1122334455667788ull;
    c.wc_flags = IBV_WC_TM_SYNC_REQ;
    Cqe64 q;
    encode_cqe(c, true, &q);
    mlx5_cqe64* dv = as_dv(&q);
    EXPECT_EQ(mlx5dv_get_cqe_opcode(dv), MLX5_CQE_NO_PACKET);
    EXPECT_EQ(mlx5dv_get_cqe_owner(dv), 1);
    EXPECT_EQ(dv->app, 1);
    EXPECT_EQ(dv->app_op, k.app_op);
    EXPECT_EQ(bool(be32toh(dv->tm_cqe.success) & MLX5_TMC_SUCCESS), k.success);
    EXPECT_EQ(be32toh(dv->srqn_uidx) & 0xffffff, 0x17u);
    Completion d;
    ASSERT_TRUE(decode_cqe(q, &d));
    EXPECT_EQ(d.opcode, k.op);
    EXPECT_EQ(d.status, k.status);
    EXPECT_EQ(d.wr_id, c.wr_id);
    EXPECT_EQ(d.wc_flags, unsigned(IBV_WC_TM_SYNC_REQ));
    EXPECT_EQ(d.srqn, 0x17u);
  }
}

TEST(Mlx5Cqe, AMatchCarriesTheTmhAndTheListEntry) {
  Completion c;
  c.opcode = IBV_WC_TM_RECV;
  c.wc_flags = IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID | IBV_WC_WITH_IMM;
  c.imm = htobe32(0xabcd);
  c.byte_len = 4096;
  c.qp_num = 0x99;
  c.tm_tag = 0x0102030405060708ull;
  c.tm_priv = 0xa0b0c0d0;
  c.tm_entry = 513;
  c.wr_id = 513;
  Cqe64 q;
  encode_cqe(c, false, &q);
  mlx5_cqe64* dv = as_dv(&q);
  EXPECT_EQ(mlx5dv_get_cqe_opcode(dv), MLX5_CQE_RESP_SEND_IMM);
  EXPECT_EQ(dv->app, 1);
  EXPECT_EQ(dv->app_op, 0xA);  // MLX5_CQE_APP_OP_TM_CONSUMED_MSG
  EXPECT_EQ(be16toh(dv->app_info), 513);
  EXPECT_EQ(be64toh(dv->tmh.tag), 0x0102030405060708ull);  // ibv_wc_read_tm_info's reading
  EXPECT_EQ(be32toh(dv->tmh.app_ctx), 0xa0b0c0d0u);
  EXPECT_EQ(be32toh(dv->byte_cnt), 4096u);
  EXPECT_EQ(be32toh(dv->imm_inval_pkey), 0xabcdu);
  Completion d;
  ASSERT_TRUE(decode_cqe(q, &d));
  EXPECT_EQ(d.opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(d.wc_flags, c.wc_flags);
  EXPECT_EQ(d.tm_tag, c.tm_tag);
  EXPECT_EQ(d.tm_priv, c.tm_priv);
  EXPECT_EQ(d.tm_entry, 513);
  EXPECT_EQ(d.byte_len, 4096u);

  // A rendezvous: the match at once (no packet), the data later (EXPECTED),
  // or left to software (CONSUMED_MSG_SW_RDNV, IBV_WC_TM_RNDV_INCOMPLETE).
  c.wc_flags = IBV_WC_TM_MATCH;
  encode_cqe(c, false, &q);
  EXPECT_EQ(mlx5dv_get_cqe_opcode(dv), MLX5_CQE_NO_PACKET);
  EXPECT_EQ(dv->app_op, 0x1);
  EXPECT_EQ(be64toh(dv->tmh.tag), c.tm_tag);
  ASSERT_TRUE(decode_cqe(q, &d));
  EXPECT_EQ(d.wc_flags, unsigned(IBV_WC_TM_MATCH));
  c.wc_flags = IBV_WC_TM_DATA_VALID;
  encode_cqe(c, false, &q);
  EXPECT_EQ(mlx5dv_get_cqe_opcode(dv), MLX5_CQE_RESP_SEND);
  EXPECT_EQ(dv->app_op, 0x2);
  EXPECT_EQ(be16toh(dv->app_info), 513);
  ASSERT_TRUE(decode_cqe(q, &d));
  EXPECT_EQ(d.wc_flags, unsigned(IBV_WC_TM_DATA_VALID));
  c.wc_flags = IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID;
  c.status = IBV_WC_TM_RNDV_INCOMPLETE;
  encode_cqe(c, false, &q);
  EXPECT_EQ(mlx5dv_get_cqe_opcode(dv), MLX5_CQE_RESP_SEND);
  EXPECT_EQ(dv->app_op, 0xB);
  ASSERT_TRUE(decode_cqe(q, &d));
  EXPECT_EQ(d.status, IBV_WC_TM_RNDV_INCOMPLETE);
}

TEST(Mlx5Cqe, UnexpectedAndNoTagMessagesNameTheirSrqWqe) {
  for (ibv_wc_opcode op : {IBV_WC_TM_RECV, IBV_WC_TM_NO_TAG}) {
    Completion c;
    c.opcode = op;
    c.byte_len = 80;
    c.qp_num = 0x31;
    c.src_qp = 0x32;
    c.wqe_counter = 7;
    c.wr_id = 7;
    Cqe64 q;
    encode_cqe(c, false, &q);
    mlx5_cqe64* dv = as_dv(&q);
    EXPECT_EQ(mlx5dv_get_cqe_opcode(dv), MLX5_CQE_RESP_SEND);
    EXPECT_EQ(dv->app, 1);
    EXPECT_EQ(dv->app_op, op == IBV_WC_TM_RECV ? 0x3 : 0x4);
    EXPECT_EQ(be16toh(dv->wqe_counter), 7);
    EXPECT_EQ(be32toh(dv->byte_cnt), 80u);
    Completion d;
    ASSERT_TRUE(decode_cqe(q, &d));
    EXPECT_EQ(d.opcode, op);
    EXPECT_EQ(d.wc_flags, 0u);
    EXPECT_EQ(d.src_qp, 0x32u);
  }
  // A tagged receive that failed is an ordinary error CQE.
  Completion c;
  c.opcode = IBV_WC_TM_RECV;
  c.status = IBV_WC_LOC_LEN_ERR;
  Cqe64 q;
  encode_cqe(c, false, &q);
  EXPECT_EQ(mlx5dv_get_cqe_opcode(as_dv(&q)), MLX5_CQE_RESP_ERR);
}

}  // namespace
}  // namespace uroce::mlx5
