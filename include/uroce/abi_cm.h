// The provider/engine ABI: the connection manager (uroce/abi_base.h explains the parts).
#pragma once

#include "uroce/abi_control.h"

namespace uroce::abi {

// ---------------------------------------------------------------------------
// Connection manager (librdmacm). The engine keeps the ids, their addresses
// and port spaces, and carries connection messages between them; QPs are
// moved through their states by librdmacm itself (rdma_init_qp_attr), as
// rdma-core's librdmacm does with the attributes the kernel's rdma_cm gives.
// ---------------------------------------------------------------------------

// An IPv4 or IPv6 socket address (AF_INET: addr[0..3]), or an AF_IB one
// (struct sockaddr_ib): addr is its GID, and its service ID is port (bits
// 0..15, network order) and scope_id (bits 16..47, host order: the port
// space of rdma_cm's service IDs, RDMA_IB_IP_PS_*); a bound address's is
// the port space its port is taken from (librdmacm applies sib_sid_mask as
// cma_select_ib_ps does). Its P_Key, flow label and scope are the library's.
struct CmAddr {
  uint16_t family;   // AF_INET, AF_INET6, AF_IB
  uint16_t port;     // network order
  uint32_t scope_id;
  uint8_t addr[16];
};
static_assert(sizeof(CmAddr) == 24);

constexpr size_t kCmMaxPrivateData = 196;  // REQ and REP (IBA 12.6.5, 12.6.8)
constexpr size_t kCmMaxRejPrivateData = 148;  // REJ (IBA 12.6.7)

// The parameters one side of a connection sends the other (REQ, REP).
struct CmConnParam {
  uint32_t qp_num;
  uint32_t psn;   // the Starting PSN: the receive queue's of the side that sends it (Linux's cm.c)
  uint32_t qkey;  // UD (SIDR REP)
  uint8_t responder_resources;
  uint8_t initiator_depth;
  uint8_t flow_control;
  uint8_t retry_count;
  uint8_t rnr_retry_count;
  uint8_t srq;
  uint8_t private_data_len;
  // enum ibv_qp_type of the sender's QP (connect, accept) or of the QP the
  // receiver is to make (CONNECT_REQUEST: XRC_RECV for an XRC initiator's
  // request); 0: the id's own type (as before: was reserved, always 0).
  uint8_t qp_type;
  uint8_t private_data[kCmMaxPrivateData];
};

struct CmHandleRequest {
  uint64_t handle;
};
struct CmHandleReply {
  uint64_t handle;
};
struct CmCreateIdRequest {
  uint64_t channel;
  uint32_t ps;       // enum rdma_port_space
  uint32_t qp_type;  // enum ibv_qp_type
};
struct CmBindRequest {
  uint64_t id;
  CmAddr addr;
  uint8_t reuseaddr;
  uint8_t afonly;
  uint8_t reserved[6];
};
struct CmBindReply {
  CmAddr addr;           // the bound (source) address, port chosen
  uint8_t local_gid[16]; // the device GID that address uses
  uint8_t gid_index;
  uint8_t reserved[7];
};
struct CmResolveAddrRequest {
  uint64_t id;
  CmAddr src;  // family 0: the engine chooses
  CmAddr dst;
  uint8_t reuseaddr;
  uint8_t afonly;
  uint8_t reserved[6];
};
struct CmListenRequest {
  uint64_t id;
  int32_t backlog;
  uint32_t reserved;
};
struct CmConnectRequest {
  uint64_t id;
  CmConnParam param;
};
struct CmRejectRequest {
  uint64_t id;
  uint8_t private_data_len;
  uint8_t reserved[7];
  uint8_t private_data[kCmMaxRejPrivateData];
};
struct CmMigrateRequest {
  uint64_t id;
  uint64_t channel;
};

// What the engine writes into an event channel's pipe, one record per
// event (under PIPE_BUF: each write is whole).
struct CmEventRecord {
  uint64_t id;         // the id the event is for (CONNECT_REQUEST: a new id)
  uint64_t listen_id;  // CONNECT_REQUEST: the listening id
  uint32_t event;      // enum rdma_cm_event_type
  int32_t status;
  CmAddr src, dst;     // CONNECT_REQUEST: the new id's addresses
  uint8_t peer_gid[16];   // the other side's GID (RTR's and UD's dgid)
  uint8_t local_gid_index;
  uint8_t reserved[7];
  CmConnParam param;   // the other side's, resources seen from the receiver
};
static_assert(sizeof(CmEventRecord) < 512);

}  // namespace uroce::abi
