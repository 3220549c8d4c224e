// The libibverbs 1.0 ABI (2006) and the pre-rdma-core driver registration
// call, kept only so that our dynamic symbol table matches rdma-core's.
//
// rdma-core still implements IBVERBS_1.0 by wrapping every object in a
// *_1_0 shadow struct. Nothing built in the last fifteen years binds to
// these versions, and the engine has no use for a second object model, so
// each entry point here fails cleanly instead:
//   pointer returns -> NULL, errno = EOPNOTSUPP
//   int returns     -> the error convention of the current verb
//                      (EOPNOTSUPP itself, or -1 with errno set)
//   void returns    -> nothing
//
// Each function is exported only as the hidden (non-default) version
// name@IBVERBS_1.0 via the symver attribute; its own __name_1_0 symbol is
// hidden by "local: *" in libibverbs.map. Argument types are opaque: the 1.0
// structs differ from today's, and the bodies never look at them.

#include <cerrno>
#include <cstddef>
#include <cstdint>

#define UROCE_COMPAT_SYMVER(public_name, version) \
  extern "C" __attribute__((visibility("default"), used, symver(#public_name "@" version)))

namespace {

void* fail_ptr() {
  errno = EOPNOTSUPP;
  return nullptr;
}

// For verbs that return an errno value (query_device, dealloc_pd, ...).
int fail_errno() {
  errno = EOPNOTSUPP;
  return EOPNOTSUPP;
}

// For verbs that return -1 and set errno (get_async_event, query_gid, ...).
int fail_minus_one() {
  errno = EOPNOTSUPP;
  return -1;
}

}  // namespace

// ---------------------------------------------------------------------------
// Devices and contexts
// ---------------------------------------------------------------------------

UROCE_COMPAT_SYMVER(ibv_get_device_list, "IBVERBS_1.0")
void** __ibv_get_device_list_1_0(int* num_devices) {
  if (num_devices) *num_devices = 0;
  return static_cast<void**>(fail_ptr());
}

UROCE_COMPAT_SYMVER(ibv_free_device_list, "IBVERBS_1.0")
void __ibv_free_device_list_1_0(void** list) {}

UROCE_COMPAT_SYMVER(ibv_get_device_name, "IBVERBS_1.0")
const char* __ibv_get_device_name_1_0(void* device) { return static_cast<const char*>(fail_ptr()); }

UROCE_COMPAT_SYMVER(ibv_get_device_guid, "IBVERBS_1.0")
uint64_t __ibv_get_device_guid_1_0(void* device) {
  errno = EOPNOTSUPP;
  return 0;
}

UROCE_COMPAT_SYMVER(ibv_open_device, "IBVERBS_1.0")
void* __ibv_open_device_1_0(void* device) { return fail_ptr(); }

UROCE_COMPAT_SYMVER(ibv_close_device, "IBVERBS_1.0")
int __ibv_close_device_1_0(void* context) { return fail_minus_one(); }

UROCE_COMPAT_SYMVER(ibv_get_async_event, "IBVERBS_1.0")
int __ibv_get_async_event_1_0(void* context, void* event) { return fail_minus_one(); }

UROCE_COMPAT_SYMVER(ibv_ack_async_event, "IBVERBS_1.0")
void __ibv_ack_async_event_1_0(void* event) {}

UROCE_COMPAT_SYMVER(ibv_query_device, "IBVERBS_1.0")
int __ibv_query_device_1_0(void* context, void* device_attr) { return fail_errno(); }

UROCE_COMPAT_SYMVER(ibv_query_port, "IBVERBS_1.0")
int __ibv_query_port_1_0(void* context, uint8_t port_num, void* port_attr) { return fail_errno(); }

UROCE_COMPAT_SYMVER(ibv_query_gid, "IBVERBS_1.0")
int __ibv_query_gid_1_0(void* context, uint8_t port_num, int index, void* gid) {
  return fail_minus_one();
}

UROCE_COMPAT_SYMVER(ibv_query_pkey, "IBVERBS_1.0")
int __ibv_query_pkey_1_0(void* context, uint8_t port_num, int index, uint16_t* pkey) {
  return fail_minus_one();
}

// ---------------------------------------------------------------------------
// PD and MR
// ---------------------------------------------------------------------------

UROCE_COMPAT_SYMVER(ibv_alloc_pd, "IBVERBS_1.0")
void* __ibv_alloc_pd_1_0(void* context) { return fail_ptr(); }

UROCE_COMPAT_SYMVER(ibv_dealloc_pd, "IBVERBS_1.0")
int __ibv_dealloc_pd_1_0(void* pd) { return fail_errno(); }

UROCE_COMPAT_SYMVER(ibv_reg_mr, "IBVERBS_1.0")
void* __ibv_reg_mr_1_0(void* pd, void* addr, size_t length, int access) { return fail_ptr(); }

UROCE_COMPAT_SYMVER(ibv_dereg_mr, "IBVERBS_1.0")
int __ibv_dereg_mr_1_0(void* mr) { return fail_errno(); }

// ---------------------------------------------------------------------------
// CQ
// ---------------------------------------------------------------------------

UROCE_COMPAT_SYMVER(ibv_create_cq, "IBVERBS_1.0")
void* __ibv_create_cq_1_0(void* context, int cqe, void* cq_context, void* channel,
                          int comp_vector) {
  return fail_ptr();
}

UROCE_COMPAT_SYMVER(ibv_resize_cq, "IBVERBS_1.0")
int __ibv_resize_cq_1_0(void* cq, int cqe) { return fail_errno(); }

UROCE_COMPAT_SYMVER(ibv_destroy_cq, "IBVERBS_1.0")
int __ibv_destroy_cq_1_0(void* cq) { return fail_errno(); }

UROCE_COMPAT_SYMVER(ibv_get_cq_event, "IBVERBS_1.0")
int __ibv_get_cq_event_1_0(void* channel, void** cq, void** cq_context) { return fail_minus_one(); }

UROCE_COMPAT_SYMVER(ibv_ack_cq_events, "IBVERBS_1.0")
void __ibv_ack_cq_events_1_0(void* cq, unsigned int nevents) {}

// ---------------------------------------------------------------------------
// SRQ
// ---------------------------------------------------------------------------

UROCE_COMPAT_SYMVER(ibv_create_srq, "IBVERBS_1.0")
void* __ibv_create_srq_1_0(void* pd, void* srq_init_attr) { return fail_ptr(); }

UROCE_COMPAT_SYMVER(ibv_modify_srq, "IBVERBS_1.0")
int __ibv_modify_srq_1_0(void* srq, void* srq_attr, int srq_attr_mask) { return fail_errno(); }

UROCE_COMPAT_SYMVER(ibv_query_srq, "IBVERBS_1.0")
int __ibv_query_srq_1_0(void* srq, void* srq_attr) { return fail_errno(); }

UROCE_COMPAT_SYMVER(ibv_destroy_srq, "IBVERBS_1.0")
int __ibv_destroy_srq_1_0(void* srq) { return fail_errno(); }

// ---------------------------------------------------------------------------
// QP
// ---------------------------------------------------------------------------

UROCE_COMPAT_SYMVER(ibv_create_qp, "IBVERBS_1.0")
void* __ibv_create_qp_1_0(void* pd, void* qp_init_attr) { return fail_ptr(); }

UROCE_COMPAT_SYMVER(ibv_query_qp, "IBVERBS_1.0")
int __ibv_query_qp_1_0(void* qp, void* attr, int attr_mask, void* init_attr) {
  return fail_errno();
}

UROCE_COMPAT_SYMVER(ibv_modify_qp, "IBVERBS_1.0")
int __ibv_modify_qp_1_0(void* qp, void* attr, int attr_mask) { return fail_errno(); }

UROCE_COMPAT_SYMVER(ibv_destroy_qp, "IBVERBS_1.0")
int __ibv_destroy_qp_1_0(void* qp) { return fail_errno(); }

// ---------------------------------------------------------------------------
// AH and multicast
// ---------------------------------------------------------------------------

UROCE_COMPAT_SYMVER(ibv_create_ah, "IBVERBS_1.0")
void* __ibv_create_ah_1_0(void* pd, void* attr) { return fail_ptr(); }

UROCE_COMPAT_SYMVER(ibv_destroy_ah, "IBVERBS_1.0")
int __ibv_destroy_ah_1_0(void* ah) { return fail_errno(); }

UROCE_COMPAT_SYMVER(ibv_attach_mcast, "IBVERBS_1.0")
int __ibv_attach_mcast_1_0(void* qp, void* gid, uint16_t lid) { return fail_errno(); }

UROCE_COMPAT_SYMVER(ibv_detach_mcast, "IBVERBS_1.0")
int __ibv_detach_mcast_1_0(void* qp, void* gid, uint16_t lid) { return fail_errno(); }

// ---------------------------------------------------------------------------
// Driver registration from libibverbs 1.1 (before rdma-core)
// ---------------------------------------------------------------------------

// Pre-rdma-core drivers called this from their constructors. rdma-core only
// warns that such a driver is too old; ours ignores the call silently.
UROCE_COMPAT_SYMVER(ibv_register_driver, "IBVERBS_1.1")
void __ibv_register_driver_1_1(const char* name, void* init_func) {}
