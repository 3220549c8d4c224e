// mlx5 direct verbs (the drop-in libmlx5.so.1, verbs_provider/mlx5/) against
// a real engine: a program compiled against the system <infiniband/mlx5dv.h>
// and linked against the system libmlx5, run under `uroce run`, which puts
// uroce's libmlx5 first. mlx5_test.sh runs Mlx5Mode.* against an engine
// started with --mlx5 and NotMlx5.* against one without.
// The queues in mlx5's formats: verbs_mlx5_queues.cc.
#include "tests/integration/verbs_mlx5.h"

namespace vt {
namespace {

TEST_F(Mlx5Mode, DeviceAnswersAsConnectX5) {
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(ctx_, &attr), 0);
  EXPECT_EQ(attr.vendor_id, 0x02c9u);
  EXPECT_EQ(attr.vendor_part_id, 4119u);
  EXPECT_TRUE(mlx5dv_is_supported(ctx_->device));
}

// UCX reads the PCI ids two levels above realpath(ibdev_path)
// (src/uct/ib/base/ib_device.c, uct_ib_device_get_sysfs_path).
TEST_F(Mlx5Mode, PciIdsTwoLevelsAboveIbdevPath) {
  char real[PATH_MAX];
  ASSERT_NE(realpath(ctx_->device->ibdev_path, real), nullptr) << ctx_->device->ibdev_path;
  std::string pci = real;
  for (int i = 0; i < 2; ++i) pci = pci.substr(0, pci.rfind('/'));
  auto read = [](const std::string& path) {
    FILE* f = std::fopen(path.c_str(), "r");
    char buf[64] = {};
    if (f) {
      if (!std::fgets(buf, sizeof(buf), f)) buf[0] = 0;
      std::fclose(f);
    }
    return std::string(buf);
  };
  EXPECT_EQ(read(pci + "/vendor"), "0x15b3\n");
  EXPECT_EQ(read(pci + "/device"), "0x1017\n");
  EXPECT_NE(read(std::string(real) + "/ports/1/state"), "");
}

TEST_F(Mlx5Mode, QueryDeviceGivesWhatWasAskedFor) {
  mlx5dv_context dv{};
  dv.comp_mask = MLX5DV_CONTEXT_MASK_CQE_COMPRESION | MLX5DV_CONTEXT_MASK_STRIDING_RQ |
                 MLX5DV_CONTEXT_MASK_CLOCK_INFO_UPDATE | MLX5DV_CONTEXT_MASK_HCA_CORE_CLOCK;
  ASSERT_EQ(mlx5dv_query_device(ctx_, &dv), 0);
  EXPECT_TRUE(dv.flags & MLX5DV_CONTEXT_FLAGS_CQE_V1);
  EXPECT_TRUE(dv.flags & MLX5DV_CONTEXT_FLAGS_CQE_128B_PAD);
  EXPECT_FALSE(dv.flags & MLX5DV_CONTEXT_FLAGS_CQE_128B_COMP);
  // Given: compression and striding RQ caps (both none), the clock update
  // period; not the mapped core clock, which this device has not.
  EXPECT_EQ(dv.comp_mask, uint64_t(MLX5DV_CONTEXT_MASK_CQE_COMPRESION | MLX5DV_CONTEXT_MASK_STRIDING_RQ |
                                   MLX5DV_CONTEXT_MASK_CLOCK_INFO_UPDATE));
  EXPECT_EQ(dv.cqe_comp_caps.max_num, 0u);
  EXPECT_EQ(dv.striding_rq_caps.supported_qpts, 0u);
  EXPECT_GT(dv.max_clock_info_update_nsec, 0u);
}

TEST_F(Mlx5Mode, QueryPort) {
  mlx5dv_port port;
  std::memset(&port, 0xa5, sizeof(port));
  ASSERT_EQ(mlx5dv_query_port(ctx_, 1, &port), 0);
  EXPECT_EQ(port.flags, 0u);  // no e-switch in switchdev mode: the kernel fills nothing
  EXPECT_EQ(port.vport, 0);
  EXPECT_EQ(mlx5dv_query_port(ctx_, 2, &port), EINVAL);
}

// A completion's device timestamp, through mlx5dv_ts_to_ns, is the wall
// clock at completion (test_mlx5_timestamp's check, tighter).
TEST_F(Mlx5Mode, ClockInfoMapsCompletionTimestampsToWallClock) {
  mlx5dv_cq_init_attr dv{};
  ibv_cq_ex* cq = dv_cq(&dv, uint64_t(IBV_WC_STANDARD_FLAGS) | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP);
  ASSERT_NE(cq, nullptr) << std::strerror(errno);
  ibv_qp *a, *b;
  ASSERT_TRUE(dv_pair(ibv_cq_ex_to_cq(cq), nullptr, &a, &b));
  ibv_mr* mr = reg_buffer(64, kRw, 7);
  ibv_sge sge = sge_of(mr, 0, 64);
  const uint64_t before = realtime_ns();
  ASSERT_EQ(post_send(a, 1, IBV_WR_RDMA_WRITE, &sge, 1, IBV_SEND_SIGNALED, addr_of(mr), mr->rkey), 0);
  ibv_poll_cq_attr pa{};
  const auto until = deadline_after(kWaitSeconds);
  int rc;
  while ((rc = ibv_start_poll(cq, &pa)) == ENOENT && Clock::now() < until) {
  }
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(cq->status, IBV_WC_SUCCESS);
  const uint64_t ts = ibv_wc_read_completion_ts(cq);
  ibv_end_poll(cq);
  const uint64_t after = realtime_ns();
  mlx5dv_clock_info ci{};
  ASSERT_EQ(mlx5dv_get_clock_info(ctx_, &ci), 0);
  const uint64_t ns = mlx5dv_ts_to_ns(&ci, ts);
  EXPECT_GE(ns + 1'000'000, before);  // within 1 ms: the two clocks are read apart
  EXPECT_LE(ns, after + 1'000'000);
}

TEST_F(Mlx5Mode, CreateCqChecksItsAttributes) {
  mlx5dv_cq_init_attr dv{};
  dv.comp_mask = MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE | MLX5DV_CQ_INIT_ATTR_MASK_FLAGS;
  dv.cqe_size = 128;
  dv.flags = MLX5DV_CQ_INIT_ATTR_FLAGS_CQE_PAD;
  EXPECT_NE(dv_cq(&dv), nullptr) << std::strerror(errno);
  dv.cqe_size = 64;  // padding is for 128-byte CQEs only
  errno = 0;
  EXPECT_EQ(dv_cq(&dv), nullptr);
  EXPECT_EQ(errno, EINVAL);
  dv = {};
  dv.comp_mask = MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE;
  dv.cqe_size = 100;
  errno = 0;
  EXPECT_EQ(dv_cq(&dv), nullptr);
  EXPECT_EQ(errno, EINVAL);
  dv = {};
  dv.comp_mask = MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE;  // no compression on this device
  dv.cqe_comp_res_format = MLX5DV_CQE_RES_FORMAT_HASH;
  errno = 0;
  EXPECT_EQ(dv_cq(&dv), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

// A CQ and QPs made through direct verbs carry traffic through the verbs.
TEST_F(Mlx5Mode, DirectVerbsObjectsCarryTraffic) {
  mlx5dv_cq_init_attr cq_dv{};
  cq_dv.comp_mask = MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE;
  cq_dv.cqe_size = 128;
  ibv_cq_ex* cq = dv_cq(&cq_dv);
  ASSERT_NE(cq, nullptr) << std::strerror(errno);
  mlx5dv_qp_init_attr qp_dv{};
  qp_dv.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS;
  qp_dv.create_flags = MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE;
  ibv_qp *a, *b;
  ASSERT_TRUE(dv_pair(ibv_cq_ex_to_cq(cq), &qp_dv, &a, &b)) << std::strerror(errno);
  ibv_mr* src = reg_buffer(256, kRw, 0x3c);
  ibv_mr* dst = reg_buffer(256, kRw, 0);
  ibv_sge rs = sge_of(dst, 0, 256);
  ASSERT_EQ(post_recv(b, 9, &rs, 1), 0);
  ibv_sge ss = sge_of(src, 0, 256);
  ASSERT_EQ(post_send(a, 8, IBV_WR_SEND, &ss, 1), 0);
  const auto wcs = by_wr_id(poll_n(ibv_cq_ex_to_cq(cq), 2));
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs.at(8).status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs.at(9).byte_len, 256u);
  EXPECT_EQ(static_cast<uint8_t*>(dst->addr)[255], 0x3c);
}

// mlx5dv_modify_qp_udp_sport: RC and UC QPs in RTS only (EOPNOTSUPP
// otherwise, as libmlx5); the QP keeps carrying traffic. mlx5_test.sh
// captures the loopback port while this runs and checks that the frames of
// QP `a` leave from UDP port 55555 and those of `b` from the QPN's hash.
TEST_F(Mlx5Mode, UdpSourcePortOfRcQpInRts) {
  ibv_cq* cq = make_cq();
  mlx5dv_qp_init_attr dv{};
  ibv_qp* a = dv_qp(cq, &dv);
  ibv_qp* b = dv_qp(cq, &dv);
  ibv_qp* ud = dv_qp(cq, &dv, IBV_QPT_UD);
  ASSERT_TRUE(a && b && ud) << std::strerror(errno);
  EXPECT_EQ(mlx5dv_modify_qp_udp_sport(a, 55555), EOPNOTSUPP);  // RESET
  EXPECT_EQ(mlx5dv_modify_qp_udp_sport(ud, 55555), EOPNOTSUPP);
  connect_qp(a, b->qp_num);
  connect_qp(b, a->qp_num);
  ASSERT_EQ(mlx5dv_modify_qp_udp_sport(a, 55555), 0);
  ibv_mr* src = reg_buffer(64, kRw, 0x5a);
  ibv_mr* dst = reg_buffer(64, kRw, 0);
  for (uint64_t i = 0; i < 4; ++i) {
    ibv_sge rs = sge_of(dst, 0, 64);
    ASSERT_EQ(post_recv(b, 100 + i, &rs, 1), 0);
    ibv_sge ss = sge_of(src, 0, 64);
    ASSERT_EQ(post_send(a, i, IBV_WR_SEND, &ss, 1), 0);
    const auto wcs = poll_n(cq, 2);
    ASSERT_EQ(wcs.size(), 2u);
    for (const ibv_wc& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  }
  EXPECT_EQ(static_cast<uint8_t*>(dst->addr)[63], 0x5a);
  std::printf("udp sport: qpn %u port 55555, qpn %u its hash\n", a->qp_num, b->qp_num);
}


TEST_F(Mlx5Mode, CreateQpRefusesWhatTheDeviceHasNot) {
  ibv_cq* cq = make_cq();
  mlx5dv_qp_init_attr dv{};
  dv.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS;
  dv.create_flags = MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE | MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE;
  errno = 0;
  EXPECT_EQ(dv_qp(cq, &dv), nullptr);
  EXPECT_EQ(errno, EINVAL);  // the two contradict each other (verbs.c)
  dv.create_flags = MLX5DV_QP_CREATE_TUNNEL_OFFLOADS;
  errno = 0;
  EXPECT_EQ(dv_qp(cq, &dv), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  dv = {};
  dv.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC;  // DC needs IBV_QPT_DRIVER
  dv.dc_init_attr.dc_type = MLX5DV_DCTYPE_DCI;
  errno = 0;
  EXPECT_EQ(dv_qp(cq, &dv), nullptr);
  EXPECT_EQ(errno, EINVAL);
  dv.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS;
  dv.send_ops_flags = MLX5DV_QP_EX_WITH_MR_LIST;  // memory registrations are RC's
  errno = 0;
  EXPECT_EQ(dv_qp(cq, &dv, IBV_QPT_UC), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  dv.send_ops_flags = MLX5DV_QP_EX_WITH_MEMCPY;  // the DMA engine is RC's (and DCI's) only
  errno = 0;
  EXPECT_EQ(dv_qp(cq, &dv, IBV_QPT_UD), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
}

// mlx5dv_wr_memcpy: the device copies between two local regions of the
// QP's PD (test_mlx5_dma_memcpy's flows, plus the length bounds).
TEST_F(Mlx5Mode, DmaMemcpyCopiesAndChecksKeysAndLength) {
  mlx5dv_context caps{};
  caps.comp_mask = MLX5DV_CONTEXT_MASK_WR_MEMCPY_LENGTH;
  ASSERT_EQ(mlx5dv_query_device(ctx_, &caps), 0);
  ASSERT_TRUE(caps.comp_mask & MLX5DV_CONTEXT_MASK_WR_MEMCPY_LENGTH);
  const size_t max = caps.max_wr_memcpy_length;
  ASSERT_GE(max, size_t(65536));
  ibv_cq_ex* cq = nullptr;
  ibv_qp* qp = dv_ops_qp(MLX5DV_QP_EX_WITH_MEMCPY, &cq);
  ASSERT_NE(qp, nullptr) << std::strerror(errno);
  connect_qp(qp, qp->qp_num);  // the copy sends nothing: any RTS QP
  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(qp);
  mlx5dv_qp_ex* mqpx = mlx5dv_qp_ex_from_ibv_qp_ex(qpx);
  ASSERT_NE(mqpx, nullptr);
  ASSERT_NE(mqpx->wr_memcpy, nullptr);
  EXPECT_EQ(mqpx->wr_mr_list, nullptr);  // not created with it
  // Over a whole staging chunk and not a multiple of it.
  const size_t len = 200 * 1024 + 3;
  ibv_mr* src = reg_buffer(len, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* dst = reg_buffer(len, IBV_ACCESS_LOCAL_WRITE, 0);
  for (size_t i = 0; i < len; ++i) static_cast<uint8_t*>(src->addr)[i] = uint8_t(i * 7 + 1);
  auto copy = [&](uint64_t wr_id, uint32_t dst_lkey, uint32_t src_lkey, size_t n) {
    ibv_wr_start(qpx);
    qpx->wr_id = wr_id;
    qpx->wr_flags = IBV_SEND_SIGNALED;
    mlx5dv_wr_memcpy(mqpx, dst_lkey, addr_of(dst), src_lkey, addr_of(src), n);
    return ibv_wr_complete(qpx);
  };
  EXPECT_EQ(copy(0, dst->lkey, src->lkey, 0), EINVAL);
  EXPECT_EQ(copy(0, dst->lkey, src->lkey, max + 1), EINVAL);
  ASSERT_EQ(copy(1, dst->lkey, src->lkey, len), 0);
  ibv_wc wc{};
  ASSERT_TRUE(poll_one(ibv_cq_ex_to_cq(cq), &wc));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(int(wc.opcode), int(MLX5DV_WC_MEMCPY));
  EXPECT_EQ(std::memcmp(src->addr, dst->addr, len), 0);
  // A destination without local write: a local protection error, and the
  // QP goes to error as after any failed send WQE.
  ibv_mr* read_only = reg_buffer(len, IBV_ACCESS_REMOTE_READ);
  ASSERT_EQ(copy(2, read_only->lkey, src->lkey, 64), 0);
  ASSERT_TRUE(poll_one(ibv_cq_ex_to_cq(cq), &wc));
  EXPECT_EQ(wc.wr_id, 2u);
  EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(qp_state(qp), IBV_QPS_ERR);
}

// mlx5dv_wr_raw_wqe: WQEs the program builds from mlx5's segments, mixed
// with ordinary ones (test_mlx5_raw_wqe's flow, plus WRITE, inline data and
// an atomic); each completes as MLX5DV_WC_RAW_WQE when its CQ_UPDATE is set.
TEST_F(Mlx5Mode, RawWqesCarryTrafficAndCompleteAsRawWqe) {
  ibv_cq_ex* cq = nullptr;
  ibv_qp* a = dv_ops_qp(MLX5DV_QP_EX_WITH_RAW_WQE, &cq);  // QpCaps' 64 bytes of inline data
  ASSERT_NE(a, nullptr) << std::strerror(errno);
  ibv_qp* b = make_qp(IBV_QPT_RC, ibv_cq_ex_to_cq(cq), ibv_cq_ex_to_cq(cq));
  ASSERT_NE(b, nullptr);
  connect_qp(a, b->qp_num);
  connect_qp(b, a->qp_num);
  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(a);
  mlx5dv_qp_ex* mqpx = mlx5dv_qp_ex_from_ibv_qp_ex(qpx);
  ASSERT_NE(mqpx->wr_raw_wqe, nullptr);
  ibv_mr* src = reg_buffer(256, kRw, 0x5a);
  ibv_mr* dst = reg_buffer(256, kRw, 0);
  ibv_mr* counter = reg_buffer(8, kRw | IBV_ACCESS_REMOTE_ATOMIC, 0);
  ibv_mr* fetched = reg_buffer(8, kRw, 0);
  ibv_sge rs = sge_of(dst, 0, 256);
  ASSERT_EQ(post_recv(b, 100, &rs, 1), 0);

  alignas(16) uint8_t wqe[4][64] = {};
  // 0: SEND of 16 inline bytes, signalled.
  {
    auto* ctrl = reinterpret_cast<mlx5_wqe_ctrl_seg*>(wqe[0]);
    const uint32_t count = htobe32(16 | MLX5_INLINE_SEG);
    std::memcpy(wqe[0] + 16, &count, 4);
    std::memcpy(wqe[0] + 20, "sixteen bytes!!!", 16);
    mlx5dv_set_ctrl_seg(ctrl, 0, MLX5_OPCODE_SEND, 0, a->qp_num, MLX5_WQE_CTRL_CQ_UPDATE, 3, 0, 0);
  }
  // 1: RDMA WRITE of 200 bytes from src into dst + 32, not signalled.
  {
    auto* raddr = reinterpret_cast<mlx5_wqe_raddr_seg*>(wqe[1] + 16);
    raddr->raddr = htobe64(addr_of(dst, 32));
    raddr->rkey = htobe32(dst->rkey);
    mlx5dv_set_data_seg(reinterpret_cast<mlx5_wqe_data_seg*>(wqe[1] + 32), 200, src->lkey, addr_of(src));
    mlx5dv_set_ctrl_seg(reinterpret_cast<mlx5_wqe_ctrl_seg*>(wqe[1]), 0, MLX5_OPCODE_RDMA_WRITE, 0, a->qp_num, 0, 3,
                        0, 0);
  }
  // 2: fetch-and-add 5 on the counter, signalled.
  {
    auto* raddr = reinterpret_cast<mlx5_wqe_raddr_seg*>(wqe[2] + 16);
    raddr->raddr = htobe64(addr_of(counter));
    raddr->rkey = htobe32(counter->rkey);
    auto* atomic = reinterpret_cast<mlx5_wqe_atomic_seg*>(wqe[2] + 32);
    atomic->swap_add = htobe64(5);
    mlx5dv_set_data_seg(reinterpret_cast<mlx5_wqe_data_seg*>(wqe[2] + 48), 8, fetched->lkey, addr_of(fetched));
    mlx5dv_set_ctrl_seg(reinterpret_cast<mlx5_wqe_ctrl_seg*>(wqe[2]), 0, MLX5_OPCODE_ATOMIC_FA, 0, a->qp_num,
                        MLX5_WQE_CTRL_CQ_UPDATE, 4, 0, 0);
  }
  ibv_wr_start(qpx);
  qpx->wr_id = 1;
  mlx5dv_wr_raw_wqe(mqpx, wqe[0]);
  qpx->wr_id = 2;
  mlx5dv_wr_raw_wqe(mqpx, wqe[1]);
  qpx->wr_id = 3;
  mlx5dv_wr_raw_wqe(mqpx, wqe[2]);
  qpx->wr_id = 4;  // an ordinary one in the same batch
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(qpx, dst->rkey, addr_of(dst, 240));
  ibv_wr_set_sge(qpx, src->lkey, addr_of(src), 16);
  ASSERT_EQ(ibv_wr_complete(qpx), 0);
  const auto wcs = by_wr_id(poll_n(ibv_cq_ex_to_cq(cq), 4));  // 1, 3, 4 and the receive
  ASSERT_EQ(wcs.size(), 4u);
  EXPECT_EQ(wcs.count(2), 0u);  // no CQ_UPDATE, no completion
  for (uint64_t id : {1, 3}) {
    EXPECT_EQ(wcs.at(id).status, IBV_WC_SUCCESS) << describe(wcs.at(id));
    EXPECT_EQ(int(wcs.at(id).opcode), int(MLX5DV_WC_RAW_WQE));
  }
  EXPECT_EQ(wcs.at(4).opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(wcs.at(100).byte_len, 16u);
  EXPECT_EQ(std::memcmp(dst->addr, "sixteen bytes!!!", 16), 0);
  EXPECT_EQ(static_cast<uint8_t*>(dst->addr)[32], 0x5a);
  EXPECT_EQ(static_cast<uint8_t*>(dst->addr)[231], 0x5a);
  EXPECT_EQ(*static_cast<uint64_t*>(counter->addr), 5u);
  EXPECT_EQ(*static_cast<uint64_t*>(fetched->addr), 0u);
  // A NOP says nothing a work request can: the batch fails, nothing is posted.
  std::memset(wqe[3], 0, sizeof(wqe[3]));
  mlx5dv_set_ctrl_seg(reinterpret_cast<mlx5_wqe_ctrl_seg*>(wqe[3]), 0, MLX5_OPCODE_NOP, 0, a->qp_num,
                      MLX5_WQE_CTRL_CQ_UPDATE, 1, 0, 0);
  ibv_wr_start(qpx);
  mlx5dv_wr_raw_wqe(mqpx, wqe[3]);
  EXPECT_EQ(ibv_wr_complete(qpx), EINVAL);
  EXPECT_TRUE(drain_for(ibv_cq_ex_to_cq(cq), 50).empty());
}

TEST_F(Mlx5Mode, DevxIsRefusedWithEopnotsupp) {
  mlx5dv_context_attr attr{};
  attr.flags = MLX5DV_CONTEXT_FLAGS_DEVX;
  errno = 0;
  EXPECT_EQ(mlx5dv_open_device(ctx_->device, &attr), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  // UCX reads errno after a failed general command (EOPNOTSUPP: "no DevX").
  uint32_t in[4] = {}, out[4] = {};
  errno = 0;
  EXPECT_NE(mlx5dv_devx_general_cmd(ctx_, in, sizeof(in), out, sizeof(out)), 0);
  EXPECT_EQ(errno, EOPNOTSUPP);
  attr.flags = 0;
  ibv_context* plain = mlx5dv_open_device(ctx_->device, &attr);
  ASSERT_NE(plain, nullptr) << std::strerror(errno);
  EXPECT_EQ(ibv_close_device(plain), 0);
}

// UAR pages without DevX, as a ConnectX gives them (rdma-core 44 verbs.c
// _mlx5dv_devx_alloc_uar, pyverbs' test_mlx5_uar): a page of its own for
// each BF allocation, the context's one non-cached page for NC (freeing it
// is nothing), any other flag EOPNOTSUPP.
TEST_F(Mlx5Mode, UarPagesAreGivenWithoutDevx) {
  mlx5dv_devx_uar* bf1 = mlx5dv_devx_alloc_uar(ctx_, MLX5DV_UAR_ALLOC_TYPE_BF);
  mlx5dv_devx_uar* bf2 = mlx5dv_devx_alloc_uar(ctx_, MLX5DV_UAR_ALLOC_TYPE_BF);
  ASSERT_TRUE(bf1 && bf2) << std::strerror(errno);
  EXPECT_NE(bf1->base_addr, bf2->base_addr);
  EXPECT_NE(bf1->page_id, bf2->page_id);
  EXPECT_EQ(static_cast<uint8_t*>(bf1->reg_addr) - static_cast<uint8_t*>(bf1->base_addr), 0x800);
  EXPECT_EQ(bf1->comp_mask, 0u);
  // A doorbell write to a page no queue uses goes nowhere, as on a ConnectX.
  __atomic_store_n(static_cast<uint64_t*>(bf1->reg_addr), 0x1122334455667788ull, __ATOMIC_RELEASE);
  mlx5dv_devx_uar* nc1 = mlx5dv_devx_alloc_uar(ctx_, MLX5DV_UAR_ALLOC_TYPE_NC);
  mlx5dv_devx_uar* nc2 = mlx5dv_devx_alloc_uar(ctx_, MLX5DV_UAR_ALLOC_TYPE_NC);
  ASSERT_NE(nc1, nullptr) << std::strerror(errno);
  EXPECT_EQ(nc1, nc2) << "the context's one non-cached page";
  mlx5dv_devx_free_uar(nc1);
  EXPECT_EQ(mlx5dv_devx_alloc_uar(ctx_, MLX5DV_UAR_ALLOC_TYPE_NC), nc1) << "freeing it was nothing";
  errno = 0;
  EXPECT_EQ(mlx5dv_devx_alloc_uar(ctx_, 2), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  mlx5dv_devx_free_uar(bf1);
  mlx5dv_devx_free_uar(bf2);
  mlx5dv_devx_free_uar(nullptr);
}

TEST_F(Mlx5Mode, InitObjGivesPdAndDmAndKeepsCqsWithCompletionsInUroceFormat) {
  ibv_alloc_dm_attr dm_attr{};
  dm_attr.length = 256;
  mlx5dv_alloc_dm_attr dv_dm{};
  dv_dm.type = MLX5DV_DM_TYPE_MEMIC;
  ibv_dm* dm = mlx5dv_alloc_dm(ctx_, &dm_attr, &dv_dm);
  ASSERT_NE(dm, nullptr) << std::strerror(errno);
  defer([dm] { ibv_free_dm(dm); });
  mlx5dv_pd dvpd{};
  mlx5dv_dm dvdm{};
  mlx5dv_obj obj{};
  obj.pd.in = pd_;
  obj.pd.out = &dvpd;
  obj.dm.in = dm;
  obj.dm.out = &dvdm;
  ASSERT_EQ(mlx5dv_init_obj(&obj, MLX5DV_OBJ_PD | MLX5DV_OBJ_DM), 0);
  EXPECT_EQ(mlx5dv_init_obj(&obj, MLX5DV_OBJ_RWQ), EINVAL) << "no WQ given (obj.rwq.in null)";
  EXPECT_EQ(dvpd.pdn, pd_->handle);
  ASSERT_NE(dvdm.buf, nullptr);
  EXPECT_EQ(dvdm.length, 256u);
  // Stores into the mapping are device memory, as UCX's are.
  const uint64_t word = 0x1122334455667788ull;
  std::memcpy(static_cast<uint8_t*>(dvdm.buf) + 64, &word, 8);
  uint64_t back = 0;
  ASSERT_EQ(ibv_memcpy_from_dm(&back, dm, 64, 8), 0);
  EXPECT_EQ(back, word);

  ibv_comp_channel* ch = make_channel();
  ASSERT_NE(ch, nullptr);
  ibv_cq* cq = make_cq(16, ch);
  mlx5dv_qp_init_attr qp_dv{};
  ibv_qp* qp = dv_qp(cq, &qp_dv);
  ASSERT_NE(qp, nullptr) << std::strerror(errno);
  // A CQ with completions waiting in uroce's format is not converted.
  ibv_sge none{};
  connect_qp(qp, qp->qp_num);
  ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);
  ASSERT_EQ(post_send(qp, 1, IBV_WR_RDMA_WRITE, &none, 0, IBV_SEND_SIGNALED, 0, 0), 0);
  ASSERT_TRUE(fd_readable(ch->fd, 5000)) << "no completion";
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  ASSERT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0);
  ibv_ack_cq_events(ev_cq, 1);
  mlx5dv_cq dvcq{};
  obj = {};
  obj.cq.in = cq;
  obj.cq.out = &dvcq;
  EXPECT_EQ(mlx5dv_init_obj(&obj, MLX5DV_OBJ_CQ), EBUSY);
  dv_dm.type = MLX5DV_DM_TYPE_STEERING_SW_ICM;
  errno = 0;
  EXPECT_EQ(mlx5dv_alloc_dm(ctx_, &dm_attr, &dv_dm), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
}

// Without --mlx5 the device is not mlx5: every direct verb fails as
// rdma-core's libmlx5 fails on another vendor's device.
class NotMlx5 : public VerbsTest {};

TEST_F(NotMlx5, DirectVerbsRefuseTheDevice) {
  EXPECT_FALSE(mlx5dv_is_supported(ctx_->device));
  mlx5dv_context_attr attr{};
  errno = 0;
  EXPECT_EQ(mlx5dv_open_device(ctx_->device, &attr), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  mlx5dv_context dv{};
  EXPECT_EQ(mlx5dv_query_device(ctx_, &dv), EOPNOTSUPP);
  mlx5dv_clock_info ci{};
  EXPECT_EQ(mlx5dv_get_clock_info(ctx_, &ci), EOPNOTSUPP);
  ibv_cq_init_attr_ex cq_attr{};
  cq_attr.cqe = 8;
  errno = 0;
  EXPECT_EQ(mlx5dv_create_cq(ctx_, &cq_attr, nullptr), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  ibv_cq* cq = make_cq();
  ibv_qp_init_attr_ex qp_attr = qp_ex_attr(IBV_QPT_RC, cq, 0, {});
  qp_attr.comp_mask = IBV_QP_INIT_ATTR_PD;
  ibv_qp* qp = ibv_create_qp_ex(ctx_, &qp_attr);
  ASSERT_NE(qp, nullptr) << std::strerror(errno);
  connect_qp(qp, qp->qp_num);
  EXPECT_EQ(mlx5dv_modify_qp_udp_sport(qp, 55555), EOPNOTSUPP);
  ibv_destroy_qp(qp);
  errno = 0;
  EXPECT_EQ(mlx5dv_devx_alloc_uar(ctx_, MLX5DV_UAR_ALLOC_TYPE_BF), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  ibv_device_attr da{};
  ASSERT_EQ(ibv_query_device(ctx_, &da), 0);
  EXPECT_NE(da.vendor_id, 0x02c9u);
}

}  // namespace
}  // namespace vt
