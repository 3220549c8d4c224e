// The kernel network interface a device is bound to (uroced --netdev IF, as
// `rdma link add rxe0 type rxe netdev IF`), seen through rtnetlink: its
// index, MAC and MTU, its IPv4/IPv6 addresses as they come and go
// (RTM_NEWADDR/RTM_DELADDR) and the kernel's neighbour table
// (RTM_NEWNEIGH/RTM_DELNEIGH), so the device's GIDs are the interface's
// addresses and its neighbours the kernel's.
//
// Control path: the engine reads fd() from its event loop (Boost.Asio) and
// calls read_events(); nothing here runs per packet except resolve(), which
// the device calls once per unresolved destination and retry.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "net/neighbour_cache.h"

namespace uroce::net {

struct IfAddress {
  int family = 0;                 // AF_INET or AF_INET6
  std::array<uint8_t, 16> addr{};  // IPv4 in the first 4 bytes
  bool operator==(const IfAddress&) const = default;
};

// A kernel neighbour entry of the interface: usable (has a link-layer
// address in a state the kernel sends with) or gone.
struct Neighbour {
  int family = 0;
  std::array<uint8_t, 16> ip{};
  MacAddr mac{};
  bool usable = false;
};

class Netdev {
 public:
  Netdev() = default;
  Netdev(const Netdev&) = delete;
  Netdev& operator=(const Netdev&) = delete;
  ~Netdev();

  // Finds iface (in this thread's network namespace), reads its MAC, MTU and
  // addresses, and subscribes to its address and neighbour changes. "" or
  // the reason it failed.
  std::string open(const std::string& iface);
  // For an interface the device is bound to without a wire (lo): its index
  // and addresses, no subscription.
  std::string open_static(const std::string& iface);
  bool is_open() const { return ifindex_ > 0; }

  const std::string& name() const { return name_; }
  int ifindex() const { return ifindex_; }
  const MacAddr& mac() const { return mac_; }
  // The interface's addresses, in the order the kernel lists them.
  const std::vector<IfAddress>& addresses() const { return addresses_; }

  // Readable when the kernel has news; -1 without a subscription.
  int fd() const { return events_fd_; }
  // Reads every pending notification: addresses() is updated (returns true
  // if it changed), each neighbour entry of the interface goes to
  // on_neighbour. A lost notification (ENOBUFS) re-reads the addresses.
  bool read_events(const std::function<void(const Neighbour&)>& on_neighbour);
  // The kernel's current neighbour entries of the interface.
  void dump_neighbours(const std::function<void(const Neighbour&)>& on_neighbour);
  // Asks the kernel to resolve ip as it would for its own traffic
  // (RTM_NEWNEIGH with NTF_USE); the answer comes as an RTM_NEWNEIGH
  // notification. False if the kernel refused (no CAP_NET_ADMIN): the
  // caller resolves it itself then.
  bool resolve(int family, const uint8_t* ip);

 private:
  std::string read_link();
  std::string read_addresses();
  void close();

  std::string name_;
  int ifindex_ = 0;
  MacAddr mac_{};
  std::vector<IfAddress> addresses_;
  int events_fd_ = -1;   // RTMGRP_*_IFADDR, RTMGRP_NEIGH
  int request_fd_ = -1;  // dumps and requests, answered in turn
  uint32_t seq_ = 0;
  bool resolve_refused_ = false;
};

}  // namespace uroce::net
