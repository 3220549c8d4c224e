// Tests for include/uroce/abi.h: the layouts shared by the provider and the
// engine. The expected offsets are written out here so that a change to the
// header that moves a field fails a test (and needs an ABI version bump).
#include "uroce/abi.h"

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cstddef>
#include <cstring>
#include <type_traits>

namespace uroce::abi {
namespace {

// Plain data that crosses processes: copyable byte for byte, no hidden padding
// (padding bytes would leak engine or client stack contents across).
template <typename T>
constexpr bool is_wire_struct() {
  return std::is_standard_layout_v<T> && std::is_trivially_copyable_v<T> &&
         std::has_unique_object_representations_v<T>;
}

TEST(Abi, VersionAndMagic) {
  EXPECT_EQ(kMagic, 0x434f5255u);
  const char expect[4] = {'U', 'R', 'O', 'C'};  // little-endian "UROC"
  EXPECT_EQ(std::memcmp(&kMagic, expect, 4), 0);
  EXPECT_GE(kVersion, 1u);
}

TEST(Abi, QueueHeaderPutsEachIndexOnItsOwnCacheLine) {
  EXPECT_EQ(kCacheLine, 64u);
  EXPECT_EQ(offsetof(QueueHeader, producer), 0u);
  EXPECT_EQ(offsetof(QueueHeader, consumer), 64u);
  EXPECT_EQ(offsetof(QueueHeader, notify), 128u);
  EXPECT_EQ(offsetof(QueueHeader, log2_entries), 136u);
  EXPECT_EQ(offsetof(QueueHeader, stride), 140u);
  EXPECT_EQ(sizeof(QueueHeader), 192u);
  EXPECT_EQ(alignof(QueueHeader), 64u);
  EXPECT_EQ(kQueueEntriesOffset, 192u);
  EXPECT_EQ(kQueueEntriesOffset % kCacheLine, 0u);
  EXPECT_TRUE(std::is_standard_layout_v<QueueHeader>);
  EXPECT_TRUE(std::atomic<uint32_t>::is_always_lock_free);
  EXPECT_EQ(sizeof(std::atomic<uint32_t>), 4u);
}

TEST(Abi, SgeLayout) {
  EXPECT_EQ(sizeof(Sge), 16u);
  EXPECT_EQ(offsetof(Sge, addr), 0u);
  EXPECT_EQ(offsetof(Sge, length), 8u);
  EXPECT_EQ(offsetof(Sge, lkey), 12u);
  EXPECT_TRUE(is_wire_struct<Sge>());
}

TEST(Abi, AddressVectorLayout) {
  EXPECT_EQ(sizeof(AddressVector), 32u);
  EXPECT_EQ(offsetof(AddressVector, dgid), 0u);
  EXPECT_EQ(offsetof(AddressVector, flow_label), 16u);
  EXPECT_EQ(offsetof(AddressVector, sgid_index), 20u);
  EXPECT_EQ(offsetof(AddressVector, hop_limit), 21u);
  EXPECT_EQ(offsetof(AddressVector, traffic_class), 22u);
  EXPECT_EQ(offsetof(AddressVector, sl), 23u);
  EXPECT_EQ(offsetof(AddressVector, is_global), 24u);
  EXPECT_EQ(offsetof(AddressVector, port_num), 25u);
  EXPECT_TRUE(is_wire_struct<AddressVector>());
}

TEST(Abi, SendWqeLayout) {
  EXPECT_EQ(sizeof(SendWqe), 128u);
  EXPECT_EQ(offsetof(SendWqe, wr_id), 0u);
  EXPECT_EQ(offsetof(SendWqe, opcode), 8u);
  EXPECT_EQ(offsetof(SendWqe, flags), 12u);
  EXPECT_EQ(offsetof(SendWqe, imm_data), 16u);
  EXPECT_EQ(offsetof(SendWqe, num_sge), 20u);
  EXPECT_EQ(offsetof(SendWqe, inline_len), 24u);
  EXPECT_EQ(offsetof(SendWqe, rkey), 28u);
  EXPECT_EQ(offsetof(SendWqe, remote_addr), 32u);
  EXPECT_EQ(offsetof(SendWqe, compare_add), 40u);
  EXPECT_EQ(offsetof(SendWqe, swap), 48u);
  EXPECT_EQ(offsetof(SendWqe, remote_qpn), 56u);
  EXPECT_EQ(offsetof(SendWqe, remote_qkey), 60u);
  EXPECT_EQ(offsetof(SendWqe, xrc_remote_srqn), 64u);
  EXPECT_EQ(offsetof(SendWqe, av), 72u);
  EXPECT_EQ(offsetof(SendWqe, av) + sizeof(AddressVector) + 24, 128u);
  // The SGE list or inline data follows the header, 8-byte aligned.
  EXPECT_EQ(sizeof(SendWqe) % alignof(Sge), 0u);
  EXPECT_TRUE(is_wire_struct<SendWqe>());
}

TEST(Abi, RecvWqeLayout) {
  EXPECT_EQ(sizeof(RecvWqe), 16u);
  EXPECT_EQ(offsetof(RecvWqe, wr_id), 0u);
  EXPECT_EQ(offsetof(RecvWqe, num_sge), 8u);
  EXPECT_EQ(sizeof(RecvWqe) % alignof(Sge), 0u);
  EXPECT_TRUE(is_wire_struct<RecvWqe>());
}

TEST(Abi, CqeLayout) {
  EXPECT_EQ(sizeof(Cqe), 64u);  // one cache line, a power of two for the ring stride
  EXPECT_EQ(offsetof(Cqe, wr_id), 0u);
  EXPECT_EQ(offsetof(Cqe, status), 8u);
  EXPECT_EQ(offsetof(Cqe, opcode), 12u);
  EXPECT_EQ(offsetof(Cqe, vendor_err), 16u);
  EXPECT_EQ(offsetof(Cqe, byte_len), 20u);
  EXPECT_EQ(offsetof(Cqe, imm_data), 24u);
  EXPECT_EQ(offsetof(Cqe, qp_num), 28u);
  EXPECT_EQ(offsetof(Cqe, src_qp), 32u);
  EXPECT_EQ(offsetof(Cqe, wc_flags), 36u);
  EXPECT_EQ(offsetof(Cqe, pkey_index), 40u);
  EXPECT_EQ(offsetof(Cqe, slid), 42u);
  EXPECT_EQ(offsetof(Cqe, sl), 44u);
  EXPECT_EQ(offsetof(Cqe, dlid_path_bits), 45u);
  EXPECT_EQ(offsetof(Cqe, timestamp_ns), 48u);
  EXPECT_TRUE(is_wire_struct<Cqe>());
}

TEST(Abi, EngineSharedLayout) {
  EXPECT_EQ(offsetof(EngineShared, magic), 0u);
  EXPECT_EQ(offsetof(EngineShared, version), 4u);
  EXPECT_EQ(offsetof(EngineShared, sleeping), 64u);
  EXPECT_EQ(offsetof(EngineShared, port_state), 128u);
  // The GID table (ABI 12) on a cache line of its own, after polling_cpu's.
  EXPECT_EQ(offsetof(EngineShared, gid_seq), 192u);
  EXPECT_EQ(offsetof(EngineShared, gids), 200u);
  EXPECT_TRUE(std::atomic<uint32_t>::is_always_lock_free);
  EXPECT_LE(sizeof(EngineShared), 4096u);
  EXPECT_TRUE(std::is_standard_layout_v<EngineShared>);
}

TEST(Abi, EventRecordsFitAtomicPipeWrites) {
  EXPECT_EQ(sizeof(AsyncEventRecord), 16u);
  EXPECT_EQ(offsetof(AsyncEventRecord, cookie), 8u);
  EXPECT_EQ(sizeof(CompEventRecord), 8u);
  EXPECT_TRUE(is_wire_struct<AsyncEventRecord>());
  EXPECT_TRUE(is_wire_struct<CompEventRecord>());
}

TEST(Abi, CqNotifyValues) {
  EXPECT_EQ(kCqNotifyNone, 0u);
  EXPECT_EQ(kCqNotifyNext, 1u);
  EXPECT_EQ(kCqNotifySolicited, 2u);
}

TEST(Abi, ControlMessagesAreFixedLayout) {
  EXPECT_EQ(sizeof(CtlRequestHeader), 8u);
  EXPECT_EQ(sizeof(CtlReplyHeader), 8u);
  EXPECT_EQ(sizeof(HandleRequest), 8u);
  EXPECT_EQ(sizeof(RegMrRequest), 56u);
  EXPECT_EQ(offsetof(RegMrRequest, access), 32u);
  EXPECT_EQ(offsetof(RegMrRequest, shared), 40u);
  EXPECT_EQ(sizeof(RegMrReply), 16u);
  EXPECT_EQ(sizeof(ReregMrRequest), 56u);
  EXPECT_EQ(offsetof(ReregMrRequest, shared), 40u);
  EXPECT_EQ(sizeof(CreateCqRequest), 24u);
  EXPECT_EQ(sizeof(CreateCqReply), 24u);
  EXPECT_EQ(sizeof(QpCaps), 24u);
  EXPECT_EQ(sizeof(CreateQpRequest), 88u);
  EXPECT_EQ(offsetof(CreateQpRequest, create_flags), 80u);
  EXPECT_EQ(sizeof(FlowKey), 64u);
  EXPECT_EQ(offsetof(CreateFlowRequest, value), 40u);
  EXPECT_EQ(offsetof(CreateFlowRequest, mask), 104u);
  EXPECT_EQ(offsetof(CreateQpRequest, caps), 48u);
  EXPECT_EQ(sizeof(CreateQpReply), 80u);
  EXPECT_EQ(offsetof(QpAttr, ah) % 4, 0u);
  EXPECT_EQ(sizeof(PortInfo), 32u);
  EXPECT_EQ(sizeof(GidEntry), 24u);
  // Every control message must fit one SOCK_SEQPACKET message.
  EXPECT_LE(sizeof(CtlReplyHeader) + sizeof(HelloReply), kMaxCtlMsg);
  EXPECT_LE(sizeof(CtlRequestHeader) + sizeof(ModifyQpRequest), kMaxCtlMsg);
}

TEST(Abi, ControlMessagesHaveNoHiddenPadding) {
  EXPECT_TRUE(is_wire_struct<CtlRequestHeader>());
  EXPECT_TRUE(is_wire_struct<CtlReplyHeader>());
  EXPECT_TRUE(is_wire_struct<HandleRequest>());
  EXPECT_TRUE(is_wire_struct<AllocPdReply>());
  EXPECT_TRUE(is_wire_struct<RegMrRequest>());
  EXPECT_TRUE(is_wire_struct<RegMrReply>());
  EXPECT_TRUE(is_wire_struct<ReregMrRequest>());
  EXPECT_TRUE(is_wire_struct<CreateCompChannelReply>());
  EXPECT_TRUE(is_wire_struct<CreateCqRequest>());
  EXPECT_TRUE(is_wire_struct<CreateCqReply>());
  EXPECT_TRUE(is_wire_struct<ResizeCqRequest>());
  EXPECT_TRUE(is_wire_struct<QpCaps>());
  EXPECT_TRUE(is_wire_struct<CreateQpRequest>());
  EXPECT_TRUE(is_wire_struct<CreateQpReply>());
  EXPECT_TRUE(is_wire_struct<QpAttr>());
  EXPECT_TRUE(is_wire_struct<QueryQpReply>());
  EXPECT_TRUE(is_wire_struct<PortInfo>());
  EXPECT_TRUE(is_wire_struct<GidEntry>());
  EXPECT_TRUE(is_wire_struct<DeviceInfo>());
  EXPECT_TRUE(is_wire_struct<HelloRequest>());
  EXPECT_TRUE(is_wire_struct<HelloReply>());
  EXPECT_TRUE(is_wire_struct<QueryPortReply>());
}

// QpAttr follows a uint64_t handle: its size must keep the request free of
// implicit tail padding, which would cross the socket uninitialised.
TEST(Abi, ModifyQpRequestHasExplicitPadding) {
  EXPECT_EQ(sizeof(ModifyQpRequest), 16u + sizeof(QpAttr));
  EXPECT_TRUE(is_wire_struct<ModifyQpRequest>());
  EXPECT_TRUE(is_wire_struct<FlowKey>());
  EXPECT_TRUE(is_wire_struct<CreateFlowRequest>());
  EXPECT_TRUE(is_wire_struct<CreateFlowReply>());
}

TEST(Abi, CtlOpsAreStable) {
  // Values on the socket: renumbering breaks old providers.
  EXPECT_EQ(uint32_t(CtlOp::kHello), 1u);
  EXPECT_EQ(uint32_t(CtlOp::kRegMr), 5u);
  EXPECT_EQ(uint32_t(CtlOp::kCreateQp), 13u);
  EXPECT_EQ(uint32_t(CtlOp::kModifyQp), 14u);
  EXPECT_EQ(uint32_t(CtlOp::kStats), 18u);
  EXPECT_EQ(uint32_t(CtlOp::kQueryDevice), 19u);
}

TEST(Abi, VerbsEnumsTheAbiCarries) {
  // The ABI carries these libibverbs values verbatim (rdma-core 44).
  EXPECT_EQ(IBV_WR_RDMA_WRITE, 0);
  EXPECT_EQ(IBV_WR_SEND, 2);
  EXPECT_EQ(IBV_WR_RDMA_READ, 4);
  EXPECT_EQ(IBV_WR_ATOMIC_FETCH_AND_ADD, 6);
  EXPECT_EQ(IBV_WC_SUCCESS, 0);
  EXPECT_EQ(IBV_WC_WR_FLUSH_ERR, 5);
  EXPECT_EQ(IBV_WC_RECV, 128);
  // ATOMIC WRITE: the opcode in SendWqe and the CQE, and the capability bit
  // (the kernel's IB_UVERBS_DEVICE_ATOMIC_WRITE) in DeviceInfo::raw.
  EXPECT_EQ(IBV_WR_ATOMIC_WRITE, 15);
  EXPECT_EQ(IBV_WC_ATOMIC_WRITE, 9);
  EXPECT_EQ(IBV_QP_EX_WITH_ATOMIC_WRITE, 1 << 12);
  EXPECT_EQ(kDeviceAtomicWrite, 1ull << 40);
}

}  // namespace
}  // namespace uroce::abi
