// The connection manager's agent (see cm_agent.h). Setup path: runs on the
// engine thread from control requests, never from the datapath.
#include "cm/cm_agent.h"

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

#include "device/objects.h"
#include "uroce/cm_addr.h"

namespace uroce::cm {

using namespace cm_events;

namespace {

// The kernel's ephemeral range (net.ipv4.ip_local_port_range defaults),
// which rdma_cm takes its ports from (cma_alloc_any_port).
constexpr uint32_t kEphemeralLow = 32768, kEphemeralHigh = 60999;

constexpr int kChannelPipeBytes = 256 << 10;

bool is_any(const abi::CmAddr& a) {
  const size_t n = a.family == AF_INET ? 4 : 16;
  for (size_t i = 0; i < n; ++i)
    if (a.addr[i]) return false;
  return true;
}

constexpr uint8_t kZeroGid[16] = {};

bool is_loopback_gid(const abi::CmAddr& a) {
  static const uint8_t kLoopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  return std::memcmp(a.addr, kLoopback, 16) == 0;
}

bool is_multicast(const abi::CmAddr& a) {
  return a.family == AF_INET ? (a.addr[0] & 0xf0) == 0xe0 : a.family == AF_INET6 && a.addr[0] == 0xff;
}

// An AF_IB address as the IP address its GID is (RoCE GIDs are).
abi::CmAddr ip_view(abi::CmAddr a) {
  if (a.family == AF_IB) a.family = AF_INET6;
  return unmapped(a);
}

bool same_ip(const abi::CmAddr& x, const abi::CmAddr& y) {
  const abi::CmAddr a = ip_view(x), b = ip_view(y);
  return a.family == b.family && std::memcmp(a.addr, b.addr, a.family == AF_INET ? 4 : 16) == 0;
}

// Does an id bound to `bound` take connections or ports at `a`? A wildcard
// takes its family, and an IPv6 wildcard IPv4 too unless AFONLY (as
// IPV6_V6ONLY, cma_any_addr/cma_check_port); an AF_IB wildcard (no AFONLY
// of its own) every address. An AF_IB address is never the same as an IP
// one (cma_addr_cmp compares families first).
bool covers(const abi::CmAddr& bound, bool afonly, const abi::CmAddr& a) {
  const abi::CmAddr b = ip_view(bound), x = ip_view(a);
  if (is_any(b)) return b.family == x.family || (b.family == AF_INET6 && !afonly);
  if ((bound.family == AF_IB) != (a.family == AF_IB)) return false;
  return same_ip(b, x);
}

}  // namespace

uint64_t CmAgent::first_handle() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) | 1;  // 2^32 handles before two engines' could meet
}

CmAgent::~CmAgent() {
  for (auto& [h, c] : channels_)
    if (c.fd >= 0) close(c.fd);
}

CmAgent::Id* CmAgent::find_id(Owner* o, uint64_t h) {
  auto it = ids_.find(h);
  return it == ids_.end() || it->second.owner != o ? nullptr : &it->second;
}

int CmAgent::create_channel(Owner* o, int pipe_fd, uint64_t* handle) {
  if (pipe_fd < 0) return EBADF;
  fcntl(pipe_fd, F_SETFL, fcntl(pipe_fd, F_GETFL) | O_NONBLOCK);
  // Room for a burst (cmtime sets up hundreds of connections at once):
  // 256 KiB, over 800 records, within fs.pipe-max-size (1 MiB) and without
  // eating much of a user's fs.pipe-user-pages-soft. Best effort: 64 KiB
  // otherwise.
  fcntl(pipe_fd, F_SETPIPE_SZ, kChannelPipeBytes);
  *handle = next_handle_++;
  channels_[*handle] = Channel{o, pipe_fd};
  return 0;
}

int CmAgent::destroy_channel(Owner* o, uint64_t h) {
  auto it = channels_.find(h);
  if (it == channels_.end() || it->second.owner != o) return ENOENT;
  for (auto& [ih, id] : ids_)
    if (id.channel == h) return EBUSY;  // rdma_destroy_event_channel: ids still use it
  close(it->second.fd);
  channels_.erase(it);
  return 0;
}

int CmAgent::create_id(Owner* o, const abi::CmCreateIdRequest& r, uint64_t* handle) {
  auto ch = channels_.find(r.channel);
  if (ch == channels_.end() || ch->second.owner != o) return ENOENT;
  if (ids_.size() >= kMaxIds) return ENOMEM;
  Id id;
  id.owner = o;
  id.channel = r.channel;
  id.ps = r.ps;
  id.qp_type = r.qp_type;
  *handle = next_handle_++;
  ids_[*handle] = id;
  return 0;
}

int CmAgent::destroy_id(Owner* o, uint64_t h) {
  if (!find_id(o, h)) return ENOENT;
  abandon(h);
  ids_.erase(h);
  return 0;
}

void CmAgent::abandon(uint64_t h) {
  Id& id = ids_.at(h);
  if (id.remote) return abandon_remote(id, h);
  auto peer_it = ids_.find(id.peer);
  if (id.peer && peer_it != ids_.end() && peer_it->second.peer == h) {
    Id& peer = peer_it->second;
    // A connection up or half up ends with a DREQ; one still being set up
    // with a REJ (cm_destroy_id: the REJ of a REQ sent is a timeout, of a
    // REQ received the consumer's).
    switch (id.state) {
      case State::kEstablished:
      case State::kRepSent:
      case State::kRepReceived:
        peer.state = State::kDisconnected;
        peer.peer = 0;
        post_disconnected(id.peer);
        break;
      case State::kConnecting:
        peer.peer = 0;
        post_simple(id.peer, kRejected, kRejTimeout);
        break;
      case State::kRequested:
        peer.peer = 0;
        peer.state = State::kRouteResolved;
        post_simple(id.peer, peer.ps == kPsUdp ? kUnreachable : kRejected,
                    peer.ps == kPsUdp ? kSidrReject : kRejConsumerDefined);
        break;
      default:
        break;
    }
  }
  id.peer = 0;
}

void CmAgent::release_owner(Owner* o) {
  std::vector<uint64_t> mine;
  for (auto& [h, id] : ids_)
    if (id.owner == o) mine.push_back(h);
  for (uint64_t h : mine) {
    abandon(h);
    ids_.erase(h);
  }
  for (auto it = channels_.begin(); it != channels_.end();) {
    if (it->second.owner == o) {
      close(it->second.fd);
      it = channels_.erase(it);
    } else {
      ++it;
    }
  }
}

void CmAgent::address_removed(const uint8_t gid[16]) {
  abi::CmAddr gone{};
  if (is_ipv4_mapped(gid)) {
    gone.family = AF_INET;
    std::memcpy(gone.addr, gid + 12, 4);
  } else {
    gone.family = AF_INET6;
    std::memcpy(gone.addr, gid, 16);
  }
  std::vector<uint64_t> bound;
  for (const auto& [h, id] : ids_)
    if (id.state != State::kIdle && same_ip(id.src, gone)) bound.push_back(h);
  for (uint64_t h : bound) post_simple(h, kAddrChange, 0);
}

// The addresses this engine answers for: its own, the loopback ones (its
// default port is bound to lo) and the wildcards.
bool CmAgent::is_local(const abi::CmAddr& addr) const {
  if (addr.family == AF_IB) return is_any(addr) || is_loopback_gid(addr) || gid_index_of(addr) >= 0;
  const abi::CmAddr a = unmapped(addr);
  if (is_any(a)) return true;
  if (a.family == AF_INET && (a.addr[0] == 127 || std::memcmp(a.addr, ip_.data(), 4) == 0)) return true;
  if (a.family != AF_INET && a.family != AF_INET6) return false;
  static const uint8_t kLoop6[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  const bool has_ip6 = std::any_of(ip6_.begin(), ip6_.end(), [](uint8_t b) { return b != 0; });
  if (a.family == AF_INET6 &&
      (std::memcmp(a.addr, kLoop6, 16) == 0 || (has_ip6 && std::memcmp(a.addr, ip6_.data(), 16) == 0)))
    return true;
  return gid_index_of(a) >= 0;  // any other address of the bound interface
}

// The GID of an address (IPv4 as ::ffff:a.b.c.d), -1 if none.
int CmAgent::gid_index_of(const abi::CmAddr& addr) const {
  uint8_t gid[16];
  uroce::gid_of(unmapped(addr), gid);
  for (int i = 0; i < int(abi::kMaxGids); ++i)
    if (info_.gids[i].valid && std::memcmp(info_.gids[i].gid, gid, 16) == 0) return i;
  return -1;
}

// The engine's address of a family: its --ip6 (else ::1), its --ip.
abi::CmAddr CmAgent::own_address(uint16_t family) const {
  abi::CmAddr a{};
  a.family = family;
  if (family == AF_INET) {
    std::memcpy(a.addr, ip_.data(), 4);
  } else if (std::any_of(ip6_.begin(), ip6_.end(), [](uint8_t b) { return b != 0; })) {
    std::memcpy(a.addr, ip6_.data(), 16);
  } else {
    a.addr[15] = 1;
  }
  return a;
}

// An IPv6 address of the engine's own uses its IPv6 GID (index 2); every
// other address, loopback included, the IPv4 one (index 0): on one engine
// both ends reach each other through either.
uint8_t CmAgent::gid_index_for(const abi::CmAddr& addr) const {
  if (const int i = gid_index_of(addr); i >= 0) return uint8_t(i);
  const abi::CmAddr a = unmapped(addr);
  if (a.family == AF_INET6 && info_.gids[2].valid && std::memcmp(a.addr, info_.gids[2].gid, 16) == 0)
    return 2;
  return 0;
}

void CmAgent::fill_local(const Id& id, abi::CmBindReply* rep) const {
  rep->addr = id.src;
  rep->gid_index = gid_index_for(id.src);
  std::memcpy(rep->local_gid, info_.gids[rep->gid_index].gid, 16);
}

// cma_check_port: another id on the port whose address overlaps, unless
// both allow reuse and neither listens: EADDRNOTAVAIL when either is a
// wildcard, EADDRINUSE when both name the same address; 0 when free.
int CmAgent::port_conflict(const Id& self, const abi::CmAddr& a) const {
  for (const auto& [h, other] : ids_) {
    if (&other == &self || other.child || other.port_ps != self.port_ps || other.state == State::kIdle) continue;
    if (other.src.port != a.port) continue;
    if (self.reuseaddr && other.reuseaddr && other.state != State::kListen) continue;
    if (!covers(other.src, other.afonly, a) && !covers(a, self.afonly, other.src)) continue;
    return is_any(a) || is_any(other.src) ? EADDRNOTAVAIL : EADDRINUSE;
  }
  return 0;
}

int CmAgent::bind_to(Id& id, abi::CmAddr a) {
  if (a.family != AF_INET && a.family != AF_INET6 && a.family != AF_IB) return EAFNOSUPPORT;
  // An AF_IB address names a device by its GID: on a RoCE port none
  // (cma_validate_port refuses an ARPHRD_INFINIBAND address on a port that
  // is not InfiniBand: ENODEV); only its wildcards (the zero GID, ::1:
  // cma_any_addr) bind, to no device.
  if (a.family == AF_IB && !is_any(a) && !is_loopback_gid(a)) return ENODEV;
  if (!is_local(a)) return EADDRNOTAVAIL;
  id.port_ps = id.ps;
  if (a.family == AF_IB) {
    // cma_select_ib_ps: an RDMA_PS_IB id takes the service IDs of rdma_cm's
    // port spaces, another id its own; anything else is EPROTONOSUPPORT.
    const uint32_t ps = a.scope_id;
    if ((ps != kPsTcp && ps != kPsUdp && ps != kPsIb) || (id.ps != kPsIb && id.ps != ps)) return EPROTONOSUPPORT;
    id.port_ps = ps;
  }
  if (a.port == 0) {
    const uint32_t range = kEphemeralHigh - kEphemeralLow + 1;
    bool found = false;
    for (uint32_t i = 0; i < range && !found; ++i) {
      const uint16_t port = uint16_t(kEphemeralLow + (next_port_++ % range));
      a.port = htons(port);
      found = port_conflict(id, a) == 0;
    }
    if (!found) return EADDRINUSE;
  } else if (int err = port_conflict(id, a)) {
    return err;
  }
  id.src = a;
  id.state = State::kBound;
  return 0;
}

int CmAgent::bind(Owner* o, const abi::CmBindRequest& r, abi::CmBindReply* rep) {
  Id* id = find_id(o, r.id);
  if (!id) return ENOENT;
  if (id->state != State::kIdle) return EINVAL;
  id->reuseaddr = r.reuseaddr;
  id->afonly = r.afonly;
  if (int err = bind_to(*id, r.addr)) return err;
  fill_local(*id, rep);
  return 0;
}

// The source address the kernel's routing would pick to reach dst on this
// engine: dst itself (loopback or one of ours), the wildcard's family's
// loopback when dst is a wildcard.
int CmAgent::resolve_addr(Owner* o, const abi::CmResolveAddrRequest& r, abi::CmBindReply* rep) {
  Id* id = find_id(o, r.id);
  if (!id) return ENOENT;
  if (id->state != State::kIdle && id->state != State::kBound) return EINVAL;
  if (r.dst.family != AF_INET && r.dst.family != AF_INET6 && r.dst.family != AF_IB) return EAFNOSUPPORT;
  // An AF_IB destination from an AF_IB source only, and the other way
  // (resolve_prepare_src: the id's family is the destination's).
  const bool ib = r.dst.family == AF_IB;
  if ((r.src.family && (r.src.family == AF_IB) != ib) || (id->state == State::kBound && (id->src.family == AF_IB) != ib))
    return EINVAL;
  // cma_resolve_ib_dev: the device with the destination's GID, else one
  // with a GID of its subnet prefix; none is ENODEV.
  if (ib && !is_any(r.dst) && !is_loopback_gid(r.dst)) {
    bool found = false;
    for (const auto& g : info_.gids) found |= g.valid && std::memcmp(g.gid, r.dst.addr, 8) == 0;
    if (!found) return ENODEV;
  }
  const uint64_t h = r.id;
  id->dst = r.dst;
  // A multicast group is reached through this engine's own address (mckey
  // resolves its group before rdma_join_multicast).
  const bool group = is_multicast(unmapped(r.dst));
  if (!group && !is_local(r.dst) && wire_up()) return resolve_remote(*id, h, r, rep);
  if (!group && !is_local(r.dst)) {
    // No route off this engine (no wire port): the address cannot be resolved.
    abi::CmEventRecord ev{};
    ev.event = kAddrError;
    ev.status = -EHOSTUNREACH;
    post(*id, h, ev);
    if (id->state == State::kIdle) fill_local(*id, rep);
    return 0;
  }
  if (is_any(id->dst)) {
    // rdma_resolve_addr to a wildcard means the loopback (cma_resolve_loopback),
    // for AF_IB the device's own GID.
    std::memset(id->dst.addr, 0, 16);
    if (ib) std::memcpy(id->dst.addr, info_.gids[0].gid, 16);
    else if (id->dst.family == AF_INET) id->dst.addr[0] = 127, id->dst.addr[3] = 1;
    else id->dst.addr[15] = 1;
  }
  if (id->state == State::kIdle) {
    abi::CmAddr src = r.src.family ? r.src : group ? own_address(r.dst.family) : id->dst;
    if (!r.src.family) src.port = 0;
    if (!r.src.family && ib) src = cm_ib_address(kZeroGid, uint64_t(id->ps) << 16);  // cma_bind_addr's AF_IB wildcard
    id->reuseaddr = r.reuseaddr;
    id->afonly = r.afonly;
    if (int err = bind_to(*id, src)) return err;
  }
  if (is_any(id->src) || (ib && is_loopback_gid(id->src))) {  // bound to a wildcard: the source is the destination's
    abi::CmAddr src = group ? own_address(id->src.family) : id->dst;
    src.port = id->src.port;
    if (ib) src.scope_id = id->src.scope_id;  // its service ID's port space
    id->src = src;
  }
  id->state = State::kAddrResolved;
  fill_local(*id, rep);
  abi::CmEventRecord ev{};
  ev.event = kAddrResolved;
  post(*id, h, ev);
  return 0;
}

int CmAgent::resolve_route(Owner* o, uint64_t h) {
  Id* id = find_id(o, h);
  if (!id) return ENOENT;
  if (id->state != State::kAddrResolved && id->state != State::kRouteResolved) return EINVAL;
  // An AF_IB id has no netdev: on a RoCE port the kernel cannot build its
  // path (cma_resolve_iboe_route: cma_iboe_set_path_rec_l2_fields finds no
  // bound netdev) and rdma_resolve_route fails at once with ENODEV, the id
  // left address-resolved (so rdma_connect is EINVAL).
  if (id->src.family == AF_IB) return ENODEV;
  id->state = State::kRouteResolved;
  abi::CmEventRecord ev{};
  ev.event = kRouteResolved;
  post(*id, h, ev);
  return 0;
}

int CmAgent::listen(Owner* o, uint64_t h, int backlog) {
  (void)backlog;  // every request is delivered; the application answers each
  Id* id = find_id(o, h);
  if (!id) return ENOENT;
  if (id->state == State::kListen) return 0;
  if (id->state == State::kIdle) {  // rdma_listen binds a wildcard first (IPv4, as cma_bind_any)
    abi::CmAddr any{};
    any.family = AF_INET;
    if (int err = bind_to(*id, any)) return err;
  }
  if (id->state != State::kBound) return EINVAL;
  // Only one listener per address and port (cma_check_port with listening ids).
  for (const auto& [oh, other] : ids_)
    if (oh != h && other.state == State::kListen && other.port_ps == id->port_ps && other.src.port == id->src.port &&
        (covers(other.src, other.afonly, id->src) || covers(id->src, id->afonly, other.src)))
      return EADDRINUSE;
  id->state = State::kListen;
  return 0;
}

// A specific address's listener before a wildcard's (cma_find_listener).
// An AF_IB listener matches every IP request for its service ID that
// reaches its device (cma_match_private_data), and refuses it
// (refuses_ip_requests).
uint64_t CmAgent::find_listener(uint32_t ps, const abi::CmAddr& dst) const {
  uint64_t wildcard = 0;
  for (const auto& [h, id] : ids_) {
    if (id.state != State::kListen || id.port_ps != ps || id.src.port != dst.port) continue;
    if (id.src.family != AF_IB && !covers(id.src, id.afonly, dst)) continue;
    if (!is_any(id.src)) return h;
    if (!wildcard) wildcard = h;
  }
  return wildcard;
}

// Over RoCE an AF_IB listener's new id cannot take the port: the kernel
// names it by the listener's family (cma_save_net_info), and
// cma_ib_acquire_dev finds no GID for an AF_IB address (rdma_ip2gid:
// AF_INET and AF_INET6 only), so cma_ib_req_handler fails and the CM
// answers with a REJ, consumer defined (a SIDR REP "reject"); the listener
// hears nothing.
bool CmAgent::refuses_ip_requests(uint64_t listener) const { return ids_.at(listener).src.family == AF_IB; }

bool CmAgent::listens_on(uint64_t sid) const {
  for (const auto& [h, id] : ids_)
    if (id.state == State::kListen && id.port_ps == uint32_t(sid >> 16) && ntohs(id.src.port) == uint16_t(sid))
      return true;
  return false;
}

int CmAgent::connect(Owner* o, const abi::CmConnectRequest& r) {
  Id* id = find_id(o, r.id);
  if (!id) return ENOENT;
  if (id->state != State::kRouteResolved) return EINVAL;
  if (r.param.private_data_len > abi::kCmMaxPrivateData) return EINVAL;
  if (r.param.qp_type) id->qp_type = r.param.qp_type;  // the QP's (an XRC initiator's)
  const bool ud = id->ps == kPsUdp;
  // The application's private data: what the REQ's (SIDR REQ's) field
  // holds less rdma_cm's IP header (an AF_IB id has no route: it never
  // gets here).
  if (r.param.private_data_len > (ud ? mad::kSidrReqUserPrivateData : mad::kReqUserPrivateData))
    return EINVAL;
  if (id->remote) return connect_remote(*id, r.id, r);
  const uint64_t lh = find_listener(id->ps, id->dst);
  if (!lh) {
    // Nobody listens on that port: the REQ's answer is a REJ (invalid
    // service ID), a SIDR REQ's a SIDR REP "unsupported" (cm_match_req).
    post_simple(r.id, ud ? kUnreachable : kRejected, ud ? kSidrUnsupported : kRejInvalidServiceId);
    return 0;
  }
  // No room for the passive side's id (as a busy listener), or an AF_IB
  // listener: REJ 28, SIDR "reject".
  if (refuses_ip_requests(lh) || ids_.size() >= kMaxIds) {
    post_simple(r.id, ud ? kUnreachable : kRejected, ud ? kSidrReject : kRejConsumerDefined);
    return 0;
  }
  const Id& listener = ids_.at(lh);
  Id child;
  child.owner = listener.owner;
  child.channel = listener.channel;
  child.ps = listener.ps;
  // An XRC initiator's request is for an XRC target (cma_ib_new_conn_id).
  child.qp_type = id->qp_type == IBV_QPT_XRC_SEND ? uint32_t(IBV_QPT_XRC_RECV) : id->qp_type;
  child.child = true;
  child.state = State::kRequested;
  child.src = id->dst;
  child.dst = id->src;
  child.peer = r.id;
  uint8_t wire_private[mad::sidr_req::kPrivateData.len];
  const size_t wire_len = request_private(*id, r.param, wire_private);
  const uint64_t ch = next_handle_++;
  id = &ids_.emplace(ch, child).first->second;  // (the map's nodes stay put)
  Id& active = ids_.at(r.id);
  active.state = State::kConnecting;
  active.peer = ch;

  abi::CmEventRecord ev{};
  ev.event = kConnectRequest;
  ev.listen_id = lh;
  ev.src = child.src;
  ev.dst = child.dst;
  ev.param = r.param;
  // What follows rdma_cm's IP header (cma_user_data_offset).
  const size_t skip = sizeof(mad::CmaHdr);
  ev.param.private_data_len = uint8_t(std::min(wire_len - skip, sizeof(ev.param.private_data)));
  std::memcpy(ev.param.private_data, wire_private + skip, ev.param.private_data_len);
  // The receiver's view: the REQ's initiator depth is what it may answer
  // with responder resources, and the other way (cm_format_req_event).
  ev.param.responder_resources = r.param.initiator_depth;
  ev.param.initiator_depth = r.param.responder_resources;
  ev.param.qp_type = uint8_t(child.qp_type);
  std::memcpy(ev.peer_gid, info_.gids[gid_index_for(active.src)].gid, 16);
  ev.local_gid_index = gid_index_for(child.src);
  post(*id, ch, ev);
  return 0;
}

int CmAgent::accept(Owner* o, const abi::CmConnectRequest& r) {
  Id* id = find_id(o, r.id);
  if (!id) return ENOENT;
  if (id->state != State::kRequested) return EINVAL;
  if (r.param.private_data_len > abi::kCmMaxPrivateData) return EINVAL;
  if (r.param.qp_type) id->qp_type = r.param.qp_type;
  if (id->remote) return accept_remote(*id, r.id, r);
  auto peer_it = ids_.find(id->peer);
  if (!id->peer || peer_it == ids_.end()) return ECONNRESET;  // its REJECTED event is queued
  Id& active = peer_it->second;
  abi::CmEventRecord ev{};
  ev.param = r.param;
  ev.param.responder_resources = r.param.initiator_depth;  // cm_format_rep_event
  ev.param.initiator_depth = r.param.responder_resources;
  std::memcpy(ev.peer_gid, info_.gids[gid_index_for(id->src)].gid, 16);
  ev.local_gid_index = gid_index_for(active.src);
  if (id->ps == kPsUdp) {
    // SIDR REP: the active side knows the QP and Q_Key and is done; the
    // passive side keeps no connection (cma_sidr_rep_handler).
    ev.event = kEstablished;
    active.state = State::kRouteResolved;
    active.peer = 0;
    id->state = State::kEstablished;
    id->peer = 0;
    post(active, peer_it->first, ev);
    return 0;
  }
  ev.event = kConnectResponse;
  active.state = State::kRepReceived;
  id->state = State::kRepSent;
  post(active, peer_it->first, ev);
  return 0;
}

int CmAgent::reject(Owner* o, const abi::CmRejectRequest& r) {
  Id* id = find_id(o, r.id);
  if (!id) return ENOENT;
  if (r.private_data_len > abi::kCmMaxRejPrivateData) return EINVAL;
  if (id->state != State::kRequested && id->state != State::kRepReceived) return EINVAL;
  if (id->remote) return reject_remote(*id, r.id, r);
  auto peer_it = ids_.find(id->peer);
  if (id->peer && peer_it != ids_.end()) {
    Id& peer = peer_it->second;
    abi::CmEventRecord ev{};
    const bool ud = id->ps == kPsUdp;
    ev.event = ud ? kUnreachable : kRejected;
    ev.status = ud ? kSidrReject : kRejConsumerDefined;
    ev.param.private_data_len = r.private_data_len;
    std::memcpy(ev.param.private_data, r.private_data, r.private_data_len);
    peer.peer = 0;
    peer.state = peer.child ? State::kDisconnected : State::kRouteResolved;
    post(peer, peer_it->first, ev);
  }
  id->peer = 0;
  id->state = id->child ? State::kDisconnected : State::kRouteResolved;
  return 0;
}

int CmAgent::establish(Owner* o, uint64_t h) {
  Id* id = find_id(o, h);
  if (!id) return ENOENT;
  if (id->state != State::kRepReceived) return EINVAL;
  if (id->remote) return establish_remote(*id, h);
  auto peer_it = ids_.find(id->peer);
  if (!id->peer || peer_it == ids_.end()) return ECONNRESET;
  id->state = State::kEstablished;
  peer_it->second.state = State::kEstablished;
  abi::CmEventRecord ev{};
  ev.event = kEstablished;
  post(peer_it->second, peer_it->first, ev);
  return 0;
}

// rdma_disconnect: both ends see DISCONNECTED (the peer at the DREQ, the
// caller at the DREP). A second call, or one after the peer's, does nothing.
int CmAgent::disconnect(Owner* o, uint64_t h) {
  Id* id = find_id(o, h);
  if (!id) return ENOENT;
  if (id->state == State::kDisconnected || id->state == State::kDreqSent) return 0;
  if (id->remote) return disconnect_remote(*id, h);
  if (id->state != State::kEstablished && id->state != State::kRepSent && id->state != State::kRepReceived)
    return EINVAL;
  auto peer_it = ids_.find(id->peer);
  if (id->peer && peer_it != ids_.end()) {
    peer_it->second.state = State::kDisconnected;
    peer_it->second.peer = 0;
    post_disconnected(peer_it->first);
  }
  id->state = State::kDisconnected;
  id->peer = 0;
  post_disconnected(h);
  return 0;
}

int CmAgent::migrate(Owner* o, uint64_t h, uint64_t channel) {
  Id* id = find_id(o, h);
  if (!id) return ENOENT;
  auto ch = channels_.find(channel);
  if (ch == channels_.end() || ch->second.owner != o) return ENOENT;
  id->channel = channel;
  return 0;
}

void CmAgent::post_simple(uint64_t h, uint32_t event, int32_t status) {
  abi::CmEventRecord ev{};
  ev.event = event;
  ev.status = status;
  post(ids_.at(h), h, ev);
}

uint64_t CmAgent::now_ns() const {
  if (wire_.now_ns) return wire_.now_ns();
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return uint64_t(t.tv_sec) * 1'000'000'000 + uint64_t(t.tv_nsec);
}

void CmAgent::post_disconnected(uint64_t h) {
  post_simple(h, kDisconnected, 0);
  const Id& id = ids_.at(h);
  if (id.ps == kPsUdp || id.qp_type == IBV_QPT_UD) return;
  timewait_.push_back({h, now_ns() + timewait_ns()});
}

// Each time-wait over: TIMEWAIT_EXIT for its id if it is still there and
// still disconnected (cma_ib_handler delivers it in RDMA_CM_DISCONNECT only).
bool CmAgent::poll_timewait(uint64_t now) {
  size_t n = 0;
  for (; n < timewait_.size() && timewait_[n].due_ns <= now; ++n) {
    auto it = ids_.find(timewait_[n].handle);
    if (it != ids_.end() && it->second.state == State::kDisconnected) post_simple(it->first, kTimewaitExit, 0);
  }
  timewait_.erase(timewait_.begin(), timewait_.begin() + ptrdiff_t(n));
  return n > 0;
}

void CmAgent::post(const Id& to, uint64_t to_handle, abi::CmEventRecord ev) {
  ev.id = to_handle;
  if (ev.event != kConnectRequest) {
    ev.src = to.src;
    ev.dst = to.dst;
  }
  auto ch = channels_.find(to.channel);
  if (ch == channels_.end()) return;
  // Non-blocking and under PIPE_BUF: whole or not at all. A client that
  // never reads its channel loses events (counted), not the engine's time;
  // one that is gone (EPIPE: its session is not torn down yet) loses nothing.
  if (write(ch->second.fd, &ev, sizeof(ev)) != ssize_t(sizeof(ev)) && errno != EPIPE) ++events_dropped_;
}

std::vector<uint16_t> CmAgent::listening_ports() const {
  std::vector<uint16_t> ports;
  for (const auto& [handle, id] : ids_)
    if (id.state == State::kListen) ports.push_back(ntohs(id.src.port));
  return ports;
}

}  // namespace uroce::cm
