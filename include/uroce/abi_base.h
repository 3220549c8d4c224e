// The ABI between the provider (libibverbs.so.1 inside a client process)
// and the engine (uroced), part 0: its version and the constants the three
// parts share. The parts, by concern, each with its static layout checks:
//   uroce/abi_rings.h    the shared-memory queues (work requests, completions,
//                        doorbells, the engine's shared page)
//   uroce/abi_control.h  the control messages on the Unix socket
//   uroce/abi_cm.h       the connection manager's messages (librdmacm)
// uroce/abi.h includes them all. The provider includes these headers and
// nothing else from the engine; docs/abi.md has the version history.
//
// Rules: fixed-width types, offsets never pointers, explicit padding,
// power-of-two rings, producer and consumer indices on separate cache lines.
// Everything a client writes into shared memory is untrusted by the engine.
#pragma once

#include <time.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace uroce::abi {

constexpr uint32_t kMagic = 0x434f5255;  // "UROC"
// The ABI's version: a client and an engine of different versions refuse
// each other at hello. Each change and its number: docs/abi.md.
constexpr uint32_t kVersion = 21;
// IB_UVERBS_DEVICE_ATOMIC_WRITE in device_cap_flags_ex (rdma-core 45's
// kernel-headers/rdma/ib_user_verbs.h; Debian 12's headers predate it): the
// device executes IBV_WR_ATOMIC_WRITE, whose 8 bytes travel in
// SendWqe::compare_add. The provider offers IBV_QP_EX_WITH_ATOMIC_WRITE only
// to an engine that reports it.
constexpr uint64_t kDeviceAtomicWrite = 1ull << 40;
// The device's local CA ACK delay (ibv_device_attr.local_ca_ack_delay, as
// rxe's RXE_LOCAL_CA_ACK_DELAY), which a REP carries as its Target ACK Delay
// (Linux's cm_format_rep: cm_dev->ack_delay).
constexpr uint8_t kLocalCaAckDelay = 15;
constexpr size_t kCacheLine = 64;
constexpr size_t kMaxDeviceName = 64;
constexpr size_t kMaxGids = 16;
constexpr size_t kMaxCtlMsg = 4096;  // largest control message, either way
constexpr size_t kMaxCtlFds = 4;

}  // namespace uroce::abi
