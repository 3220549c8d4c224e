// The endpoint calls of rdma_verbs.h's style of program: rdma_getaddrinfo,
// rdma_create_ep / rdma_destroy_ep and rdma_get_request, built on the
// calls of cma.cc as rdma-core's are (librdmacm/addrinfo.c, cma.c).
#include <netdb.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "verbs_provider/rdmacm/rdmacm.h"


using namespace uroce::rdmacm;

namespace {

sockaddr* copy_addr(const sockaddr* sa, socklen_t len) {
  auto* out = static_cast<sockaddr*>(calloc(1, std::max<size_t>(len, sizeof(sockaddr_storage))));
  if (out) std::memcpy(out, sa, len);
  return out;
}

// An address found for AF_IB hints (RAI_FAMILY | RAI_NUMERICHOST) as a
// sockaddr_ib, as rdma-core's ucma_convert_in6: the IPv6 address is the GID
// (an IPv4 one its mapped GID), the port space and port the service ID and
// its mask (ucma_set_sid).
sockaddr* to_sockaddr_ib(const sockaddr* sa, uint32_t ps) {
  auto* ib = static_cast<sockaddr_ib*>(calloc(1, sizeof(sockaddr_storage)));
  if (!ib) return nullptr;
  ib->sib_family = AF_IB;
  ib->sib_pkey = htobe16(0xffff);
  uint16_t port = 0;
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    ib->sib_flowinfo = in6->sin6_flowinfo;
    std::memcpy(ib->sib_addr.sib_raw, &in6->sin6_addr, 16);
    ib->sib_scope_id = in6->sin6_scope_id;
    port = be16toh(in6->sin6_port);
  } else {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    ib->sib_addr.sib_raw[10] = ib->sib_addr.sib_raw[11] = 0xff;
    std::memcpy(ib->sib_addr.sib_raw + 12, &in->sin_addr, 4);
    port = be16toh(in->sin_port);
  }
  ib->sib_sid = htobe64(uint64_t(ps) << 16 | port);
  uint64_t mask = ps ? RDMA_IB_IP_PS_MASK : 0;
  if (port) mask |= RDMA_IB_IP_PORT_MASK;
  ib->sib_sid_mask = htobe64(mask);
  return reinterpret_cast<sockaddr*>(ib);
}

}  // namespace

// As rdma-core's (librdmacm/addrinfo.c): a name or service goes through
// getaddrinfo with the hints' family, socket type and protocol; with neither,
// the hints' own addresses are the answer (libfabric's verbs provider asks so
// for a peer whose address it already has). A source address in the hints
// is kept when the lookup gave none. AF_IB hints look up any family, and
// with RAI_FAMILY and RAI_NUMERICHOST give an AF_IB address of the numeric
// host (a GID written as an IPv6 address); without ibacm nothing resolves
// names to GIDs (ucma_ib_resolve).
RDMACM_EXPORT int rdma_getaddrinfo(const char* node, const char* service, const rdma_addrinfo* hints,
                                   rdma_addrinfo** res) {
  if (!res || (!node && !service && !hints)) return fail(EINVAL);
  static const rdma_addrinfo kNoHints{};
  const rdma_addrinfo& h = hints ? *hints : kNoHints;
  auto* ai = static_cast<rdma_addrinfo*>(calloc(1, sizeof(rdma_addrinfo)));
  if (!ai) return fail(ENOMEM);
  if (node || service) {
    addrinfo ah{};
    if (h.ai_flags & RAI_PASSIVE) ah.ai_flags |= AI_PASSIVE;
    if (h.ai_flags & RAI_NUMERICHOST) ah.ai_flags |= AI_NUMERICHOST;
    ah.ai_family = h.ai_family == AF_IB ? AF_UNSPEC : h.ai_family;
    ah.ai_socktype = h.ai_qp_type == IBV_QPT_UD ? SOCK_DGRAM : h.ai_qp_type ? SOCK_STREAM : 0;
    ah.ai_protocol = h.ai_port_space == RDMA_PS_TCP                                 ? IPPROTO_TCP
                     : h.ai_port_space == RDMA_PS_UDP || h.ai_port_space == RDMA_PS_IPOIB ? IPPROTO_UDP
                     : h.ai_port_space == RDMA_PS_IB && ah.ai_socktype == SOCK_STREAM ? IPPROTO_TCP
                     : h.ai_port_space == RDMA_PS_IB && ah.ai_socktype == SOCK_DGRAM  ? IPPROTO_UDP
                                                                                      : 0;
    addrinfo* found = nullptr;
    if (int err = getaddrinfo(node, service, &ah, &found)) {
      free(ai);
      return err;
    }
    ai->ai_family = found->ai_family;
    ai->ai_qp_type = h.ai_qp_type ? h.ai_qp_type : found->ai_socktype == SOCK_DGRAM ? IBV_QPT_UD : IBV_QPT_RC;
    ai->ai_port_space = h.ai_port_space                     ? h.ai_port_space
                        : found->ai_protocol == IPPROTO_UDP ? RDMA_PS_UDP
                                                            : RDMA_PS_TCP;
    const bool ib = (h.ai_flags & RAI_FAMILY) && h.ai_family == AF_IB && (h.ai_flags & RAI_NUMERICHOST);
    sockaddr* addr = ib ? to_sockaddr_ib(found->ai_addr, uint32_t(ai->ai_port_space))
                        : copy_addr(found->ai_addr, found->ai_addrlen);
    const socklen_t addr_len = ib ? socklen_t(sizeof(sockaddr_ib)) : found->ai_addrlen;
    if (ib) ai->ai_family = AF_IB;
    char* name = node && found->ai_canonname ? strdup(found->ai_canonname) : nullptr;
    if (h.ai_flags & RAI_PASSIVE) {
      ai->ai_flags = RAI_PASSIVE;
      ai->ai_src_addr = addr;
      ai->ai_src_len = addr_len;
      ai->ai_src_canonname = name;
    } else {
      ai->ai_dst_addr = addr;
      ai->ai_dst_len = addr_len;
      ai->ai_dst_canonname = name;
    }
    freeaddrinfo(found);
    if (!addr) {
      rdma_freeaddrinfo(ai);
      return fail(ENOMEM);
    }
  } else {
    ai->ai_flags = h.ai_flags;
    ai->ai_family = h.ai_family;
    ai->ai_qp_type = h.ai_qp_type;
    ai->ai_port_space = h.ai_port_space;
    if (h.ai_dst_addr && h.ai_dst_len) {
      if (!(ai->ai_dst_addr = copy_addr(h.ai_dst_addr, h.ai_dst_len))) {
        rdma_freeaddrinfo(ai);
        return fail(ENOMEM);
      }
      ai->ai_dst_len = h.ai_dst_len;
    }
  }
  if (!ai->ai_src_len && h.ai_src_addr && h.ai_src_len) {
    if (!(ai->ai_src_addr = copy_addr(h.ai_src_addr, h.ai_src_len))) {
      rdma_freeaddrinfo(ai);
      return fail(ENOMEM);
    }
    ai->ai_src_len = h.ai_src_len;
  }
  *res = ai;
  return 0;
}

RDMACM_EXPORT void rdma_freeaddrinfo(rdma_addrinfo* res) {
  while (res) {
    rdma_addrinfo* next = res->ai_next;
    free(res->ai_src_addr);
    free(res->ai_dst_addr);
    free(res->ai_src_canonname);
    free(res->ai_dst_canonname);
    free(res->ai_route);
    free(res->ai_connect);
    free(res);
    res = next;
  }
}

RDMACM_EXPORT int rdma_create_ep(rdma_cm_id** out, rdma_addrinfo* res, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  if (!out || !res) return fail(EINVAL);
  rdma_cm_id* cm_id;
  if (rdma_create_id(nullptr, &cm_id, nullptr, rdma_port_space(res->ai_port_space)) != 0) return -1;
  Id* id = to_id(cm_id);
  id->id.qp_type = ibv_qp_type(res->ai_qp_type);
  int r;
  if (res->ai_flags & RAI_PASSIVE) {
    r = rdma_bind_addr(cm_id, res->ai_src_addr);
    if (r == 0) {
      // Each request rdma_get_request hands out gets a QP of these.
      id->ep_pd = pd;
      if (qp_init_attr) {
        id->ep_has_qp_attr = true;
        id->ep_qp_attr = *qp_init_attr;
        id->ep_qp_attr.qp_type = ibv_qp_type(res->ai_qp_type);
      }
    }
  } else {
    r = rdma_resolve_addr(cm_id, res->ai_src_addr, res->ai_dst_addr, 2000);
    if (r == 0) r = rdma_resolve_route(cm_id, 2000);
    if (r == 0 && qp_init_attr) {
      qp_init_attr->qp_type = ibv_qp_type(res->ai_qp_type);  // the endpoint's, whatever the caller left
      r = rdma_create_qp(cm_id, pd, qp_init_attr);
    }
  }
  if (r != 0) {
    const int err = errno;
    rdma_destroy_id(cm_id);
    return fail(err);
  }
  *out = cm_id;
  return 0;
}

RDMACM_EXPORT void rdma_destroy_ep(rdma_cm_id* id) {
  if (!id) return;
  if (id->qp) rdma_destroy_qp(id);
  if (id->srq) rdma_destroy_srq(id);
  rdma_destroy_id(id);
}

RDMACM_EXPORT int rdma_get_request(rdma_cm_id* listen, rdma_cm_id** out) {
  Id* l = to_id(listen);
  if (!l->sync || !out) return fail(EINVAL);
  rdma_cm_event* event;
  if (rdma_get_cm_event(listen->channel, &event) != 0) return -1;
  if (event->status) {
    const int err = event->status < 0 ? -event->status : event->status;
    rdma_ack_cm_event(event);
    return fail(err);
  }
  if (event->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
    rdma_ack_cm_event(event);
    return fail(EINVAL);
  }
  rdma_cm_id* id = event->id;
  if (l->ep_has_qp_attr) {
    ibv_qp_init_attr attr = l->ep_qp_attr;
    if (rdma_create_qp(id, l->ep_pd, &attr) != 0) {
      const int err = errno;
      rdma_reject(id, nullptr, 0);
      rdma_ack_cm_event(event);
      rdma_destroy_id(id);
      return fail(err);
    }
  }
  id->event = event;
  *out = id;
  return 0;
}
