// Tests for device/qp_modify.cc: the QP state machine. The legal transitions
// and their required and optional attributes are written out below from the
// IBA (vol 1, 10.3 and table 91-style per-transport rules, as the kernel's
// qp_state_table encodes them), independently of the table under test.
#include <gtest/gtest.h>

#include <string>

#include "device/test_env.h"

namespace uroce::device {
namespace {

constexpr uint32_t kPkey = IBV_QP_PKEY_INDEX, kPort = IBV_QP_PORT, kQkey = IBV_QP_QKEY,
                   kAcc = IBV_QP_ACCESS_FLAGS, kAv = IBV_QP_AV, kMtu = IBV_QP_PATH_MTU,
                   kDqpn = IBV_QP_DEST_QPN, kRqPsn = IBV_QP_RQ_PSN, kSqPsn = IBV_QP_SQ_PSN,
                   kDestRd = IBV_QP_MAX_DEST_RD_ATOMIC, kRnrTimer = IBV_QP_MIN_RNR_TIMER,
                   kTimeout = IBV_QP_TIMEOUT, kRetry = IBV_QP_RETRY_CNT,
                   kRnrRetry = IBV_QP_RNR_RETRY, kRd = IBV_QP_MAX_QP_RD_ATOMIC,
                   kCur = IBV_QP_CUR_STATE, kAlt = IBV_QP_ALT_PATH, kMig = IBV_QP_PATH_MIG_STATE,
                   kSqdNotify = IBV_QP_EN_SQD_ASYNC_NOTIFY;

// Every attribute bit a client can name (ibv_qp_attr_mask without STATE).
constexpr uint32_t kAllAttrs[] = {
    IBV_QP_CUR_STATE,     IBV_QP_EN_SQD_ASYNC_NOTIFY, IBV_QP_ACCESS_FLAGS, IBV_QP_PKEY_INDEX,
    IBV_QP_PORT,          IBV_QP_QKEY,                IBV_QP_AV,           IBV_QP_PATH_MTU,
    IBV_QP_TIMEOUT,       IBV_QP_RETRY_CNT,           IBV_QP_RNR_RETRY,    IBV_QP_RQ_PSN,
    IBV_QP_MAX_QP_RD_ATOMIC, IBV_QP_ALT_PATH,         IBV_QP_MIN_RNR_TIMER, IBV_QP_SQ_PSN,
    IBV_QP_MAX_DEST_RD_ATOMIC, IBV_QP_PATH_MIG_STATE, IBV_QP_CAP,          IBV_QP_DEST_QPN,
    IBV_QP_RATE_LIMIT};

struct Rule {
  ibv_qp_type type;
  ibv_qp_state from, to;
  uint32_t req, opt;
};

// The legal transitions other than "to RESET" and "to ERR", which every state
// may take with no attributes.
const Rule kRules[] = {
    // RC
    {IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_INIT, kPkey | kPort | kAcc, 0},
    {IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_INIT, 0, kPkey | kPort | kAcc},
    {IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_RTR, kAv | kMtu | kDqpn | kRqPsn | kDestRd | kRnrTimer,
     kAlt | kAcc | kPkey},
    {IBV_QPT_RC, IBV_QPS_RTR, IBV_QPS_RTS, kTimeout | kRetry | kRnrRetry | kSqPsn | kRd,
     kCur | kAlt | kAcc | kRnrTimer | kMig},
    {IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_RTS, 0, kCur | kAcc | kAlt | kMig | kRnrTimer},
    {IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_SQD, 0, kSqdNotify},
    {IBV_QPT_RC, IBV_QPS_SQD, IBV_QPS_RTS, 0, kCur | kAlt | kAcc | kRnrTimer | kMig},
    {IBV_QPT_RC, IBV_QPS_SQD, IBV_QPS_SQD, 0,
     kPort | kAv | kTimeout | kRetry | kRnrRetry | kRd | kDestRd | kAlt | kAcc | kPkey |
         kRnrTimer | kMig},
    // UC
    {IBV_QPT_UC, IBV_QPS_RESET, IBV_QPS_INIT, kPkey | kPort | kAcc, 0},
    {IBV_QPT_UC, IBV_QPS_INIT, IBV_QPS_INIT, 0, kPkey | kPort | kAcc},
    {IBV_QPT_UC, IBV_QPS_INIT, IBV_QPS_RTR, kAv | kMtu | kDqpn | kRqPsn, kAlt | kAcc | kPkey},
    {IBV_QPT_UC, IBV_QPS_RTR, IBV_QPS_RTS, kSqPsn, kCur | kAlt | kAcc | kMig},
    {IBV_QPT_UC, IBV_QPS_RTS, IBV_QPS_RTS, 0, kCur | kAcc | kAlt | kMig},
    {IBV_QPT_UC, IBV_QPS_RTS, IBV_QPS_SQD, 0, kSqdNotify},
    {IBV_QPT_UC, IBV_QPS_SQD, IBV_QPS_RTS, 0, kCur | kAlt | kAcc | kMig},
    {IBV_QPT_UC, IBV_QPS_SQD, IBV_QPS_SQD, 0, kAv | kAlt | kAcc | kPkey | kMig},
    {IBV_QPT_UC, IBV_QPS_SQE, IBV_QPS_RTS, 0, kCur | kAcc},
    // UD
    {IBV_QPT_UD, IBV_QPS_RESET, IBV_QPS_INIT, kPkey | kPort | kQkey, 0},
    {IBV_QPT_UD, IBV_QPS_INIT, IBV_QPS_INIT, 0, kPkey | kPort | kQkey},
    {IBV_QPT_UD, IBV_QPS_INIT, IBV_QPS_RTR, 0, kPkey | kQkey},
    {IBV_QPT_UD, IBV_QPS_RTR, IBV_QPS_RTS, kSqPsn, kCur | kQkey},
    {IBV_QPT_UD, IBV_QPS_RTS, IBV_QPS_RTS, 0, kCur | kQkey},
    {IBV_QPT_UD, IBV_QPS_RTS, IBV_QPS_SQD, 0, kSqdNotify},
    {IBV_QPT_UD, IBV_QPS_SQD, IBV_QPS_RTS, 0, kCur | kQkey},
    {IBV_QPT_UD, IBV_QPS_SQD, IBV_QPS_SQD, 0, kPkey | kQkey},
    {IBV_QPT_UD, IBV_QPS_SQE, IBV_QPS_RTS, 0, kCur | kQkey},
};

const char* state_name(ibv_qp_state s) {
  static const char* kNames[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
  return s <= IBV_QPS_ERR ? kNames[s] : "?";
}
const char* type_name(ibv_qp_type t) {
  return t == IBV_QPT_RC ? "RC" : t == IBV_QPT_UC ? "UC" : "UD";
}
std::string bit_name(uint32_t bit) { return "attr bit 0x" + std::to_string(bit); }

constexpr ibv_qp_state kStates[] = {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS,
                                    IBV_QPS_SQD,   IBV_QPS_SQE,  IBV_QPS_ERR};
constexpr ibv_qp_type kTypes[] = {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD};

class QpModifyTest : public DeviceFixture {
 protected:
  void SetUp() override {
    DeviceFixture::SetUp();
    cq_ = create_cq(256);
  }

  // Attributes valid for every transition, with cur_qp_state matching `from`.
  static abi::QpAttr attr_for(ibv_qp_state from, ibv_qp_state to) {
    abi::QpAttr a = default_attr();
    a.qp_state = to;
    a.cur_qp_state = from;
    a.dest_qp_num = 0x42;
    a.sq_psn = 7;
    a.rq_psn = 9;
    return a;
  }

  // A new QP of `type` brought to state `s` along the ordinary path.
  uint32_t qp_in(ibv_qp_type type, ibv_qp_state s) {
    const uint32_t qpn = create_qp(type, cq_, cq_);
    if (s == IBV_QPS_RESET) return qpn;
    if (s == IBV_QPS_ERR) {
      EXPECT_EQ(to_state(qpn, IBV_QPS_ERR), 0);
      return qpn;
    }
    const uint32_t init = type == IBV_QPT_RC ? kRcInitMask : type == IBV_QPT_UC ? kUcInitMask : kUdInitMask;
    const uint32_t rtr = type == IBV_QPT_RC ? kRcRtrMask : type == IBV_QPT_UC ? kUcRtrMask : kUdRtrMask;
    const uint32_t rts = type == IBV_QPT_RC ? kRcRtsMask : type == IBV_QPT_UC ? kUcRtsMask : kUdRtsMask;
    EXPECT_EQ(modify(qpn, init, attr_for(IBV_QPS_RESET, IBV_QPS_INIT)), 0);
    if (s == IBV_QPS_INIT) return qpn;
    EXPECT_EQ(modify(qpn, rtr, attr_for(IBV_QPS_INIT, IBV_QPS_RTR)), 0);
    if (s == IBV_QPS_RTR) return qpn;
    EXPECT_EQ(modify(qpn, rts, attr_for(IBV_QPS_RTR, IBV_QPS_RTS)), 0);
    if (s == IBV_QPS_RTS) return qpn;
    if (s == IBV_QPS_SQE) {
      // No datapath path enters SQE yet; put the QP there directly.
      dev_.qp(qpn)->state = IBV_QPS_SQE;
      return qpn;
    }
    EXPECT_EQ(modify(qpn, IBV_QP_STATE, attr_for(IBV_QPS_RTS, IBV_QPS_SQD)), 0);
    EXPECT_EQ(s, IBV_QPS_SQD);
    return qpn;
  }

  ibv_qp_state state(uint32_t qpn) { return dev_.qp(qpn)->state; }

  // Runs one modify on a fresh QP at `from`; returns the errno and checks the
  // state: `to` on success, `from` (untouched) on failure.
  int try_transition(ibv_qp_type type, ibv_qp_state from, ibv_qp_state to, uint32_t attrs) {
    const uint32_t qpn = qp_in(type, from);
    EXPECT_EQ(state(qpn), from);
    const int err = modify(qpn, IBV_QP_STATE | attrs, attr_for(from, to));
    EXPECT_EQ(state(qpn), err == 0 ? to : from);
    EXPECT_EQ(dev_.destroy_qp(&owner_, qpn), 0);
    return err;
  }

  uint32_t cq_ = 0;
};

TEST_F(QpModifyTest, EveryLegalTransitionWithItsRequiredAttributes) {
  for (const Rule& r : kRules) {
    SCOPED_TRACE(std::string(type_name(r.type)) + " " + state_name(r.from) + "->" + state_name(r.to));
    EXPECT_EQ(try_transition(r.type, r.from, r.to, r.req), 0);
  }
}

TEST_F(QpModifyTest, EachMissingRequiredAttributeIsEinval) {
  for (const Rule& r : kRules) {
    for (uint32_t bit : kAllAttrs) {
      if (!(r.req & bit)) continue;
      SCOPED_TRACE(std::string(type_name(r.type)) + " " + state_name(r.from) + "->" +
                   state_name(r.to) + " without " + bit_name(bit));
      EXPECT_EQ(try_transition(r.type, r.from, r.to, r.req & ~bit), EINVAL);
    }
  }
}

TEST_F(QpModifyTest, EachAllowedOptionalAttributeIsAccepted) {
  for (const Rule& r : kRules) {
    for (uint32_t bit : kAllAttrs) {
      if (!(r.opt & bit)) continue;
      SCOPED_TRACE(std::string(type_name(r.type)) + " " + state_name(r.from) + "->" +
                   state_name(r.to) + " with " + bit_name(bit));
      EXPECT_EQ(try_transition(r.type, r.from, r.to, r.req | bit), 0);
    }
    SCOPED_TRACE(std::string(type_name(r.type)) + " all optional");
    EXPECT_EQ(try_transition(r.type, r.from, r.to, r.req | r.opt), 0);
  }
}

TEST_F(QpModifyTest, EachNotAllowedAttributeIsEinval) {
  for (const Rule& r : kRules) {
    for (uint32_t bit : kAllAttrs) {
      if ((r.req | r.opt) & bit) continue;
      SCOPED_TRACE(std::string(type_name(r.type)) + " " + state_name(r.from) + "->" +
                   state_name(r.to) + " with " + bit_name(bit));
      EXPECT_EQ(try_transition(r.type, r.from, r.to, r.req | bit), EINVAL);
    }
  }
}

TEST_F(QpModifyTest, ToResetAndToErrFromEveryStateTakeNoAttributes) {
  for (ibv_qp_type t : kTypes) {
    for (ibv_qp_state from : kStates) {
      if (t == IBV_QPT_RC && from == IBV_QPS_SQE) continue;  // RC never enters SQE
      for (ibv_qp_state to : {IBV_QPS_RESET, IBV_QPS_ERR}) {
        SCOPED_TRACE(std::string(type_name(t)) + " " + state_name(from) + "->" + state_name(to));
        EXPECT_EQ(try_transition(t, from, to, 0), 0);
        EXPECT_EQ(try_transition(t, from, to, kQkey), EINVAL);
        EXPECT_EQ(try_transition(t, from, to, kAcc), EINVAL);
      }
    }
  }
}

TEST_F(QpModifyTest, TransitionsNotInTheTableAreEinval) {
  auto legal = [](ibv_qp_type t, ibv_qp_state from, ibv_qp_state to) {
    if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) return true;
    for (const Rule& r : kRules)
      if (r.type == t && r.from == from && r.to == to) return true;
    return false;
  };
  int checked = 0;
  for (ibv_qp_type t : kTypes) {
    for (ibv_qp_state from : kStates) {
      if (t == IBV_QPT_RC && from == IBV_QPS_SQE) continue;
      for (ibv_qp_state to : kStates) {
        if (legal(t, from, to)) continue;
        SCOPED_TRACE(std::string(type_name(t)) + " " + state_name(from) + "->" + state_name(to));
        EXPECT_EQ(try_transition(t, from, to, 0), EINVAL);
        // Not even with every attribute some rule could want.
        const uint32_t everything = kPkey | kPort | kAcc | kAv | kMtu | kDqpn | kRqPsn | kDestRd |
                                    kRnrTimer | kTimeout | kRetry | kRnrRetry | kSqPsn | kRd;
        EXPECT_EQ(try_transition(t, from, to, t == IBV_QPT_UD ? (everything & ~kAcc) | kQkey
                                                                : everything),
                  EINVAL);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 40);
}

TEST_F(QpModifyTest, ResetToRtsDirectlyIsEinval) {
  const uint32_t qpn = qp_in(IBV_QPT_RC, IBV_QPS_RESET);
  abi::QpAttr a = attr_for(IBV_QPS_RESET, IBV_QPS_RTS);
  EXPECT_EQ(modify(qpn, kRcInitMask | kRcRtrMask | kRcRtsMask, a), EINVAL);
  EXPECT_EQ(state(qpn), IBV_QPS_RESET);
  a.qp_state = IBV_QPS_RTR;
  EXPECT_EQ(modify(qpn, kRcInitMask | kRcRtrMask, a), EINVAL);
  EXPECT_EQ(state(qpn), IBV_QPS_RESET);
}

TEST_F(QpModifyTest, RcSqeIsNotAState) {
  const uint32_t qpn = qp_in(IBV_QPT_RC, IBV_QPS_RTS);
  dev_.qp(qpn)->state = IBV_QPS_SQE;
  EXPECT_EQ(modify(qpn, IBV_QP_STATE, attr_for(IBV_QPS_SQE, IBV_QPS_RTS)), EINVAL);
}

TEST_F(QpModifyTest, AvWithoutGrhIsEinval) {
  // RoCE addresses are always global (IBA A16.4.1).
  for (ibv_qp_type t : {IBV_QPT_RC, IBV_QPT_UC}) {
    const uint32_t qpn = qp_in(t, IBV_QPS_INIT);
    abi::QpAttr a = attr_for(IBV_QPS_INIT, IBV_QPS_RTR);
    a.ah.is_global = 0;
    EXPECT_EQ(modify(qpn, t == IBV_QPT_RC ? kRcRtrMask : kUcRtrMask, a), EINVAL);
    EXPECT_EQ(state(qpn), IBV_QPS_INIT);
    a.ah.is_global = 1;
    EXPECT_EQ(modify(qpn, t == IBV_QPT_RC ? kRcRtrMask : kUcRtrMask, a), 0);
  }
}

TEST_F(QpModifyTest, SgidIndexMustNameAValidGid) {
  const uint32_t qpn = qp_in(IBV_QPT_RC, IBV_QPS_INIT);
  abi::QpAttr a = attr_for(IBV_QPS_INIT, IBV_QPS_RTR);
  for (uint8_t bad : {uint8_t(2), uint8_t(15), uint8_t(16), uint8_t(255)}) {
    a.ah.sgid_index = bad;
    EXPECT_EQ(modify(qpn, kRcRtrMask, a), EINVAL) << int(bad);
  }
  EXPECT_EQ(state(qpn), IBV_QPS_INIT);
  a.ah.sgid_index = 1;  // the link-local GID
  EXPECT_EQ(modify(qpn, kRcRtrMask, a), 0);
}

TEST_F(QpModifyTest, BadPortPkeyAndMtuAreEinval) {
  {
    const uint32_t qpn = qp_in(IBV_QPT_RC, IBV_QPS_RESET);
    abi::QpAttr a = attr_for(IBV_QPS_RESET, IBV_QPS_INIT);
    for (uint8_t port : {uint8_t(0), uint8_t(2), uint8_t(255)}) {
      a.port_num = port;
      EXPECT_EQ(modify(qpn, kRcInitMask, a), EINVAL) << int(port);
    }
    a.port_num = 1;
    for (uint16_t pkey : {uint16_t(1), uint16_t(0xffff)}) {
      a.pkey_index = pkey;
      EXPECT_EQ(modify(qpn, kRcInitMask, a), EINVAL) << pkey;
    }
    a.pkey_index = 0;
    a.qp_access_flags |= IBV_ACCESS_ZERO_BASED;  // an MR flag, no QP's
    EXPECT_EQ(modify(qpn, kRcInitMask, a), EINVAL);
    EXPECT_EQ(state(qpn), IBV_QPS_RESET);
    // MW_BIND is accepted and kept, as rxe and mlx5 do (issue 9, point 4).
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND;
    EXPECT_EQ(modify(qpn, kRcInitMask, a), 0);
    abi::QpAttr q;
    ASSERT_EQ(dev_.query_qp(&owner_, qpn, &q), 0);
    EXPECT_EQ(q.qp_access_flags, uint32_t(IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND));
  }
  {
    const uint32_t qpn = qp_in(IBV_QPT_RC, IBV_QPS_INIT);
    abi::QpAttr a = attr_for(IBV_QPS_INIT, IBV_QPS_RTR);
    for (uint32_t mtu : {0u, 6u, 7u, 0xffffffffu}) {
      a.path_mtu = mtu;
      EXPECT_EQ(modify(qpn, kRcRtrMask, a), EINVAL) << mtu;
    }
    a.path_mtu = IBV_MTU_1024;
    a.min_rnr_timer = 32;
    EXPECT_EQ(modify(qpn, kRcRtrMask, a), EINVAL);
    a.min_rnr_timer = 1;
    a.max_dest_rd_atomic = 17;
    EXPECT_EQ(modify(qpn, kRcRtrMask, a), EINVAL);
    EXPECT_EQ(state(qpn), IBV_QPS_INIT);
  }
  for (uint32_t mtu = IBV_MTU_256; mtu <= IBV_MTU_4096; ++mtu) {
    const uint32_t qpn = qp_in(IBV_QPT_RC, IBV_QPS_INIT);
    abi::QpAttr a = attr_for(IBV_QPS_INIT, IBV_QPS_RTR);
    a.path_mtu = mtu;
    EXPECT_EQ(modify(qpn, kRcRtrMask, a), 0) << mtu;
    EXPECT_EQ(dev_.qp(qpn)->mtu_bytes(), 128u << mtu);
  }
}

TEST_F(QpModifyTest, BadTimerAndRetryValuesAreEinval) {
  const uint32_t qpn = qp_in(IBV_QPT_RC, IBV_QPS_RTR);
  struct Case {
    uint8_t abi::QpAttr::*field;
    uint8_t bad;
  } cases[] = {{&abi::QpAttr::timeout, 32},   {&abi::QpAttr::retry_cnt, 8},
               {&abi::QpAttr::rnr_retry, 8},  {&abi::QpAttr::max_rd_atomic, 17}};
  for (const Case& c : cases) {
    abi::QpAttr a = attr_for(IBV_QPS_RTR, IBV_QPS_RTS);
    a.*c.field = c.bad;
    EXPECT_EQ(modify(qpn, kRcRtsMask, a), EINVAL) << int(c.bad);
    EXPECT_EQ(state(qpn), IBV_QPS_RTR);
  }
  abi::QpAttr a = attr_for(IBV_QPS_RTR, IBV_QPS_RTS);
  a.timeout = 31;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 16;
  EXPECT_EQ(modify(qpn, kRcRtsMask, a), 0);
}

TEST_F(QpModifyTest, FailedModifyChangesNothing) {
  const uint32_t qpn = qp_in(IBV_QPT_RC, IBV_QPS_INIT);
  abi::QpAttr before;
  ASSERT_EQ(dev_.query_qp(&owner_, qpn, &before), 0);
  abi::QpAttr a = attr_for(IBV_QPS_INIT, IBV_QPS_RTR);
  a.dest_qp_num = 0x777;
  a.rq_psn = 0x1234;
  a.path_mtu = IBV_MTU_4096;
  a.ah.is_global = 0;  // the one bad value among good ones
  EXPECT_EQ(modify(qpn, kRcRtrMask, a), EINVAL);
  abi::QpAttr after;
  ASSERT_EQ(dev_.query_qp(&owner_, qpn, &after), 0);
  EXPECT_EQ(std::memcmp(&before, &after, sizeof(before)), 0);
}

TEST_F(QpModifyTest, QueryReturnsWhatModifySet) {
  const uint32_t qpn = qp_in(IBV_QPT_RC, IBV_QPS_RESET);
  abi::QpAttr a = default_attr();
  a.path_mtu = IBV_MTU_2048;
  a.timeout = 9;
  a.retry_cnt = 3;
  a.rnr_retry = 5;
  a.min_rnr_timer = 12;
  a.max_rd_atomic = 2;
  a.max_dest_rd_atomic = 3;
  a.qp_access_flags = IBV_ACCESS_REMOTE_READ;
  connect(qpn, 0x1abcdef, a, 0x1000010, 0x2000020);  // PSNs are 24 bits, QPNs too
  abi::QpAttr q;
  ASSERT_EQ(dev_.query_qp(&owner_, qpn, &q), 0);
  EXPECT_EQ(q.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(q.path_mtu, uint32_t(IBV_MTU_2048));
  EXPECT_EQ(q.dest_qp_num, 0xabcdefu);
  EXPECT_EQ(q.sq_psn, 0x000010u);
  EXPECT_EQ(q.rq_psn, 0x000020u);
  EXPECT_EQ(q.timeout, 9);
  EXPECT_EQ(q.retry_cnt, 3);
  EXPECT_EQ(q.rnr_retry, 5);
  EXPECT_EQ(q.min_rnr_timer, 12);
  EXPECT_EQ(q.max_rd_atomic, 2);
  EXPECT_EQ(q.max_dest_rd_atomic, 3);
  EXPECT_EQ(q.qp_access_flags, uint32_t(IBV_ACCESS_REMOTE_READ));
  EXPECT_EQ(q.port_num, 1);
  EXPECT_EQ(q.ah.is_global, 1);
}

TEST_F(QpModifyTest, CurStateMustMatch) {
  const uint32_t qpn = qp_in(IBV_QPT_RC, IBV_QPS_RTR);
  abi::QpAttr a = attr_for(IBV_QPS_RTR, IBV_QPS_RTS);
  a.cur_qp_state = IBV_QPS_INIT;
  EXPECT_EQ(modify(qpn, kRcRtsMask | kCur, a), EINVAL);
  a.cur_qp_state = IBV_QPS_RTR;
  EXPECT_EQ(modify(qpn, kRcRtsMask | kCur, a), 0);
}

TEST_F(QpModifyTest, OutOfRangeStateWrongOwnerAndUnknownQpAreEinval) {
  const uint32_t qpn = qp_in(IBV_QPT_RC, IBV_QPS_RESET);
  abi::QpAttr a = attr_for(IBV_QPS_RESET, IBV_QPS_INIT);
  a.qp_state = IBV_QPS_ERR + 1;
  EXPECT_EQ(modify(qpn, IBV_QP_STATE, a), EINVAL);
  a.qp_state = 0xffffffffu;
  EXPECT_EQ(modify(qpn, IBV_QP_STATE, a), EINVAL);
  a.qp_state = IBV_QPS_INIT;
  Owner other = make_self_owner(2);
  EXPECT_EQ(dev_.modify_qp(&other, qpn, kRcInitMask, a), EINVAL);
  abi::QpAttr q;
  EXPECT_EQ(dev_.query_qp(&other, qpn, &q), EINVAL);
  EXPECT_EQ(dev_.destroy_qp(&other, qpn), EINVAL);
  EXPECT_EQ(modify(qpn + 1000, kRcInitMask, a), EINVAL);
  EXPECT_EQ(modify(0, kRcInitMask, a), EINVAL);
  EXPECT_EQ(modify(1, kRcInitMask, a), EINVAL);
  EXPECT_EQ(state(qpn), IBV_QPS_RESET);
  EXPECT_EQ(modify(qpn, kRcInitMask, a), 0);
}

TEST_F(QpModifyTest, ModifyWithoutStateStaysInState) {
  // No IBV_QP_STATE: the transition is current -> current.
  const uint32_t qpn = qp_in(IBV_QPT_RC, IBV_QPS_RTS);
  abi::QpAttr a = attr_for(IBV_QPS_RTS, IBV_QPS_RTS);
  a.min_rnr_timer = 20;
  EXPECT_EQ(modify(qpn, kRnrTimer, a), 0);
  EXPECT_EQ(state(qpn), IBV_QPS_RTS);
  EXPECT_EQ(dev_.qp(qpn)->min_rnr_timer, 20);
  // RTR -> RTR is not a transition.
  const uint32_t rtr = qp_in(IBV_QPT_RC, IBV_QPS_RTR);
  EXPECT_EQ(modify(rtr, kAcc, a), EINVAL);
}

TEST_F(QpModifyTest, ToErrFlushesPostedWork) {
  const uint32_t scq = create_cq(), rcq = create_cq();
  const uint32_t qpn = create_qp(IBV_QPT_RC, scq, rcq);
  connect(qpn, qpn);
  Qp& qp = *dev_.qp(qpn);
  post_recv(qp, 11, {});
  post_recv(qp, 12, {});
  ASSERT_EQ(to_state(qpn, IBV_QPS_ERR), 0);
  auto cqes = drain_cq(dev_, rcq);
  ASSERT_EQ(cqes.size(), 2u);
  EXPECT_EQ(cqes[0].wr_id, 11u);
  EXPECT_EQ(cqes[1].wr_id, 12u);
  for (const auto& c : cqes) {
    EXPECT_EQ(c.status, uint32_t(IBV_WC_WR_FLUSH_ERR));
    EXPECT_EQ(c.qp_num, qpn);
  }
  EXPECT_EQ(qp.rq.hdr->consumer.load(), qp.rq.hdr->producer.load());
  EXPECT_TRUE(drain_cq(dev_, scq).empty());
}

TEST_F(QpModifyTest, ToResetEmptiesTheRings) {
  const uint32_t cq = create_cq();
  const uint32_t qpn = create_qp(IBV_QPT_RC, cq, cq);
  ASSERT_EQ(modify(qpn, kRcInitMask, attr_for(IBV_QPS_RESET, IBV_QPS_INIT)), 0);
  Qp& qp = *dev_.qp(qpn);
  post_recv(qp, 1, {});
  abi::SendWqe w{};
  w.opcode = IBV_WR_SEND;
  post_send(qp, w);
  ASSERT_EQ(to_state(qpn, IBV_QPS_RESET), 0);
  EXPECT_EQ(qp.sq.hdr->consumer.load(), qp.sq.hdr->producer.load());
  EXPECT_EQ(qp.rq.hdr->consumer.load(), qp.rq.hdr->producer.load());
  EXPECT_TRUE(drain_cq(dev_, cq).empty());  // RESET discards, it does not flush
}

TEST_F(QpModifyTest, SqdWithNotifyRaisesSqDrained) {
  Pipe p;
  owner_.async_fd = p.wr;
  const uint32_t qpn = qp_in(IBV_QPT_RC, IBV_QPS_RTS);
  dev_.qp(qpn)->cookie = 0x5151;
  abi::QpAttr a = attr_for(IBV_QPS_RTS, IBV_QPS_SQD);
  a.en_sqd_async_notify = 1;
  ASSERT_EQ(modify(qpn, IBV_QP_STATE | kSqdNotify, a), 0);
  EXPECT_EQ(state(qpn), IBV_QPS_SQD);
  auto ev = p.read_all<abi::AsyncEventRecord>();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].event_type, uint32_t(IBV_EVENT_SQ_DRAINED));
  EXPECT_EQ(ev[0].cookie, 0x5151u);
  // Without the notify flag: no event.
  const uint32_t quiet = qp_in(IBV_QPT_RC, IBV_QPS_RTS);
  ASSERT_EQ(modify(quiet, IBV_QP_STATE, attr_for(IBV_QPS_RTS, IBV_QPS_SQD)), 0);
  EXPECT_TRUE(p.read_all<abi::AsyncEventRecord>().empty());
  owner_.async_fd = -1;
  close(p.wr);
}

TEST_F(QpModifyTest, SqDrainedWaitsForOutstandingMessages) {
  Pipe p;
  owner_.async_fd = p.wr;
  std::vector<uint8_t> buf(64);
  const uint32_t key = reg_mr(buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  const uint32_t cq = create_cq();
  const uint32_t qpn = create_qp(IBV_QPT_RC, cq, cq);
  connect(qpn, 0xabcde);  // nobody answers: the SEND stays outstanding
  post_send(*dev_.qp(qpn), wqe(IBV_WR_SEND, 1), {sge(buf.data(), 8, key)});
  ASSERT_TRUE(run());
  ASSERT_EQ(dev_.qp(qpn)->sq.hdr->consumer.load(), 0u);  // not completed
  abi::QpAttr a = attr_for(IBV_QPS_RTS, IBV_QPS_SQD);
  a.en_sqd_async_notify = 1;
  ASSERT_EQ(modify(qpn, IBV_QP_STATE | kSqdNotify, a), 0);
  ASSERT_TRUE(run());
  EXPECT_TRUE(p.read_all<abi::AsyncEventRecord>().empty());
  owner_.async_fd = -1;
  close(p.wr);
}

}  // namespace
}  // namespace uroce::device
