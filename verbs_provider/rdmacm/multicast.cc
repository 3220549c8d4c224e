// rdma_join_multicast, rdma_join_multicast_ex, rdma_leave_multicast. On RoCE
// no SA is asked (cma_iboe_join_multicast): the group's MGID comes from its
// address, the join completes at once with a MULTICAST_JOIN event carrying
// the address vector to send to it (the group's GID, QPN 0xffffff,
// RDMA_UDP_QKEY), and the id's QP is attached when the application takes
// that event (librdmacm's ucma_process_join). The event goes through the
// id's channel like the engine's, written by this library.
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "verbs_provider/rdmacm/rdmacm.h"

namespace uroce::rdmacm {

namespace {

constexpr uint32_t kMulticastQpn = 0xffffff;

bool same_addr(const sockaddr_storage& a, const sockaddr* b) {
  if (a.ss_family != b->sa_family) return false;
  if (b->sa_family == AF_INET)
    return reinterpret_cast<const sockaddr_in&>(a).sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(b)->sin_addr.s_addr;
  return std::memcmp(&reinterpret_cast<const sockaddr_in6&>(a).sin6_addr,
                     &reinterpret_cast<const sockaddr_in6*>(b)->sin6_addr, 16) == 0;
}

// cma_iboe_set_mgid for RoCE v2: an IPv4 group as ::ffff:a.b.c.d, an IPv6
// group as itself. false: not a multicast address. (The kernel refuses IPv6
// groups on RoCE v2 with ENOTSUPP; uroce serves them, its device routes
// IPv6 multicast GIDs like any other.)
bool group_mgid(const sockaddr* addr, ibv_gid* mgid) {
  std::memset(mgid, 0, sizeof(*mgid));
  if (addr->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(addr);
    const uint8_t* ip = reinterpret_cast<const uint8_t*>(&in->sin_addr);
    if ((ip[0] & 0xf0) != 0xe0) return false;
    mgid->raw[10] = mgid->raw[11] = 0xff;
    std::memcpy(mgid->raw + 12, ip, 4);
    return true;
  }
  if (addr->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(addr);
    std::memcpy(mgid->raw, &in6->sin6_addr, 16);
    return mgid->raw[0] == 0xff;
  }
  return false;
}

// The id's GID, unless the group is of the other IP family: RoCEv2 sends
// an IPv6 group's datagrams from an IPv6 GID (the device's own, index 2,
// else its link-local one, index 1), an IPv4 group's from GID 0.
uint8_t group_sgid_index(const Id* id, const uint8_t* mgid) {
  static constexpr uint8_t kV4Mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  const bool v4_group = std::memcmp(mgid, kV4Mapped, 12) == 0;
  ibv_gid own{};
  if (ibv_query_gid(id->id.verbs, 1, id->gid_index, &own) != 0) return id->gid_index;
  if ((std::memcmp(own.raw, kV4Mapped, 12) == 0) == v4_group) return id->gid_index;
  if (v4_group) return 0;
  ibv_gid six{};
  return ibv_query_gid(id->id.verbs, 1, 2, &six) == 0 && six.raw[0] != 0 ? 2 : 1;
}

int join(Id* id, const sockaddr* addr, bool send_only, void* context) {
  if (!addr) return fail(EINVAL);
  if (id->id.ps != RDMA_PS_UDP && id->id.ps != RDMA_PS_IPOIB) return fail(EINVAL);
  ibv_gid mgid;
  if (!group_mgid(addr, &mgid)) return fail(EINVAL);
  {
    std::lock_guard<std::mutex> lock(library().mu);
    // rdma_join_multicast: an id bound or resolved to a device.
    if (!id->engine) return fail(EINVAL);
    for (const Id::Group& g : id->groups)
      if (same_addr(g.addr, addr)) return fail(EADDRINUSE);  // cma_join_multicast
    Id::Group g{};
    std::memcpy(&g.addr, addr, addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    g.mgid = mgid;
    g.context = context;
    g.send_only = send_only;
    id->groups.push_back(g);
    abi::CmEventRecord rec{};
    rec.id = id->handle;
    rec.event = RDMA_CM_EVENT_MULTICAST_JOIN;
    std::memcpy(rec.peer_gid, mgid.raw, 16);
    rec.param.qp_num = kMulticastQpn;
    rec.param.qkey = RDMA_UDP_QKEY;
    auto* ch = reinterpret_cast<Channel*>(id->id.channel);
    if (write(ch->write_fd, &rec, sizeof(rec)) != ssize_t(sizeof(rec))) {
      id->groups.pop_back();
      return fail(errno ? errno : EIO);
    }
  }
  return complete(id);
}

}  // namespace

void multicast_joined(Id* id, const abi::CmEventRecord& rec, rdma_cm_event* ev) {
  auto g = std::find_if(id->groups.begin(), id->groups.end(), [&](const Id::Group& x) {
    return std::memcmp(x.mgid.raw, rec.peer_gid, 16) == 0;
  });
  rdma_ud_param& ud = ev->param.ud;
  ud.qp_num = rec.param.qp_num;
  ud.qkey = rec.param.qkey;
  ud.ah_attr.is_global = 1;
  ud.ah_attr.port_num = 1;
  std::memcpy(ud.ah_attr.grh.dgid.raw, rec.peer_gid, 16);
  ud.ah_attr.grh.sgid_index = group_sgid_index(id, rec.peer_gid);
  ud.ah_attr.grh.hop_limit = 64;  // IPV6_DEFAULT_HOPLIMIT, as cma_iboe_join_multicast
  ud.ah_attr.grh.traffic_class = id->tos;
  if (g == id->groups.end()) {  // left before the event was taken
    ev->event = RDMA_CM_EVENT_MULTICAST_ERROR;
    ev->status = -ENOENT;
    return;
  }
  ud.private_data = g->context;  // librdmacm: the join's context
  if (id->id.qp && !g->send_only && !g->attached) {
    if (int err = ibv_attach_mcast(id->id.qp, &g->mgid, 0)) {
      ev->event = RDMA_CM_EVENT_MULTICAST_ERROR;
      ev->status = -err;
      return;
    }
    g->attached = true;
  }
}

void leave_all_groups(Id* id) {
  for (Id::Group& g : id->groups)
    if (g.attached && id->id.qp) ibv_detach_mcast(id->id.qp, &g.mgid, 0);
  id->groups.clear();
}

}  // namespace uroce::rdmacm

using namespace uroce::rdmacm;

RDMACM_EXPORT int rdma_join_multicast(rdma_cm_id* cm_id, sockaddr* addr, void* context) {
  if (!cm_id) return fail(EINVAL);
  return join(to_id(cm_id), addr, false, context);
}

RDMACM_EXPORT int rdma_join_multicast_ex(rdma_cm_id* cm_id, rdma_cm_join_mc_attr_ex* attr, void* context) {
  if (!cm_id || !attr) return fail(EINVAL);
  // librdmacm: both the address and the join flags are required.
  const uint32_t needed = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
  if ((attr->comp_mask & needed) != needed || (attr->comp_mask & ~needed)) return fail(EINVAL);
  if (attr->join_flags != RDMA_MC_JOIN_FLAG_FULLMEMBER &&
      attr->join_flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER)
    return fail(EINVAL);
  return join(to_id(cm_id), attr->addr, attr->join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER, context);
}

RDMACM_EXPORT int rdma_leave_multicast(rdma_cm_id* cm_id, sockaddr* addr) {
  if (!cm_id || !addr) return fail(EINVAL);
  Id* id = to_id(cm_id);
  std::lock_guard<std::mutex> lock(library().mu);
  auto g = std::find_if(id->groups.begin(), id->groups.end(),
                        [&](const Id::Group& x) { return same_addr(x.addr, addr); });
  if (g == id->groups.end()) return fail(EADDRNOTAVAIL);  // librdmacm: no such join
  if (g->attached && id->id.qp) ibv_detach_mcast(id->id.qp, &g->mgid, 0);
  id->groups.erase(g);
  return 0;
}
