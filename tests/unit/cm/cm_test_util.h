// What the CM agent's tests (cm_agent_test.cc, cm_wire_test.cc) share:
// <rdma/rdma_cma.h>'s numbers and an IPv4 address as the agent takes it.
#pragma once

#include <arpa/inet.h>
#include <sys/socket.h>

#include <cstdint>

#include "uroce/abi.h"

namespace uroce::cm::cm_test {

constexpr uint32_t kPsTcp = 0x0106, kPsUdp = 0x0111, kPsIb = 0x013F;  // RDMA_PS_TCP, _UDP, _IB
enum : uint32_t { kAddrResolved = 0, kRouteResolved = 2, kConnectRequest = 4, kConnectResponse = 5,
                  kUnreachable = 7, kRejected = 8, kEstablished = 9, kDisconnected = 10, kAddrChange = 14,
                  kTimewaitExit = 15 };  // enum rdma_cm_event_type

inline abi::CmAddr v4(const char* ip, uint16_t port) {
  abi::CmAddr a{};
  a.family = AF_INET;
  a.port = htons(port);
  inet_pton(AF_INET, ip, a.addr);
  return a;
}

}  // namespace uroce::cm::cm_test
