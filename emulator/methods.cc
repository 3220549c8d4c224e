// The method table: what each control request carries. Indexed by abi::CtlOp;
// an operation without an entry is EOPNOTSUPP.
#include "emulator/methods.h"

namespace uroce::emulator {

namespace {

using abi::CtlOp;

struct Size {
  uint32_t bytes;
  SizeRule rule;
};
template <typename T>
constexpr Size exact() {
  return {sizeof(T), SizeRule::kExact};
}
template <typename T>
constexpr Size up_to() {
  return {sizeof(T), SizeRule::kUpTo};
}
constexpr Size kNoBody{0, SizeRule::kExact};

struct Fds {
  uint8_t min, max;
  FdKind kind = FdKind::kAny;
};
constexpr Fds kNoFds{0, 0};
constexpr Fds fds_exactly(uint8_t n, FdKind kind = FdKind::kAny) { return {n, n, kind}; }
constexpr Fds fds_optional(uint8_t n, FdKind kind = FdKind::kAny) { return {0, n, kind}; }

// A handle field of request struct S (a uint64_t).
#define UROCE_HANDLE(S, field, obj_type, ...) \
  HandleAttr { uint16_t(offsetof(S, field)), ObjType::obj_type, __VA_ARGS__ }

template <typename... A>
constexpr Method method(const char* name, Handler handler, Size size, Fds fds, A... handles) {
  Method m{name, handler, size.bytes, size.rule, fds.min, fds.max, fds.kind, {handles...}, uint8_t(sizeof...(A))};
  return m;
}

constexpr HandleAttr optional(HandleAttr a) {
  a.optional = true;
  return a;
}
// A completion channel is a file in the kernel (UVERBS_ATTR_FD): one that is
// not a channel of this process is EBADF (lookup_get_fd_uobject).
constexpr HandleAttr channel(HandleAttr a) {
  a.optional = true;
  a.missing_errno = EBADF;
  return a;
}
// A write() command's object argument: a failed lookup is EINVAL.
constexpr HandleAttr einval(HandleAttr a) {
  a.missing_errno = EINVAL;
  return a;
}
// The object the method destroys (uobj_perform_destroy: ENOENT).
constexpr HandleAttr destroyed(HandleAttr a) {
  a.destroys = true;
  return a;
}
// An operation on the whole engine: its owner and root only.
constexpr Method engine_wide(Method m) {
  m.engine_wide = true;
  return m;
}

using Table = std::array<Method, size_t(CtlOp::kCount)>;

constexpr Table make_table() {
  Table t{};
  auto at = [&t](CtlOp op) -> Method& { return t[size_t(op)]; };
  using namespace abi;

  // Connection, device and port (methods_device.cc).
  at(CtlOp::kHello) = method("hello", hello, exact<HelloRequest>(), fds_exactly(1, FdKind::kPipe));  // async pipe
  at(CtlOp::kQueryDevice) = method("query_device", query_device, kNoBody, kNoFds);
  at(CtlOp::kQueryPort) = method("query_port", query_port, kNoBody, kNoFds);
  at(CtlOp::kSetPortState) =
      engine_wide(method("set_port_state", set_port_state, exact<SetPortStateRequest>(), kNoFds));

  // PD, MR and MW (methods_pd_mr.cc).
  at(CtlOp::kAllocPd) = method("alloc_pd", alloc_pd, kNoBody, kNoFds);
  at(CtlOp::kDeallocPd) = method("dealloc_pd", dealloc_pd, exact<HandleRequest>(), kNoFds,
                                 destroyed(UROCE_HANDLE(HandleRequest, handle, kPd)));
  at(CtlOp::kRegMr) = method("reg_mr", reg_mr, exact<RegMrRequest>(), fds_optional(1, FdKind::kRegularFile),  // memfd
                             einval(UROCE_HANDLE(RegMrRequest, pd, kPd)));
  at(CtlOp::kReregMr) = method("rereg_mr", rereg_mr, exact<ReregMrRequest>(), fds_optional(1, FdKind::kRegularFile),
                               UROCE_HANDLE(ReregMrRequest, handle, kMr),
                               einval(optional(UROCE_HANDLE(ReregMrRequest, pd, kPd))));
  at(CtlOp::kDeregMr) = method("dereg_mr", dereg_mr, exact<HandleRequest>(), kNoFds,
                               destroyed(UROCE_HANDLE(HandleRequest, handle, kMr)));
  at(CtlOp::kAllocMw) = method("alloc_mw", alloc_mw, exact<AllocMwRequest>(), kNoFds,
                               einval(UROCE_HANDLE(AllocMwRequest, pd, kPd)));
  at(CtlOp::kDeallocMw) = method("dealloc_mw", dealloc_mw, exact<HandleRequest>(), kNoFds,
                                 destroyed(UROCE_HANDLE(HandleRequest, handle, kMw)));
  at(CtlOp::kCreateMkey) = method("create_mkey", create_mkey, exact<CreateMkeyRequest>(), kNoFds,
                                  einval(UROCE_HANDLE(CreateMkeyRequest, pd, kPd)));
  at(CtlOp::kDestroyMkey) = method("destroy_mkey", destroy_mkey, exact<HandleRequest>(), kNoFds,
                                   destroyed(UROCE_HANDLE(HandleRequest, handle, kMkey)));

  // Device memory (methods_dm.cc). ib_uverbs_reg_dm_mr's PD and DM are
  // write()-style arguments: a failed lookup is EINVAL.
  at(CtlOp::kAllocDm) = method("alloc_dm", alloc_dm, exact<AllocDmRequest>(), kNoFds);
  at(CtlOp::kFreeDm) = method("free_dm", free_dm, exact<HandleRequest>(), kNoFds,
                              destroyed(UROCE_HANDLE(HandleRequest, handle, kDm)));
  at(CtlOp::kRegDmMr) = method("reg_dm_mr", reg_dm_mr, exact<RegDmMrRequest>(), kNoFds,
                               einval(UROCE_HANDLE(RegDmMrRequest, pd, kPd)),
                               einval(UROCE_HANDLE(RegDmMrRequest, dm, kDm)));

  // Imports (ibv_import_pd/mr/dm): a handle of this session, named again.
  at(CtlOp::kImportPd) = method("import_pd", import_pd, exact<HandleRequest>(), kNoFds,
                                UROCE_HANDLE(HandleRequest, handle, kPd));
  at(CtlOp::kImportMr) = method("import_mr", import_mr, exact<HandleRequest>(), kNoFds,
                                UROCE_HANDLE(HandleRequest, handle, kMr));
  at(CtlOp::kImportDm) = method("import_dm", import_dm, exact<HandleRequest>(), kNoFds,
                                UROCE_HANDLE(HandleRequest, handle, kDm));

  // Completion channels and CQs (methods_cq.cc).
  at(CtlOp::kCreateCompChannel) =
      method("create_comp_channel", create_comp_channel, kNoBody, fds_exactly(1, FdKind::kPipe));  // pipe
  at(CtlOp::kDestroyCompChannel) =
      method("destroy_comp_channel", destroy_comp_channel, exact<HandleRequest>(), kNoFds,
             destroyed(UROCE_HANDLE(HandleRequest, handle, kCompChannel)));
  at(CtlOp::kCreateCq) = method("create_cq", create_cq, exact<CreateCqRequest>(), kNoFds,
                                channel(UROCE_HANDLE(CreateCqRequest, channel, kCompChannel)));
  at(CtlOp::kResizeCq) = method("resize_cq", resize_cq, exact<ResizeCqRequest>(), kNoFds,
                                einval(UROCE_HANDLE(ResizeCqRequest, handle, kCq)));
  at(CtlOp::kDestroyCq) = method("destroy_cq", destroy_cq, exact<HandleRequest>(), kNoFds,
                                 destroyed(UROCE_HANDLE(HandleRequest, handle, kCq)));
  at(CtlOp::kMlx5CqFormat) = method("mlx5_cq_format", mlx5_cq_format, exact<Mlx5CqFormatRequest>(), kNoFds,
                                    einval(UROCE_HANDLE(Mlx5CqFormatRequest, handle, kCq)));

  // QPs (methods_qp.cc). PD and CQs are optional here: an XRC target QP has
  // none, an XRC initiator no receive CQ; the device checks what each type needs.
  at(CtlOp::kCreateQp) = method("create_qp", create_qp, exact<CreateQpRequest>(), kNoFds,
                                optional(UROCE_HANDLE(CreateQpRequest, pd, kPd)),
                                optional(UROCE_HANDLE(CreateQpRequest, send_cq, kCq)),
                                optional(UROCE_HANDLE(CreateQpRequest, recv_cq, kCq)),
                                optional(UROCE_HANDLE(CreateQpRequest, srq, kSrq)),
                                optional(UROCE_HANDLE(CreateQpRequest, xrcd, kXrcd)));
  at(CtlOp::kModifyQp) = method("modify_qp", modify_qp, exact<ModifyQpRequest>(), kNoFds,
                                einval(UROCE_HANDLE(ModifyQpRequest, handle, kQp)));
  at(CtlOp::kQueryQp) = method("query_qp", query_qp, exact<HandleRequest>(), kNoFds,
                               einval(UROCE_HANDLE(HandleRequest, handle, kQp)));
  at(CtlOp::kDestroyQp) = method("destroy_qp", destroy_qp, exact<HandleRequest>(), kNoFds,
                                 destroyed(UROCE_HANDLE(HandleRequest, handle, kQp)));
  at(CtlOp::kSetQpUdpSport) = method("set_qp_udp_sport", set_qp_udp_sport, exact<QpUdpSportRequest>(),
                                     kNoFds, einval(UROCE_HANDLE(QpUdpSportRequest, handle, kQp)));
  at(CtlOp::kMlx5QpDc) = method("mlx5_qp_dc", mlx5_qp_dc, exact<Mlx5QpDcRequest>(), kNoFds,
                                einval(UROCE_HANDLE(Mlx5QpDcRequest, handle, kQp)));
  at(CtlOp::kDciStreamReset) = method("dci_stream_reset", dci_stream_reset, exact<DciStreamResetRequest>(),
                                      kNoFds, einval(UROCE_HANDLE(DciStreamResetRequest, handle, kQp)));
  at(CtlOp::kMlx5QpFormat) = method("mlx5_qp_format", mlx5_qp_format, exact<HandleRequest>(), kNoFds,
                                    einval(UROCE_HANDLE(HandleRequest, handle, kQp)));

  // SRQs and XRC (methods_srq_xrc.cc).
  at(CtlOp::kCreateSrq) = method("create_srq", create_srq, exact<CreateSrqRequest>(), kNoFds,
                                 optional(UROCE_HANDLE(CreateSrqRequest, pd, kPd)),
                                 optional(UROCE_HANDLE(CreateSrqRequest, xrcd, kXrcd)),
                                 optional(UROCE_HANDLE(CreateSrqRequest, cq, kCq)));
  at(CtlOp::kModifySrq) = method("modify_srq", modify_srq, exact<ModifySrqRequest>(), kNoFds,
                                 einval(UROCE_HANDLE(ModifySrqRequest, handle, kSrq)));
  at(CtlOp::kQuerySrq) = method("query_srq", query_srq, exact<HandleRequest>(), kNoFds,
                                einval(UROCE_HANDLE(HandleRequest, handle, kSrq)));
  at(CtlOp::kDestroySrq) = method("destroy_srq", destroy_srq, exact<HandleRequest>(), kNoFds,
                                  destroyed(UROCE_HANDLE(HandleRequest, handle, kSrq)));
  at(CtlOp::kMlx5SrqFormat) = method("mlx5_srq_format", mlx5_srq_format, exact<HandleRequest>(), kNoFds,
                                     einval(UROCE_HANDLE(HandleRequest, handle, kSrq)));
  // Versions 4-7 posted TM list operations here; they go through the
  // TM-SRQ's ring now (abi::TmOpsHeader), the slot keeps later ops' numbers.
  at(CtlOp::kUnusedPostSrqOps) = method("unused_post_srq_ops", [](Call&) { return EOPNOTSUPP; }, kNoBody, kNoFds);
  at(CtlOp::kOpenXrcd) =
      method("open_xrcd", open_xrcd, exact<OpenXrcdRequest>(), fds_optional(1));  // the file
  at(CtlOp::kCloseXrcd) = method("close_xrcd", close_xrcd, exact<HandleRequest>(), kNoFds,
                                 destroyed(UROCE_HANDLE(HandleRequest, handle, kXrcd)));
  at(CtlOp::kOpenQp) = method("open_qp", open_qp, exact<OpenQpRequest>(), kNoFds,
                              einval(UROCE_HANDLE(OpenQpRequest, xrcd, kXrcd)));

  // Address handles (methods_ah.cc): the address vector stays in the
  // client, the engine counts them against max_ah and holds their PD.
  at(CtlOp::kCreateAh) = method("create_ah", create_ah, exact<CreateAhRequest>(), kNoFds,
                                einval(UROCE_HANDLE(CreateAhRequest, pd, kPd)));
  at(CtlOp::kDestroyAh) = method("destroy_ah", destroy_ah, exact<HandleRequest>(), kNoFds,
                                 destroyed(UROCE_HANDLE(HandleRequest, handle, kAh)));

  // Flow steering rules (methods_flow.cc). Destroying a rule is a write()
  // command in the kernel: an unknown handle is EINVAL.
  at(CtlOp::kCreateFlow) = method("create_flow", create_flow, exact<CreateFlowRequest>(), kNoFds,
                                  einval(UROCE_HANDLE(CreateFlowRequest, qp, kQp)));
  at(CtlOp::kDestroyFlow) = method("destroy_flow", destroy_flow, exact<HandleRequest>(), kNoFds,
                                   destroyed(einval(UROCE_HANDLE(HandleRequest, handle, kFlow))));
  // UD multicast groups (methods_mcast.cc); uverbs looks the QP up as a
  // write() command does: EINVAL when it is not there.
  at(CtlOp::kAttachMcast) = method("attach_mcast", attach_mcast, exact<McastRequest>(), kNoFds,
                                   einval(UROCE_HANDLE(McastRequest, qp, kQp)));
  at(CtlOp::kDetachMcast) = method("detach_mcast", detach_mcast, exact<McastRequest>(), kNoFds,
                                   einval(UROCE_HANDLE(McastRequest, qp, kQp)));
  // Receive WQs, indirection tables and RSS QPs (methods_wq.cc). The
  // table's WQ handles are resolved by its handler (a variable list). An
  // RSS QP is a QP: kDestroyQp and kCreateFlow take its handle.
  at(CtlOp::kCreateWq) = method("create_wq", create_wq, exact<CreateWqRequest>(), kNoFds,
                                UROCE_HANDLE(CreateWqRequest, pd, kPd), UROCE_HANDLE(CreateWqRequest, cq, kCq));
  at(CtlOp::kModifyWq) = method("modify_wq", modify_wq, exact<ModifyWqRequest>(), kNoFds,
                                einval(UROCE_HANDLE(ModifyWqRequest, handle, kWq)));
  at(CtlOp::kMlx5WqFormat) = method("mlx5_wq_format", mlx5_wq_format, exact<HandleRequest>(), kNoFds,
                                    einval(UROCE_HANDLE(HandleRequest, handle, kWq)));
  at(CtlOp::kDestroyWq) = method("destroy_wq", destroy_wq, exact<HandleRequest>(), kNoFds,
                                 destroyed(UROCE_HANDLE(HandleRequest, handle, kWq)));
  at(CtlOp::kCreateRwqIndTable) =
      method("create_rwq_ind_table", create_rwq_ind_table, up_to<CreateRwqIndTableRequest>(), kNoFds);
  at(CtlOp::kDestroyRwqIndTable) = method("destroy_rwq_ind_table", destroy_rwq_ind_table, exact<HandleRequest>(),
                                          kNoFds, destroyed(UROCE_HANDLE(HandleRequest, handle, kRwqIndTable)));
  at(CtlOp::kCreateRssQp) = method("create_rss_qp", create_rss_qp, exact<CreateRssQpRequest>(), kNoFds,
                                   UROCE_HANDLE(CreateRssQpRequest, pd, kPd),
                                   UROCE_HANDLE(CreateRssQpRequest, ind_table, kRwqIndTable));

  // The connection manager (methods_cm.cc). Its ids and channels are the
  // CM agent's, which checks each is the caller's (cm/cm_agent.h).
  at(CtlOp::kCmCreateChannel) =
      method("cm_create_channel", cm_create_channel, kNoBody, fds_exactly(1, FdKind::kPipe));  // event pipe
  at(CtlOp::kCmDestroyChannel) =
      method("cm_destroy_channel", cm_destroy_channel, exact<CmHandleRequest>(), kNoFds);
  at(CtlOp::kCmCreateId) = method("cm_create_id", cm_create_id, exact<CmCreateIdRequest>(), kNoFds);
  at(CtlOp::kCmDestroyId) = method("cm_destroy_id", cm_destroy_id, exact<CmHandleRequest>(), kNoFds);
  at(CtlOp::kCmBind) = method("cm_bind", cm_bind, exact<CmBindRequest>(), kNoFds);
  at(CtlOp::kCmResolveAddr) = method("cm_resolve_addr", cm_resolve_addr, exact<CmResolveAddrRequest>(), kNoFds);
  at(CtlOp::kCmResolveRoute) = method("cm_resolve_route", cm_resolve_route, exact<CmHandleRequest>(), kNoFds);
  at(CtlOp::kCmListen) = method("cm_listen", cm_listen, exact<CmListenRequest>(), kNoFds);
  at(CtlOp::kCmConnect) = method("cm_connect", cm_connect, exact<CmConnectRequest>(), kNoFds);
  at(CtlOp::kCmAccept) = method("cm_accept", cm_accept, exact<CmConnectRequest>(), kNoFds);
  at(CtlOp::kCmReject) = method("cm_reject", cm_reject, exact<CmRejectRequest>(), kNoFds);
  at(CtlOp::kCmEstablish) = method("cm_establish", cm_establish, exact<CmHandleRequest>(), kNoFds);
  at(CtlOp::kCmDisconnect) = method("cm_disconnect", cm_disconnect, exact<CmHandleRequest>(), kNoFds);
  at(CtlOp::kCmMigrate) = method("cm_migrate", cm_migrate, exact<CmMigrateRequest>(), kNoFds);

  // The uroce command (methods_tools.cc).
  // Fault injection and capture act on every client's traffic, and capture
  // writes a file as the engine's user: engine-wide.
  at(CtlOp::kSetFault) = engine_wide(method("set_fault", set_fault, exact<SetFaultRequest>(), kNoFds));
  at(CtlOp::kCapture) = engine_wide(method("capture", capture, exact<CaptureRequest>(), kNoFds));
  at(CtlOp::kStatus) = method("status", status, up_to<ReportRequest>(), kNoFds);
  at(CtlOp::kStats) = method("stats", stats, up_to<ReportRequest>(), kNoFds);
  at(CtlOp::kReport) = method("report", report, exact<ReportRequest>(), kNoFds);
  return t;
}

constexpr Table kMethods = make_table();

// GCC with -fsanitize=address does not fold a function's address compared
// with null in a constant expression, so a sanitizer build checks the names
// only; Methods.EveryOperationHasOneAndUnknownOnesNone checks the handlers at
// run time in every build.
constexpr bool every_op_has_a_method() {
  for (size_t op = 1; op < kMethods.size(); ++op) {
    if (!kMethods[op].name) return false;
#ifndef __SANITIZE_ADDRESS__
    if (!kMethods[op].handler) return false;
#endif
  }
  return !kMethods[0].name;
}
static_assert(every_op_has_a_method(), "a CtlOp without a method table entry");

constexpr bool sizes_fit() {
  for (const Method& m : kMethods) {
    if (m.req_size + sizeof(abi::CtlRequestHeader) > abi::kMaxCtlMsg) return false;
    if (m.max_fds > abi::kMaxCtlFds || m.min_fds > m.max_fds) return false;
    for (size_t i = 0; i < m.num_handles; ++i)
      if (m.handles[i].offset + sizeof(uint64_t) > m.req_size) return false;
  }
  return true;
}
static_assert(sizes_fit(), "a request larger than a control message, or a handle outside it");

}  // namespace

const Method* find_method(uint32_t op) {
  if (op >= kMethods.size() || !kMethods[op].name) return nullptr;
  return &kMethods[op];
}

}  // namespace uroce::emulator
