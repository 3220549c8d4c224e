// The IBVERBS_PRIVATE_34 interface: what rdma-core's libibverbs offers to
// its kernel-backed providers (libmlx5, libefa, ...) through driver.h.
//
// Debian's libmlx5.so.1 and libefa.so.1 are linked into perftest and
// librdmacm users, so they get loaded into processes that use our library
// and must find every symbol they import. Their load-time constructor calls
// verbs_register_driver_34(); after that they are never handed a device,
// because our ibv_get_device_list() only lists the uroce device. So:
//   - verbs_register_driver_34 accepts the registration and drops it;
//   - every ibv_cmd_* (a wrapper around a uverbs kernel command) returns
//     EOPNOTSUPP, rdma-core's errno-value convention for these calls;
//   - context helpers return NULL with errno = EOPNOTSUPP or do nothing.
//
// Prototypes follow rdma-core 44 libibverbs/driver.h and cmd_ioctl.h, which
// are not installed. Driver-private structs are declared incomplete and
// command/response buffers are void*: on x86-64 only the return type and
// the kind of each register-passed argument matter to the ABI.
//
// ibv_query_gid_type is in this version node too but belongs to the core,
// which implements it.

#include <infiniband/verbs.h>
#include <rdma/rdma_user_ioctl_cmds.h>

#include <cerrno>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define UROCE_EXPORT extern "C" __attribute__((visibility("default")))

// Driver-side objects of rdma-core's driver.h. Only pointers are passed.
struct verbs_xrcd;
struct verbs_srq;
struct verbs_qp;
struct verbs_cq;
struct verbs_mr;
struct verbs_dm;
struct verbs_flow_action;
struct verbs_counters;
struct verbs_context_ops;
struct verbs_device_ops;
struct verbs_sysfs_dev;
struct ibv_command_buffer;

// Implemented in util_verbs.cc.
extern "C" int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size);

namespace {

int cmd_not_supported() {
  errno = EOPNOTSUPP;
  return EOPNOTSUPP;
}

void* null_not_supported() {
  errno = EOPNOTSUPP;
  return nullptr;
}

// The leading members of rdma-core 44's struct verbs_sysfs_dev, up to the
// one ibv_read_ibdev_sysfs_file reads. Offset checked against the
// disassembly of Debian's libibverbs.so.1 (lea 0xb0(%rdx)).
struct SysfsDevPrefix {
  void* entry_next;  // struct list_node entry
  void* entry_prev;
  void* provider_data;
  const void* match;
  unsigned int flags;
  char sysfs_name[IBV_SYSFS_NAME_MAX];
  dev_t sysfs_cdev;
  char ibdev_name[IBV_SYSFS_NAME_MAX];
  char ibdev_path[IBV_SYSFS_PATH_MAX];
};
static_assert(offsetof(SysfsDevPrefix, ibdev_path) == 0xb0);

// The head of rdma-core's struct ibv_command_buffer (cmd_ioctl.h): a chain
// of attribute arrays, each ending in a uverbs ioctl header whose attrs[]
// are filled up to next_attr. The header is kept as bytes because a struct
// with a flexible array member cannot be a member in ISO C++.
struct CommandBufferHead {
  CommandBufferHead* next;
  ib_uverbs_attr* next_attr;
  ib_uverbs_attr* last_attr;
  uint8_t uhw_in_idx;
  uint8_t uhw_out_idx;
  uint8_t uhw_in_headroom_dwords;
  uint8_t uhw_out_headroom_dwords;
  uint8_t flag_bits;  // buffer_error, fallback_require_ex, fallback_ioctl_only
  alignas(ib_uverbs_ioctl_hdr) unsigned char hdr[sizeof(ib_uverbs_ioctl_hdr)];

  const ib_uverbs_attr* attrs() const {
    return reinterpret_cast<const ib_uverbs_attr*>(hdr + sizeof(hdr));
  }
};
static_assert(offsetof(CommandBufferHead, hdr) + sizeof(ib_uverbs_ioctl_hdr) == 0x38);

}  // namespace

// Every ibv_cmd_* has the same body; the macro keeps the prototypes readable.
#define UROCE_CMD_STUB(name, ...) \
  UROCE_EXPORT int name(__VA_ARGS__) { return cmd_not_supported(); }

// ---------------------------------------------------------------------------
// Provider registration and context set-up
// ---------------------------------------------------------------------------

// Read by providers to decide whether destroy may succeed after the device
// is gone. Braced linkage so that the initializer does not trip -Wextra.
extern "C" {
__attribute__((visibility("default"))) bool verbs_allow_disassociate_destroy = false;
}

// Called by every rdma-core provider's constructor at dlopen time.
UROCE_EXPORT void verbs_register_driver_34(const verbs_device_ops* ops) {}

UROCE_EXPORT void* _verbs_init_and_alloc_context(ibv_device* device, int cmd_fd, size_t alloc_size,
                                                 verbs_context* context_offset,
                                                 uint32_t driver_id) {
  return null_not_supported();
}

UROCE_EXPORT ibv_context* verbs_open_device(ibv_device* device, void* private_data) {
  return static_cast<ibv_context*>(null_not_supported());
}

UROCE_EXPORT void verbs_uninit_context(verbs_context* context) {}

UROCE_EXPORT void verbs_set_ops(verbs_context* vctx, const verbs_context_ops* ops) {}

UROCE_EXPORT void verbs_init_cq(ibv_cq* cq, ibv_context* context, ibv_comp_channel* channel,
                                void* cq_context) {}

UROCE_EXPORT void __verbs_log(verbs_context* ctx, uint32_t level, const char* fmt, ...) {}

// ---------------------------------------------------------------------------
// ioctl command buffers
// ---------------------------------------------------------------------------

// Sizes a command buffer on the caller's stack: num_attrs plus the
// attributes already placed in every linked buffer.
UROCE_EXPORT unsigned int __ioctl_final_num_attrs(unsigned int num_attrs,
                                                  ibv_command_buffer* link) {
  for (auto* buf = reinterpret_cast<CommandBufferHead*>(link); buf; buf = buf->next)
    num_attrs += static_cast<unsigned int>(buf->next_attr - buf->attrs());
  return num_attrs;
}

UROCE_EXPORT int execute_ioctl(ibv_context* context, ibv_command_buffer* cmd) {
  return cmd_not_supported();
}

// ---------------------------------------------------------------------------
// sysfs
// ---------------------------------------------------------------------------

// Reads <sysfs_dev->ibdev_path>/<formatted name>, e.g.
// /sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types/0. Same result
// convention as ibv_read_sysfs_file.
UROCE_EXPORT int ibv_read_ibdev_sysfs_file(char* buf, size_t size, verbs_sysfs_dev* sysfs_dev,
                                           const char* fnfmt, ...)
    __attribute__((format(printf, 4, 5)));

UROCE_EXPORT int ibv_read_ibdev_sysfs_file(char* buf, size_t size, verbs_sysfs_dev* sysfs_dev,
                                           const char* fnfmt, ...) {
  if (!sysfs_dev) {
    errno = EINVAL;
    return -1;
  }
  char* file = nullptr;
  va_list ap;
  va_start(ap, fnfmt);
  int len = vasprintf(&file, fnfmt, ap);
  va_end(ap);
  if (len < 0) return -1;

  const auto* dev = reinterpret_cast<const SysfsDevPrefix*>(sysfs_dev);
  char dir[sizeof(dev->ibdev_path) + 1];
  size_t dir_len = strnlen(dev->ibdev_path, sizeof(dev->ibdev_path));
  memcpy(dir, dev->ibdev_path, dir_len);
  dir[dir_len] = '\0';
  int ret = ibv_read_sysfs_file(dir, file, buf, size);
  int saved_errno = errno;
  free(file);
  errno = saved_errno;
  return ret;
}

// ---------------------------------------------------------------------------
// Device and port
// ---------------------------------------------------------------------------

UROCE_CMD_STUB(ibv_cmd_get_context, verbs_context* context, void* cmd, size_t cmd_size, void* resp,
               size_t resp_size)
UROCE_CMD_STUB(ibv_cmd_query_context, ibv_context* ctx, ibv_command_buffer* driver)
UROCE_CMD_STUB(ibv_cmd_query_device_any, ibv_context* context,
               const ibv_query_device_ex_input* input, ibv_device_attr_ex* attr, size_t attr_size,
               void* resp, size_t* resp_size)
UROCE_CMD_STUB(ibv_cmd_query_port, ibv_context* context, uint8_t port_num, ibv_port_attr* port_attr,
               void* cmd, size_t cmd_size)

// ---------------------------------------------------------------------------
// PD, XRCD, MR, MW, DM
// ---------------------------------------------------------------------------

UROCE_CMD_STUB(ibv_cmd_alloc_pd, ibv_context* context, ibv_pd* pd, void* cmd, size_t cmd_size,
               void* resp, size_t resp_size)
UROCE_CMD_STUB(ibv_cmd_dealloc_pd, ibv_pd* pd)
UROCE_CMD_STUB(ibv_cmd_open_xrcd, ibv_context* context, verbs_xrcd* xrcd, int vxrcd_size,
               ibv_xrcd_init_attr* attr, void* cmd, size_t cmd_size, void* resp, size_t resp_size)
UROCE_CMD_STUB(ibv_cmd_close_xrcd, verbs_xrcd* xrcd)
UROCE_CMD_STUB(ibv_cmd_reg_mr, ibv_pd* pd, void* addr, size_t length, uint64_t hca_va, int access,
               verbs_mr* vmr, void* cmd, size_t cmd_size, void* resp, size_t resp_size)
UROCE_CMD_STUB(ibv_cmd_rereg_mr, verbs_mr* vmr, uint32_t flags, void* addr, size_t length,
               uint64_t hca_va, int access, ibv_pd* pd, void* cmd, size_t cmd_sz, void* resp,
               size_t resp_sz)
UROCE_CMD_STUB(ibv_cmd_dereg_mr, verbs_mr* vmr)
UROCE_CMD_STUB(ibv_cmd_query_mr, ibv_pd* pd, verbs_mr* vmr, uint32_t mr_handle)
UROCE_CMD_STUB(ibv_cmd_advise_mr, ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags,
               ibv_sge* sg_list, uint32_t num_sge)
UROCE_CMD_STUB(ibv_cmd_reg_dmabuf_mr, ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova,
               int fd, int access, verbs_mr* vmr)
UROCE_CMD_STUB(ibv_cmd_alloc_mw, ibv_pd* pd, ibv_mw_type type, ibv_mw* mw, void* cmd,
               size_t cmd_size, void* resp, size_t resp_size)
UROCE_CMD_STUB(ibv_cmd_dealloc_mw, ibv_mw* mw)
UROCE_CMD_STUB(ibv_cmd_alloc_dm, ibv_context* ctx, const ibv_alloc_dm_attr* dm_attr, verbs_dm* dm,
               ibv_command_buffer* link)
UROCE_CMD_STUB(ibv_cmd_free_dm, verbs_dm* dm)
UROCE_CMD_STUB(ibv_cmd_reg_dm_mr, ibv_pd* pd, verbs_dm* dm, uint64_t offset, size_t length,
               unsigned int access, verbs_mr* vmr, ibv_command_buffer* link)

// ---------------------------------------------------------------------------
// CQ
// ---------------------------------------------------------------------------

UROCE_CMD_STUB(ibv_cmd_create_cq, ibv_context* context, int cqe, ibv_comp_channel* channel,
               int comp_vector, ibv_cq* cq, void* cmd, size_t cmd_size, void* resp,
               size_t resp_size)
UROCE_CMD_STUB(ibv_cmd_create_cq_ex, ibv_context* context, const ibv_cq_init_attr_ex* cq_attr,
               verbs_cq* cq, void* cmd, size_t cmd_size, void* resp, size_t resp_size,
               uint32_t cmd_flags)
UROCE_CMD_STUB(ibv_cmd_poll_cq, ibv_cq* cq, int ne, ibv_wc* wc)
UROCE_CMD_STUB(ibv_cmd_req_notify_cq, ibv_cq* cq, int solicited_only)
UROCE_CMD_STUB(ibv_cmd_resize_cq, ibv_cq* cq, int cqe, void* cmd, size_t cmd_size, void* resp,
               size_t resp_size)
UROCE_CMD_STUB(ibv_cmd_destroy_cq, ibv_cq* cq)
UROCE_CMD_STUB(ibv_cmd_modify_cq, ibv_cq* cq, ibv_modify_cq_attr* attr, void* cmd, size_t cmd_size)

// ---------------------------------------------------------------------------
// SRQ
// ---------------------------------------------------------------------------

UROCE_CMD_STUB(ibv_cmd_create_srq, ibv_pd* pd, ibv_srq* srq, ibv_srq_init_attr* attr, void* cmd,
               size_t cmd_size, void* resp, size_t resp_size)
UROCE_CMD_STUB(ibv_cmd_create_srq_ex, ibv_context* context, verbs_srq* srq,
               ibv_srq_init_attr_ex* attr_ex, void* cmd, size_t cmd_size, void* resp,
               size_t resp_size)
UROCE_CMD_STUB(ibv_cmd_modify_srq, ibv_srq* srq, ibv_srq_attr* srq_attr, int srq_attr_mask,
               void* cmd, size_t cmd_size)
UROCE_CMD_STUB(ibv_cmd_query_srq, ibv_srq* srq, ibv_srq_attr* srq_attr, void* cmd, size_t cmd_size)
UROCE_CMD_STUB(ibv_cmd_destroy_srq, ibv_srq* srq)
UROCE_CMD_STUB(ibv_cmd_post_srq_recv, ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr)

// ---------------------------------------------------------------------------
// QP
// ---------------------------------------------------------------------------

UROCE_CMD_STUB(ibv_cmd_create_qp, ibv_pd* pd, ibv_qp* qp, ibv_qp_init_attr* attr, void* cmd,
               size_t cmd_size, void* resp, size_t resp_size)
UROCE_CMD_STUB(ibv_cmd_create_qp_ex, ibv_context* context, verbs_qp* qp,
               ibv_qp_init_attr_ex* attr_ex, void* cmd, size_t cmd_size, void* resp,
               size_t resp_size)
UROCE_CMD_STUB(ibv_cmd_create_qp_ex2, ibv_context* context, verbs_qp* qp,
               ibv_qp_init_attr_ex* qp_attr, void* cmd, size_t cmd_size, void* resp,
               size_t resp_size)
UROCE_CMD_STUB(ibv_cmd_open_qp, ibv_context* context, verbs_qp* qp, int vqp_sz,
               ibv_qp_open_attr* attr, void* cmd, size_t cmd_size, void* resp, size_t resp_size)
UROCE_CMD_STUB(ibv_cmd_query_qp, ibv_qp* qp, ibv_qp_attr* qp_attr, int attr_mask,
               ibv_qp_init_attr* qp_init_attr, void* cmd, size_t cmd_size)
UROCE_CMD_STUB(ibv_cmd_modify_qp, ibv_qp* qp, ibv_qp_attr* attr, int attr_mask, void* cmd,
               size_t cmd_size)
UROCE_CMD_STUB(ibv_cmd_modify_qp_ex, ibv_qp* qp, ibv_qp_attr* attr, int attr_mask, void* cmd,
               size_t cmd_size, void* resp, size_t resp_size)
UROCE_CMD_STUB(ibv_cmd_destroy_qp, ibv_qp* qp)
UROCE_CMD_STUB(ibv_cmd_post_send, ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad_wr)
UROCE_CMD_STUB(ibv_cmd_post_recv, ibv_qp* ibqp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr)

// ---------------------------------------------------------------------------
// AH and multicast
// ---------------------------------------------------------------------------

UROCE_CMD_STUB(ibv_cmd_create_ah, ibv_pd* pd, ibv_ah* ah, ibv_ah_attr* attr, void* resp,
               size_t resp_size)
UROCE_CMD_STUB(ibv_cmd_destroy_ah, ibv_ah* ah)
UROCE_CMD_STUB(ibv_cmd_attach_mcast, ibv_qp* qp, const ibv_gid* gid, uint16_t lid)
UROCE_CMD_STUB(ibv_cmd_detach_mcast, ibv_qp* qp, const ibv_gid* gid, uint16_t lid)

// ---------------------------------------------------------------------------
// WQ, RSS indirection tables, flows, counters
// ---------------------------------------------------------------------------

UROCE_CMD_STUB(ibv_cmd_create_wq, ibv_context* context, ibv_wq_init_attr* wq_init_attr, ibv_wq* wq,
               void* cmd, size_t cmd_size, void* resp, size_t resp_size)
UROCE_CMD_STUB(ibv_cmd_modify_wq, ibv_wq* wq, ibv_wq_attr* attr, void* cmd, size_t cmd_size)
UROCE_CMD_STUB(ibv_cmd_destroy_wq, ibv_wq* wq)
UROCE_CMD_STUB(ibv_cmd_create_rwq_ind_table, ibv_context* context,
               ibv_rwq_ind_table_init_attr* init_attr, ibv_rwq_ind_table* rwq_ind_table, void* resp,
               size_t resp_size)
UROCE_CMD_STUB(ibv_cmd_destroy_rwq_ind_table, ibv_rwq_ind_table* rwq_ind_table)
UROCE_CMD_STUB(ibv_cmd_create_flow, ibv_qp* qp, ibv_flow* flow_id, ibv_flow_attr* flow_attr,
               void* ucmd, size_t ucmd_size)
UROCE_CMD_STUB(ibv_cmd_destroy_flow, ibv_flow* flow_id)
UROCE_CMD_STUB(ibv_cmd_create_flow_action_esp, ibv_context* ctx, ibv_flow_action_esp_attr* attr,
               verbs_flow_action* flow_action, ibv_command_buffer* driver)
UROCE_CMD_STUB(ibv_cmd_modify_flow_action_esp, verbs_flow_action* flow_action,
               ibv_flow_action_esp_attr* attr, ibv_command_buffer* driver)
UROCE_CMD_STUB(ibv_cmd_destroy_flow_action, verbs_flow_action* action)
UROCE_CMD_STUB(ibv_cmd_create_counters, ibv_context* context, ibv_counters_init_attr* init_attr,
               verbs_counters* vcounters, ibv_command_buffer* link)
UROCE_CMD_STUB(ibv_cmd_destroy_counters, verbs_counters* vcounters)
UROCE_CMD_STUB(ibv_cmd_read_counters, verbs_counters* vcounters, uint64_t* counters_value,
               uint32_t ncounters, uint32_t flags, ibv_command_buffer* link)
