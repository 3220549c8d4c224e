// The frame matcher of flow steering: the fields a steering rule may match
// (abi::FlowKey), pulled out of an Ethernet frame once, and the masked
// compare of a rule against them (man ibv_create_flow: a rule matches when
// (field & mask) == (value & mask) for every field, and its specs' protocols
// are present). Also the receive checksum check behind IBV_WC_IP_CSUM_OK.
#pragma once

#include <cstddef>
#include <cstdint>

#include "uroce/abi.h"

namespace uroce::net {

struct FrameFields {
  abi::FlowKey key{};     // unused fields 0
  uint32_t protocols = 0; // abi::FlowProto bits present in the frame
  bool multicast = false; // group bit of the destination MAC (broadcast too)
  uint16_t l3_off = 0;    // IP header, 0: none
  uint16_t l4_off = 0;    // TCP/UDP header, 0: none
};

// Parses Ethernet [+ 802.1Q tags] + IPv4/IPv6 + TCP/UDP as far as the frame
// holds them. Never reads past len.
FrameFields frame_fields(const uint8_t* frame, size_t len);

// A rule's match: values already masked, and the protocols its specs name.
struct FrameMatch {
  abi::FlowKey value{};
  abi::FlowKey mask{};
  uint32_t protocols = 0;
};

inline bool frame_matches(const FrameMatch& m, const FrameFields& f) {
  if ((f.protocols & m.protocols) != m.protocols) return false;
  // Eight 64-bit words: no per-field branches.
  uint64_t k[8], v[8], mk[8];
  static_assert(sizeof(abi::FlowKey) == sizeof(k));
  __builtin_memcpy(k, &f.key, sizeof(k));
  __builtin_memcpy(v, &m.value, sizeof(v));
  __builtin_memcpy(mk, &m.mask, sizeof(mk));
  uint64_t diff = 0;
  for (int i = 0; i < 8; ++i) diff |= (k[i] & mk[i]) ^ v[i];
  return diff == 0;
}

// IBV_WC_IP_CSUM_OK as mlx5 reports it (rdma-core providers/mlx5/cq.c
// get_csum_ok): an IPv4 frame whose header checksum and TCP/UDP checksum
// both verify (a UDP checksum of 0 means none was sent: OK). IPv6 never.
bool ipv4_l4_checksums_ok(const uint8_t* frame, size_t len, const FrameFields& f);

// Fills the IPv4 header checksum and the TCP/UDP checksum of a frame
// (IBV_SEND_IP_CSUM). False if the frame is not IPv4 TCP/UDP.
bool fill_ipv4_l4_checksums(uint8_t* frame, size_t len, const FrameFields& f);

}  // namespace uroce::net
