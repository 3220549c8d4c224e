// Netdev: rtnetlink for the bound interface (see netdev.h). Control path.
#include "net/netdev.h"

#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>

namespace uroce::net {
namespace {

constexpr size_t kBufBytes = 32 << 10;

int netlink_socket(uint32_t groups) {
  const int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | (groups ? SOCK_NONBLOCK : 0), NETLINK_ROUTE);
  if (fd < 0) return -1;
  sockaddr_nl sa{};
  sa.nl_family = AF_NETLINK;
  sa.nl_groups = groups;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Calls f(nlmsghdr*) for each message of one datagram; false at NLMSG_DONE.
template <typename F>
bool each_message(const uint8_t* buf, ssize_t len, F&& f) {
  for (auto* h = reinterpret_cast<const nlmsghdr*>(buf); NLMSG_OK(h, uint32_t(len)); h = NLMSG_NEXT(h, len)) {
    if (h->nlmsg_type == NLMSG_DONE) return false;
    f(h);
  }
  return true;
}

// Asks for a dump of `type` for every family (Body zeroed: AF_UNSPEC) and
// calls f(nlmsghdr*) for each message of the answer; "" or what failed.
template <typename Body, typename F>
std::string dump(int fd, uint32_t seq, uint16_t type, F&& f) {
  struct {
    nlmsghdr h;
    Body body;
  } req{};
  req.h.nlmsg_len = sizeof(req);
  req.h.nlmsg_type = type;
  req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  req.h.nlmsg_seq = seq;
  if (::send(fd, &req, sizeof(req), 0) < 0) return std::string("rtnetlink: ") + std::strerror(errno);
  std::vector<uint8_t> buf(kBufBytes);
  for (bool more = true; more;) {
    const ssize_t len = ::recv(fd, buf.data(), buf.size(), 0);
    if (len < 0) return std::string("rtnetlink: ") + std::strerror(errno);
    more = each_message(buf.data(), len, f);
  }
  return "";
}

// An address of ifindex from an RTM_NEWADDR/RTM_DELADDR, or family 0.
IfAddress parse_address(const nlmsghdr* h, int ifindex) {
  IfAddress a;
  const auto* ifa = static_cast<const ifaddrmsg*>(NLMSG_DATA(h));
  if (int(ifa->ifa_index) != ifindex || (ifa->ifa_family != AF_INET && ifa->ifa_family != AF_INET6)) return a;
  // IFA_LOCAL is the interface's own address (IFA_ADDRESS the peer's on a
  // point-to-point link); IPv6 gives only IFA_ADDRESS.
  const rtattr* local = nullptr;
  const rtattr* address = nullptr;
  int left = int(IFA_PAYLOAD(h));
  for (const rtattr* rta = IFA_RTA(ifa); RTA_OK(rta, left); rta = RTA_NEXT(rta, left)) {
    if (rta->rta_type == IFA_LOCAL) local = rta;
    if (rta->rta_type == IFA_ADDRESS) address = rta;
  }
  const rtattr* use = local ? local : address;
  const size_t n = ifa->ifa_family == AF_INET ? 4 : 16;
  if (!use || RTA_PAYLOAD(use) < n) return a;
  a.family = ifa->ifa_family;
  std::memcpy(a.addr.data(), RTA_DATA(use), n);
  return a;
}

// A neighbour entry of ifindex from an RTM_NEWNEIGH/RTM_DELNEIGH, or family 0.
Neighbour parse_neighbour(const nlmsghdr* h, int ifindex) {
  Neighbour n;
  const auto* nd = static_cast<const ndmsg*>(NLMSG_DATA(h));
  if (nd->ndm_ifindex != ifindex || (nd->ndm_family != AF_INET && nd->ndm_family != AF_INET6)) return n;
  const rtattr* dst = nullptr;
  const rtattr* lladdr = nullptr;
  int left = int(RTM_PAYLOAD(h));
  for (const rtattr* rta = RTM_RTA(nd); RTA_OK(rta, left); rta = RTA_NEXT(rta, left)) {
    if (rta->rta_type == NDA_DST) dst = rta;
    if (rta->rta_type == NDA_LLADDR) lladdr = rta;
  }
  const size_t len = nd->ndm_family == AF_INET ? 4 : 16;
  if (!dst || RTA_PAYLOAD(dst) < len) return n;
  n.family = nd->ndm_family;
  std::memcpy(n.ip.data(), RTA_DATA(dst), len);
  // The states in which the kernel itself sends to the address.
  constexpr uint16_t kUsable = NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PROBE | NUD_PERMANENT | NUD_NOARP;
  if (h->nlmsg_type == RTM_NEWNEIGH && (nd->ndm_state & kUsable) && lladdr && RTA_PAYLOAD(lladdr) == 6) {
    std::memcpy(n.mac.data(), RTA_DATA(lladdr), 6);
    n.usable = true;
  }
  return n;
}

}  // namespace

Netdev::~Netdev() { close(); }

void Netdev::close() {
  if (events_fd_ >= 0) ::close(events_fd_);
  if (request_fd_ >= 0) ::close(request_fd_);
  events_fd_ = request_fd_ = -1;
}

std::string Netdev::read_link() {
  ifindex_ = int(if_nametoindex(name_.c_str()));
  if (ifindex_ <= 0) return "no network interface '" + name_ + "' here: " + std::strerror(errno);
  struct {
    nlmsghdr h;
    ifinfomsg ifi;
  } req{};
  req.h.nlmsg_len = sizeof(req);
  req.h.nlmsg_type = RTM_GETLINK;
  req.h.nlmsg_flags = NLM_F_REQUEST;
  req.h.nlmsg_seq = ++seq_;
  req.ifi.ifi_family = AF_UNSPEC;
  req.ifi.ifi_index = ifindex_;
  if (::send(request_fd_, &req, sizeof(req), 0) < 0) return std::string("rtnetlink: ") + std::strerror(errno);
  std::vector<uint8_t> buf(kBufBytes);
  const ssize_t len = ::recv(request_fd_, buf.data(), buf.size(), 0);
  if (len < 0) return std::string("rtnetlink: ") + std::strerror(errno);
  each_message(buf.data(), len, [&](const nlmsghdr* h) {
    if (h->nlmsg_type != RTM_NEWLINK) return;
    const auto* ifi = static_cast<const ifinfomsg*>(NLMSG_DATA(h));
    int left = int(IFLA_PAYLOAD(h));
    for (const rtattr* rta = IFLA_RTA(ifi); RTA_OK(rta, left); rta = RTA_NEXT(rta, left))
      if (rta->rta_type == IFLA_ADDRESS && RTA_PAYLOAD(rta) == 6) std::memcpy(mac_.data(), RTA_DATA(rta), 6);
  });
  return "";
}

std::string Netdev::read_addresses() {
  std::vector<IfAddress> found;
  std::string err = dump<ifaddrmsg>(request_fd_, ++seq_, RTM_GETADDR, [&](const nlmsghdr* h) {
    if (h->nlmsg_type != RTM_NEWADDR) return;
    if (IfAddress a = parse_address(h, ifindex_); a.family) found.push_back(a);
  });
  if (err.empty()) addresses_ = std::move(found);
  return err;
}

std::string Netdev::open_static(const std::string& iface) {
  name_ = iface;
  request_fd_ = netlink_socket(0);
  if (request_fd_ < 0) return std::string("rtnetlink socket: ") + std::strerror(errno);
  std::string err = read_link();
  if (err.empty()) err = read_addresses();
  if (!err.empty()) ifindex_ = 0;
  return err;
}

std::string Netdev::open(const std::string& iface) {
  if (std::string err = open_static(iface); !err.empty()) return err;
  // Subscribe before the dump answers are used: a change between the two
  // is then seen as a notification (read_events re-reads on overflow).
  events_fd_ = netlink_socket(RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR | RTMGRP_NEIGH);
  if (events_fd_ < 0) return std::string("rtnetlink subscription: ") + std::strerror(errno);
  return read_addresses();
}

bool Netdev::read_events(const std::function<void(const Neighbour&)>& on_neighbour) {
  if (events_fd_ < 0) return false;
  std::vector<IfAddress> before = addresses_;
  std::vector<uint8_t> buf(kBufBytes);
  for (;;) {
    const ssize_t len = ::recv(events_fd_, buf.data(), buf.size(), MSG_DONTWAIT);
    if (len < 0) {
      if (errno == ENOBUFS) {  // notifications lost: the list is read afresh
        read_addresses();
        continue;
      }
      break;
    }
    each_message(buf.data(), len, [&](const nlmsghdr* h) {
      if (h->nlmsg_type == RTM_NEWADDR || h->nlmsg_type == RTM_DELADDR) {
        const IfAddress a = parse_address(h, ifindex_);
        if (!a.family) return;
        std::erase(addresses_, a);
        if (h->nlmsg_type == RTM_NEWADDR) addresses_.push_back(a);
      } else if (h->nlmsg_type == RTM_NEWNEIGH || h->nlmsg_type == RTM_DELNEIGH) {
        if (Neighbour n = parse_neighbour(h, ifindex_); n.family) on_neighbour(n);
      }
    });
  }
  // An address re-announced (a lifetime refresh) keeps its place.
  if (addresses_.size() == before.size() &&
      std::is_permutation(addresses_.begin(), addresses_.end(), before.begin()))
    addresses_ = std::move(before);
  return addresses_ != before;
}

void Netdev::dump_neighbours(const std::function<void(const Neighbour&)>& on_neighbour) {
  if (request_fd_ < 0) return;
  dump<ndmsg>(request_fd_, ++seq_, RTM_GETNEIGH, [&](const nlmsghdr* h) {
    if (h->nlmsg_type != RTM_NEWNEIGH) return;
    if (Neighbour n = parse_neighbour(h, ifindex_); n.family && n.usable) on_neighbour(n);
  });
}

bool Netdev::resolve(int family, const uint8_t* ip) {
  if (request_fd_ < 0 || resolve_refused_) return false;
  struct {
    nlmsghdr h;
    ndmsg nd;
    rtattr dst;
    uint8_t addr[16];
  } req{};
  const size_t len = family == AF_INET ? 4 : 16;
  req.h.nlmsg_len = uint32_t(NLMSG_LENGTH(sizeof(ndmsg)) + RTA_LENGTH(len));
  req.h.nlmsg_type = RTM_NEWNEIGH;
  // NTF_USE: the kernel's neigh_add runs neigh_event_send, i.e. resolves
  // the entry (creating it, NLM_F_CREATE) as for a packet it is to send.
  req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_CREATE | NLM_F_ACK;
  req.h.nlmsg_seq = ++seq_;
  req.nd.ndm_family = uint8_t(family);
  req.nd.ndm_ifindex = ifindex_;
  req.nd.ndm_state = NUD_NONE;
  req.nd.ndm_flags = NTF_USE;
  req.dst.rta_type = NDA_DST;
  req.dst.rta_len = uint16_t(RTA_LENGTH(len));
  std::memcpy(req.addr, ip, len);
  if (::send(request_fd_, &req, req.h.nlmsg_len, 0) < 0) return false;
  alignas(nlmsghdr) uint8_t buf[1024];
  const ssize_t n = ::recv(request_fd_, buf, sizeof(buf), 0);
  if (n < ssize_t(NLMSG_LENGTH(sizeof(nlmsgerr)))) return false;
  const auto* h = reinterpret_cast<const nlmsghdr*>(buf);
  const int err = h->nlmsg_type == NLMSG_ERROR ? -static_cast<const nlmsgerr*>(NLMSG_DATA(h))->error : 0;
  if (err == EPERM || err == EACCES) resolve_refused_ = true;  // asked once, then ARP/NDP of our own
  return err == 0;
}

}  // namespace uroce::net
