// AF_UNIX SOCK_SEQPACKET for Asio: Boost 1.74 has no local::seq_packet_protocol,
// so the generic protocol is used with a sockaddr_un endpoint.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>
#include <string>
#include <utility>

#include <boost/asio/basic_socket_acceptor.hpp>
#include <boost/asio/generic/seq_packet_protocol.hpp>

namespace uroce::emulator {

using SeqPacket = boost::asio::generic::seq_packet_protocol;

inline SeqPacket::endpoint unix_endpoint(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  return SeqPacket::endpoint(&addr, sizeof(addr), 0);
}

}  // namespace uroce::emulator
