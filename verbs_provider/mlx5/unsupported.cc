// Every libmlx5 entry point that an mlx5-mode uroce device refuses: all of
// Debian's libmlx5.so.1 (rdma-core 44) except those library.cc, cq.cc, mkey.cc
// and uar.cc define.
//
// Each fails the way rdma-core 44's libmlx5 fails on a device or kernel
// without the feature (providers/mlx5/verbs.c, mlx5.c: "if (!dvops ||
// !dvops->x)"), so programs probing for a feature take their fallback:
//   pointer returns        -> NULL, errno = EOPNOTSUPP
//   int returns            -> EOPNOTSUPP (positive, libmlx5's convention),
//                             errno = EOPNOTSUPP too: UCX reads errno after
//                             mlx5dv_devx_general_cmd
//   releasing an object    -> EINVAL (errno EINVAL), or nothing for void
//   (destroy/free/dealloc)    calls: nothing here ever creates one, so the
//                             argument is NULL or not ours
// and a few special cases, each marked where it is defined.
//
// Each macro defines one exported function from its return type, name and
// parameter list, written as in <infiniband/mlx5dv.h>. The header declares
// them all, so the compiler rejects any prototype that differs.

#include <infiniband/mlx5dv.h>
#include <sys/types.h>

#include <cerrno>
#include <cstdio>

#include "verbs_provider/mlx5/export.h"

#define UROCE_REFUSE_PTR(ret, name, params) \
  UROCE_MLX5_EXPORT ret name params {       \
    errno = EOPNOTSUPP;                     \
    return nullptr;                         \
  }

#define UROCE_REFUSE_INT(name, params) \
  UROCE_MLX5_EXPORT int name params {  \
    errno = EOPNOTSUPP;                \
    return EOPNOTSUPP;                 \
  }

#define UROCE_NOT_OURS_INT(name, params) \
  UROCE_MLX5_EXPORT int name params {    \
    errno = EINVAL;                      \
    return EINVAL;                       \
  }

#define UROCE_NOT_OURS_VOID(name, params) \
  UROCE_MLX5_EXPORT void name params {}

// ---------------------------------------------------------------------------
// DevX: raw PRM commands and the objects, UMEMs, UARs, EQs and event
// channels made with them. uroce's device has no PRM command interface:
// there is no firmware behind it to interpret the command mailboxes.
// mlx5dv_open_device refuses MLX5DV_CONTEXT_FLAGS_DEVX for the same reason.
// ---------------------------------------------------------------------------

UROCE_REFUSE_INT(mlx5dv_devx_general_cmd, (ibv_context* context, const void* in, size_t inlen, void* out,
                                           size_t outlen))
UROCE_REFUSE_INT(mlx5dv_devx_query_eqn, (ibv_context* context, uint32_t vector, uint32_t* eqn))

UROCE_REFUSE_PTR(mlx5dv_devx_obj*, mlx5dv_devx_obj_create, (ibv_context* context, const void* in, size_t inlen,
                                                            void* out, size_t outlen))
UROCE_REFUSE_INT(mlx5dv_devx_obj_query, (mlx5dv_devx_obj* obj, const void* in, size_t inlen, void* out,
                                         size_t outlen))
UROCE_REFUSE_INT(mlx5dv_devx_obj_modify, (mlx5dv_devx_obj* obj, const void* in, size_t inlen, void* out,
                                          size_t outlen))
UROCE_REFUSE_INT(mlx5dv_devx_obj_query_async, (mlx5dv_devx_obj* obj, const void* in, size_t inlen, size_t outlen,
                                               uint64_t wr_id, mlx5dv_devx_cmd_comp* cmd_comp))
UROCE_NOT_OURS_INT(mlx5dv_devx_obj_destroy, (mlx5dv_devx_obj* obj))

// PRM commands on objects made through the verbs (uroce's own QPs, CQs...).
UROCE_REFUSE_INT(mlx5dv_devx_qp_query, (ibv_qp* qp, const void* in, size_t inlen, void* out, size_t outlen))
UROCE_REFUSE_INT(mlx5dv_devx_qp_modify, (ibv_qp* qp, const void* in, size_t inlen, void* out, size_t outlen))
UROCE_REFUSE_INT(mlx5dv_devx_cq_query, (ibv_cq* cq, const void* in, size_t inlen, void* out, size_t outlen))
UROCE_REFUSE_INT(mlx5dv_devx_cq_modify, (ibv_cq* cq, const void* in, size_t inlen, void* out, size_t outlen))
UROCE_REFUSE_INT(mlx5dv_devx_srq_query, (ibv_srq* srq, const void* in, size_t inlen, void* out, size_t outlen))
UROCE_REFUSE_INT(mlx5dv_devx_srq_modify, (ibv_srq* srq, const void* in, size_t inlen, void* out, size_t outlen))
UROCE_REFUSE_INT(mlx5dv_devx_wq_query, (ibv_wq* wq, const void* in, size_t inlen, void* out, size_t outlen))
UROCE_REFUSE_INT(mlx5dv_devx_wq_modify, (ibv_wq* wq, const void* in, size_t inlen, void* out, size_t outlen))
UROCE_REFUSE_INT(mlx5dv_devx_ind_tbl_query, (ibv_rwq_ind_table* ind_tbl, const void* in, size_t inlen,
                                             void* out, size_t outlen))
UROCE_REFUSE_INT(mlx5dv_devx_ind_tbl_modify, (ibv_rwq_ind_table* ind_tbl, const void* in, size_t inlen,
                                              void* out, size_t outlen))

UROCE_REFUSE_PTR(mlx5dv_devx_umem*, mlx5dv_devx_umem_reg, (ibv_context* ctx, void* addr, size_t size,
                                                          uint32_t access))
UROCE_REFUSE_PTR(mlx5dv_devx_umem*, mlx5dv_devx_umem_reg_ex, (ibv_context* ctx, mlx5dv_devx_umem_in* umem_in))
UROCE_NOT_OURS_INT(mlx5dv_devx_umem_dereg, (mlx5dv_devx_umem* umem))

// mlx5dv_devx_alloc_uar and _free_uar: uar.cc (a ConnectX gives UAR pages without DevX).

UROCE_REFUSE_PTR(mlx5dv_devx_msi_vector*, mlx5dv_devx_alloc_msi_vector, (ibv_context* ibctx))
UROCE_NOT_OURS_INT(mlx5dv_devx_free_msi_vector, (mlx5dv_devx_msi_vector* msi))
UROCE_REFUSE_PTR(mlx5dv_devx_eq*, mlx5dv_devx_create_eq, (ibv_context* ibctx, const void* in, size_t inlen,
                                                         void* out, size_t outlen))
UROCE_NOT_OURS_INT(mlx5dv_devx_destroy_eq, (mlx5dv_devx_eq* eq))

UROCE_REFUSE_PTR(mlx5dv_devx_cmd_comp*, mlx5dv_devx_create_cmd_comp, (ibv_context* context))
UROCE_NOT_OURS_VOID(mlx5dv_devx_destroy_cmd_comp, (mlx5dv_devx_cmd_comp* cmd_comp))
UROCE_REFUSE_INT(mlx5dv_devx_get_async_cmd_comp, (mlx5dv_devx_cmd_comp* cmd_comp,
                                                  mlx5dv_devx_async_cmd_hdr* cmd_resp, size_t cmd_resp_len))

UROCE_REFUSE_PTR(mlx5dv_devx_event_channel*, mlx5dv_devx_create_event_channel,
                 (ibv_context* context, mlx5dv_devx_create_event_channel_flags flags))
UROCE_NOT_OURS_VOID(mlx5dv_devx_destroy_event_channel, (mlx5dv_devx_event_channel* event_channel))
UROCE_REFUSE_INT(mlx5dv_devx_subscribe_devx_event, (mlx5dv_devx_event_channel* event_channel,
                                                    mlx5dv_devx_obj* obj, uint16_t events_sz,
                                                    uint16_t events_num[], uint64_t cookie))
UROCE_REFUSE_INT(mlx5dv_devx_subscribe_devx_event_fd, (mlx5dv_devx_event_channel* event_channel, int fd,
                                                       mlx5dv_devx_obj* obj, uint16_t event_num))

// Special: a read(2)-like call, -1 with errno set (verbs.c
// _mlx5dv_devx_get_event, man page mlx5dv_devx_get_event).
UROCE_MLX5_EXPORT ssize_t mlx5dv_devx_get_event(mlx5dv_devx_event_channel* event_channel,
                                                mlx5dv_devx_async_event_hdr* event_data, size_t event_resp_len) {
  errno = EOPNOTSUPP;
  return -1;
}

// ---------------------------------------------------------------------------
// Software steering (mlx5dv_dr_*): rules written straight into the NIC's
// steering tables in ICM through DevX. uroce's device has no steering ICM
// and no DevX, so no domain is ever created and every table, matcher, rule
// or action built on one is refused, domain-less actions included (drop,
// tag, pop_vlan, default_miss: rdma-core allocates those without touching
// the device, but they are only good for a rule on a domain).
// ---------------------------------------------------------------------------

UROCE_REFUSE_PTR(mlx5dv_dr_domain*, mlx5dv_dr_domain_create, (ibv_context* ctx, mlx5dv_dr_domain_type type))
UROCE_REFUSE_INT(mlx5dv_dr_domain_sync, (mlx5dv_dr_domain* domain, uint32_t flags))
UROCE_NOT_OURS_VOID(mlx5dv_dr_domain_set_reclaim_device_memory, (mlx5dv_dr_domain* dmn, bool enable))
UROCE_NOT_OURS_VOID(mlx5dv_dr_domain_allow_duplicate_rules, (mlx5dv_dr_domain* domain, bool allow))
UROCE_NOT_OURS_INT(mlx5dv_dr_domain_destroy, (mlx5dv_dr_domain* domain))

UROCE_REFUSE_PTR(mlx5dv_dr_table*, mlx5dv_dr_table_create, (mlx5dv_dr_domain* domain, uint32_t level))
UROCE_NOT_OURS_INT(mlx5dv_dr_table_destroy, (mlx5dv_dr_table* table))

UROCE_REFUSE_PTR(mlx5dv_dr_matcher*, mlx5dv_dr_matcher_create, (mlx5dv_dr_table* table, uint16_t priority,
                                                                uint8_t match_criteria_enable,
                                                                mlx5dv_flow_match_parameters* mask))
UROCE_REFUSE_INT(mlx5dv_dr_matcher_set_layout, (mlx5dv_dr_matcher* matcher, mlx5dv_dr_matcher_layout* layout))
UROCE_NOT_OURS_INT(mlx5dv_dr_matcher_destroy, (mlx5dv_dr_matcher* matcher))

UROCE_REFUSE_PTR(mlx5dv_dr_rule*, mlx5dv_dr_rule_create, (mlx5dv_dr_matcher* matcher,
                                                          mlx5dv_flow_match_parameters* value, size_t num_actions,
                                                          mlx5dv_dr_action* actions[]))
UROCE_NOT_OURS_INT(mlx5dv_dr_rule_destroy, (mlx5dv_dr_rule* rule))

UROCE_REFUSE_PTR(mlx5dv_dr_action*, mlx5dv_dr_action_create_dest_ibv_qp, (ibv_qp* ibqp))
UROCE_REFUSE_PTR(mlx5dv_dr_action*, mlx5dv_dr_action_create_dest_table, (mlx5dv_dr_table* table))
UROCE_REFUSE_PTR(mlx5dv_dr_action*, mlx5dv_dr_action_create_dest_root_table, (mlx5dv_dr_table* table,
                                                                              uint16_t priority))
UROCE_REFUSE_PTR(mlx5dv_dr_action*, mlx5dv_dr_action_create_dest_vport, (mlx5dv_dr_domain* domain,
                                                                         uint32_t vport))
UROCE_REFUSE_PTR(mlx5dv_dr_action*, mlx5dv_dr_action_create_dest_ib_port, (mlx5dv_dr_domain* domain,
                                                                           uint32_t ib_port))
UROCE_REFUSE_PTR(mlx5dv_dr_action*, mlx5dv_dr_action_create_dest_devx_tir, (mlx5dv_devx_obj* devx_obj))
UROCE_REFUSE_PTR(mlx5dv_dr_action*, mlx5dv_dr_action_create_dest_array, (mlx5dv_dr_domain* domain,
                                                                         size_t num_dest,
                                                                         mlx5dv_dr_action_dest_attr* dests[]))
UROCE_REFUSE_PTR(mlx5dv_dr_action*, mlx5dv_dr_action_create_drop, (void))
UROCE_REFUSE_PTR(mlx5dv_dr_action*, mlx5dv_dr_action_create_default_miss, (void))
UROCE_REFUSE_PTR(mlx5dv_dr_action*, mlx5dv_dr_action_create_tag, (uint32_t tag_value))
UROCE_REFUSE_PTR(mlx5dv_dr_action*, mlx5dv_dr_action_create_flow_counter, (mlx5dv_devx_obj* devx_obj,
                                                                           uint32_t offset))
UROCE_REFUSE_PTR(mlx5dv_dr_action*, mlx5dv_dr_action_create_packet_reformat,
                 (mlx5dv_dr_domain* domain, uint32_t flags,
                  mlx5dv_flow_action_packet_reformat_type reformat_type, size_t data_sz, void* data))
UROCE_REFUSE_PTR(mlx5dv_dr_action*, mlx5dv_dr_action_create_modify_header, (mlx5dv_dr_domain* domain,
                                                                            uint32_t flags, size_t actions_sz,
                                                                            __be64 actions[]))
UROCE_REFUSE_PTR(mlx5dv_dr_action*, mlx5dv_dr_action_create_flow_meter, (mlx5dv_dr_flow_meter_attr* attr))
UROCE_REFUSE_INT(mlx5dv_dr_action_modify_flow_meter, (mlx5dv_dr_action* action, mlx5dv_dr_flow_meter_attr* attr,
                                                      __be64 modify_field_select))
UROCE_REFUSE_PTR(mlx5dv_dr_action*, mlx5dv_dr_action_create_flow_sampler, (mlx5dv_dr_flow_sampler_attr* attr))
UROCE_REFUSE_PTR(mlx5dv_dr_action*, mlx5dv_dr_action_create_pop_vlan, (void))
UROCE_REFUSE_PTR(mlx5dv_dr_action*, mlx5dv_dr_action_create_push_vlan, (mlx5dv_dr_domain* domain,
                                                                        __be32 vlan_hdr))
UROCE_REFUSE_PTR(mlx5dv_dr_action*, mlx5dv_dr_action_create_aso, (mlx5dv_dr_domain* domain,
                                                                  mlx5dv_devx_obj* devx_obj, uint32_t offset,
                                                                  uint32_t flags, uint8_t return_reg_c))
UROCE_REFUSE_INT(mlx5dv_dr_action_modify_aso, (mlx5dv_dr_action* action, uint32_t offset, uint32_t flags,
                                               uint8_t return_reg_c))
UROCE_NOT_OURS_INT(mlx5dv_dr_action_destroy, (mlx5dv_dr_action* action))

// dr_ste.c: EOPNOTSUPP with errno where the steering format has no ASO link.
UROCE_REFUSE_INT(mlx5dv_dr_aso_other_domain_link, (mlx5dv_devx_obj* devx_obj, mlx5dv_dr_domain* peer_dmn,
                                                   mlx5dv_dr_domain* dmn, uint32_t flags, uint8_t return_reg_c))
UROCE_NOT_OURS_INT(mlx5dv_dr_aso_other_domain_unlink, (mlx5dv_devx_obj* devx_obj, mlx5dv_dr_domain* dmn))

// Special: dr_dbg.c returns a negative errno, -EINVAL for a NULL object
// (the man page says the positive errno; the code is what programs see).
#define UROCE_DUMP_NOT_OURS(name, object_type)                            \
  UROCE_MLX5_EXPORT int name(FILE* fout, object_type* object) {           \
    errno = EINVAL;                                                       \
    return -EINVAL;                                                       \
  }
UROCE_DUMP_NOT_OURS(mlx5dv_dump_dr_domain, mlx5dv_dr_domain)
UROCE_DUMP_NOT_OURS(mlx5dv_dump_dr_table, mlx5dv_dr_table)
UROCE_DUMP_NOT_OURS(mlx5dv_dump_dr_matcher, mlx5dv_dr_matcher)
UROCE_DUMP_NOT_OURS(mlx5dv_dump_dr_rule, mlx5dv_dr_rule)
#undef UROCE_DUMP_NOT_OURS

// ---------------------------------------------------------------------------
// Flow steering through the kernel's mlx5 flow objects: matchers and
// actions take PRM-format match parameters (fte_match_param) and action
// lists, which uroce's device does not parse, and steering anchors are
// kernel flow tables it does not have. Plain ibv_create_flow is the verbs'.
// ---------------------------------------------------------------------------

UROCE_REFUSE_PTR(mlx5dv_flow_matcher*, mlx5dv_create_flow_matcher, (ibv_context* context,
                                                                    mlx5dv_flow_matcher_attr* matcher_attr))
UROCE_NOT_OURS_INT(mlx5dv_destroy_flow_matcher, (mlx5dv_flow_matcher* matcher))
UROCE_REFUSE_PTR(ibv_flow*, mlx5dv_create_flow, (mlx5dv_flow_matcher* matcher,
                                                 mlx5dv_flow_match_parameters* match_value, size_t num_actions,
                                                 mlx5dv_flow_action_attr actions_attr[]))
UROCE_REFUSE_PTR(ibv_flow_action*, mlx5dv_create_flow_action_esp, (ibv_context* ctx,
                                                                   ibv_flow_action_esp_attr* esp,
                                                                   mlx5dv_flow_action_esp* mlx5_attr))
UROCE_REFUSE_PTR(ibv_flow_action*, mlx5dv_create_flow_action_modify_header,
                 (ibv_context* ctx, size_t actions_sz, uint64_t actions[], mlx5dv_flow_table_type ft_type))
UROCE_REFUSE_PTR(ibv_flow_action*, mlx5dv_create_flow_action_packet_reformat,
                 (ibv_context* ctx, size_t data_sz, void* data,
                  mlx5dv_flow_action_packet_reformat_type reformat_type, mlx5dv_flow_table_type ft_type))
UROCE_REFUSE_PTR(mlx5dv_steering_anchor*, mlx5dv_create_steering_anchor, (ibv_context* context,
                                                                          mlx5dv_steering_anchor_attr* attr))
UROCE_NOT_OURS_INT(mlx5dv_destroy_steering_anchor, (mlx5dv_steering_anchor* sa))

// ---------------------------------------------------------------------------
// Crypto: import-method login and data encryption keys are DevX general
// objects of a crypto engine uroce's device does not have
// (mlx5dv_query_device reports no MLX5DV_CONTEXT_MASK_CRYPTO_OFFLOAD).
// ---------------------------------------------------------------------------

UROCE_REFUSE_INT(mlx5dv_crypto_login, (ibv_context* context, mlx5dv_crypto_login_attr* login_attr))
UROCE_REFUSE_INT(mlx5dv_crypto_login_query_state, (ibv_context* context, mlx5dv_crypto_login_state* state))
UROCE_REFUSE_INT(mlx5dv_crypto_logout, (ibv_context* context))
UROCE_REFUSE_PTR(mlx5dv_crypto_login_obj*, mlx5dv_crypto_login_create,
                 (ibv_context* context, mlx5dv_crypto_login_attr_ex* login_attr))
UROCE_REFUSE_INT(mlx5dv_crypto_login_query, (mlx5dv_crypto_login_obj* crypto_login,
                                             mlx5dv_crypto_login_query_attr* query_attr))
UROCE_NOT_OURS_INT(mlx5dv_crypto_login_destroy, (mlx5dv_crypto_login_obj* crypto_login))
UROCE_REFUSE_PTR(mlx5dv_dek*, mlx5dv_dek_create, (ibv_context* context, mlx5dv_dek_init_attr* init_attr))
UROCE_REFUSE_INT(mlx5dv_dek_query, (mlx5dv_dek* dek, mlx5dv_dek_attr* attr))
UROCE_NOT_OURS_INT(mlx5dv_dek_destroy, (mlx5dv_dek* dek))

// ---------------------------------------------------------------------------
// Scheduling elements (QoS rate-limit trees): DevX objects of the
// firmware's transmit scheduler; uroce's engine has no per-QP scheduler.
// ---------------------------------------------------------------------------

UROCE_REFUSE_PTR(mlx5dv_sched_node*, mlx5dv_sched_node_create, (ibv_context* context,
                                                                const mlx5dv_sched_attr* sched_attr))
UROCE_REFUSE_INT(mlx5dv_sched_node_modify, (mlx5dv_sched_node* node, const mlx5dv_sched_attr* sched_attr))
UROCE_NOT_OURS_INT(mlx5dv_sched_node_destroy, (mlx5dv_sched_node* node))
UROCE_REFUSE_PTR(mlx5dv_sched_leaf*, mlx5dv_sched_leaf_create, (ibv_context* context,
                                                                const mlx5dv_sched_attr* sched_attr))
UROCE_REFUSE_INT(mlx5dv_sched_leaf_modify, (mlx5dv_sched_leaf* leaf, const mlx5dv_sched_attr* sched_attr))
UROCE_NOT_OURS_INT(mlx5dv_sched_leaf_destroy, (mlx5dv_sched_leaf* leaf))
UROCE_REFUSE_INT(mlx5dv_modify_qp_sched_elem, (ibv_qp* qp, const mlx5dv_sched_leaf* requestor,
                                               const mlx5dv_sched_leaf* responder))

// ---------------------------------------------------------------------------
// VFIO: driving a ConnectX PCI function from user space without the kernel
// driver. uroce's device is not a PCI function, so there is none to open.
// ---------------------------------------------------------------------------

UROCE_REFUSE_PTR(ibv_device**, mlx5dv_get_vfio_device_list, (mlx5dv_vfio_context_attr* attr))
UROCE_REFUSE_INT(mlx5dv_vfio_process_events, (ibv_context* context))

// Special: returns a file descriptor, so it fails with -1, not a positive
// errno a caller would take for an fd (mlx5_vfio.c has no failure path; it
// reads the fd of a VFIO context, and no context here is one).
UROCE_MLX5_EXPORT int mlx5dv_vfio_get_events_fd(ibv_context* ibctx) {
  errno = EOPNOTSUPP;
  return -1;
}

// ---------------------------------------------------------------------------
// Signature mkeys (indirect ones are mkey.cc's): no mkey here has a
// signature context, and verbs.c's check is EINVAL for one without.
// ---------------------------------------------------------------------------

UROCE_NOT_OURS_INT(_mlx5dv_mkey_check, (mlx5dv_mkey* mkey, mlx5dv_mkey_err* err_info, size_t err_info_size))

// ---------------------------------------------------------------------------
// VAR (virtio doorbell pages) and packet pacing entries: kernel mlx5
// objects backed by hardware pages and rate tables uroce's device lacks.
// ---------------------------------------------------------------------------

UROCE_REFUSE_PTR(mlx5dv_var*, mlx5dv_alloc_var, (ibv_context* context, uint32_t flags))
UROCE_NOT_OURS_VOID(mlx5dv_free_var, (mlx5dv_var* dv_var))
UROCE_REFUSE_PTR(mlx5dv_pp*, mlx5dv_pp_alloc, (ibv_context* context, size_t pp_context_sz, const void* pp_context,
                                               uint32_t flags))
UROCE_NOT_OURS_VOID(mlx5dv_pp_free, (mlx5dv_pp* pp))

// ---------------------------------------------------------------------------
// Misc. per-QP, AH and DM controls. libmlx5 sends each as a PRM command
// through DevX (LAG port, reserved QPNs,
// AV-to-QP mapping, SQD queries for cancelling WRs) or maps MEMIC operation
// pages; uroce has one port, no DevX and plain device memory.
// ---------------------------------------------------------------------------

UROCE_REFUSE_INT(mlx5dv_query_qp_lag_port, (ibv_qp* qp, uint8_t* port_num, uint8_t* active_port_num))
UROCE_REFUSE_INT(mlx5dv_modify_qp_lag_port, (ibv_qp* qp, uint8_t port_num))
UROCE_REFUSE_INT(mlx5dv_map_ah_to_qp, (ibv_ah* ah, uint32_t qp_num))
UROCE_REFUSE_INT(mlx5dv_reserved_qpn_alloc, (ibv_context* ctx, uint32_t* qpn))
UROCE_NOT_OURS_INT(mlx5dv_reserved_qpn_dealloc, (ibv_context* ctx, uint32_t qpn))
UROCE_REFUSE_PTR(void*, mlx5dv_dm_map_op_addr, (ibv_dm* dm, uint8_t op))

// Special: returns the number of cancelled WRs or -errno (qp.c: the failed
// DevX QUERY_QP of mlx5_qp_query_sqd comes back as -EOPNOTSUPP).
UROCE_MLX5_EXPORT int mlx5dv_qp_cancel_posted_send_wrs(mlx5dv_qp_ex* mqp, uint64_t wr_id) {
  errno = EOPNOTSUPP;
  return -EOPNOTSUPP;
}

#undef UROCE_REFUSE_PTR
#undef UROCE_REFUSE_INT
#undef UROCE_NOT_OURS_INT
#undef UROCE_NOT_OURS_VOID
