// Receive work queues (ibv_create_wq, IBV_WQT_RQ), receive indirection
// tables and the hashing of RSS QPs (man ibv_create_wq(3) and
// ibv_create_qp_ex(3), the kernel's drivers/infiniband/hw/mlx5/qp.c). A WQ
// is a ring of
// receive WQEs like an SRQ's, with its own CQ and state; an indirection
// table lists WQs; an RSS QP (a raw packet QP created with an indirection
// table) hashes each frame its flows take and hands it to one of them.
#pragma once

#include <infiniband/verbs.h>

#include <endian.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "device/objects.h"
#include "net/frame_match.h"
#include "net/packet.h"
#include "net/toeplitz.h"

namespace uroce::device {

class Device;

// mlx5 numbers RQs apart from QPs; uroce keeps WQ numbers out of the QPN
// range its tables give (a completion's qp_num names one or the other).
constexpr uint32_t kWqnBase = 0x800000;
constexpr uint32_t kMaxWqWr = 1u << 15;
constexpr uint32_t kMaxRwqIndTables = 1024;
constexpr uint32_t kMaxRwqIndTableSize = 1u << abi::kMaxLogIndTableSize;
// Delay drop: mlx5's timeout, 100 ms by default and at most (kernel
// hw/mlx5/mlx5_ib.h, MLX5_MAX_DELAY_DROP_TIMEOUT_MS);
// the frames one WQ may hold while it has no receive posted.
constexpr uint64_t kDelayDropTimeoutNs = 100'000'000;
constexpr uint32_t kDelayDropFrames = 256;
constexpr uint32_t kEndPaddingAlign = 64;  // PCI write end padding: a cache line

constexpr uint32_t kKnownWqFlags = IBV_WQ_FLAGS_CVLAN_STRIPPING | IBV_WQ_FLAGS_SCATTER_FCS |
                                   IBV_WQ_FLAGS_DELAY_DROP | IBV_WQ_FLAGS_PCI_WRITE_END_PADDING;

// A frame delay drop holds until a receive is posted or its time is up.
struct HeldFrame {
  net::Packet* p = nullptr;
  uint32_t tag = 0;
  bool has_tag = false;
  uint64_t expires_ns = 0;
};

struct Wq {
  Owner* owner = nullptr;
  uint64_t cookie = 0;
  uint32_t wqn = 0;
  uint32_t pd = 0, cq = 0;
  QueueMemory mem;
  RingView ring;
  uint32_t head = 0;  // engine's consumer index
  uint32_t max_sge = 0;
  ibv_wq_state state = IBV_WQS_RESET;
  uint32_t flags = 0;  // enum ibv_wq_flags
  uint32_t refs = 0;   // entries of indirection tables naming it
  std::array<HeldFrame, kDelayDropFrames> held{};
  uint32_t held_first = 0, held_count = 0;
  uint64_t received = 0, no_wqe_drops = 0, not_ready_drops = 0, delay_drop_expired = 0, flushed = 0;
  uint64_t errors = 0;  // receives completed with an error (each took the WQ to ERR)
  // mlx5's format (mlx5dv_init_obj with MLX5DV_OBJ_RWQ, Device::wq_to_mlx5):
  // the WQEs and the doorbell record the program writes, instead of `ring`.
  struct Mlx5Rq {
    QueueMemory mem;
    std::atomic<uint32_t>* dbrec = nullptr;  // [0]: WQEs posted, 16 bits, big-endian
    const uint8_t* wqes = nullptr;
    uint32_t cnt = 0, stride = 0;
  };
  std::unique_ptr<Mlx5Rq> mlx5;

  // Where the posted receives end (free-running, as head).
  uint32_t posted() const {
    if (mlx5) [[unlikely]]
      return head + ((be32toh(mlx5->dbrec[0].load(std::memory_order_acquire)) - head) & 0xffff);
    return ring.hdr->producer.load(std::memory_order_acquire);
  }
  // The receives the queue holds at most.
  uint32_t capacity() const { return mlx5 ? mlx5->cnt : ring.size(); }
  // The receives up to head were taken (uroce's ring has a consumer index).
  void consumed(uint32_t upto) {
    if (!mlx5) ring.hdr->consumer.store(upto, std::memory_order_release);
  }
};

struct RwqIndTable {
  Owner* owner = nullptr;
  uint32_t log_size = 0;
  std::vector<uint32_t> wqs;  // device WQ handles, 2^log_size of them
  uint32_t refs = 0;          // RSS QPs using it
};

// An RSS QP's hashing (ibv_rx_hash_conf).
struct RssHash {
  uint32_t ind_table = 0;
  uint64_t fields = 0;  // enum ibv_rx_hash_fields
  alignas(4) uint8_t key[net::kToeplitzKeyBytes] = {};
};

// The bytes the Toeplitz hash runs over (the Microsoft RSS specification):
// the selected fields the frame has, in mlx5's order src IP, dst IP, src
// port, dst port, network order. Returns their length (0: nothing selected
// is present).
size_t rss_hash_input(const net::FrameFields& f, uint64_t fields, uint8_t* out);

// The indirection table entry a hash selects: its low bits (Microsoft RSS).
inline uint32_t rss_entry(uint32_t hash, uint32_t log_size) { return hash & ((1u << log_size) - 1); }

// A received frame as a WQ's (or raw QP's) receive flags place it
// (device/wq_receive.cc): CVLAN stripping, scatter FCS. `out` holds at
// least len + 4 bytes.
struct ShapedFrame {
  uint32_t len = 0;    // byte_len: with the FCS, without end padding
  uint16_t cvlan = 0;  // the stripped TCI, 0 when none was
};
ShapedFrame shape_received_frame(uint32_t wq_flags, const uint8_t* frame, uint32_t len, uint8_t* out);
// The raw packet QP creation flags that are WQ flags of its receive queue
// (mlx5: IBV_QP_CREATE_SCATTER_FCS, CVLAN_STRIPPING, PCI_WRITE_END_PADDING);
// false for a flag that is none of them.
bool raw_qp_rx_flags(uint32_t create_flags, uint32_t* wq_flags);
// PCI write end padding after a frame of len bytes placed in sge.
void pad_receive_end(const Device& dev, const Owner& owner, const abi::Sge* sge, uint32_t num_sge, uint32_t len);

// ibv_create_qp_ex's RSS checks (mlx5 create_rss_raw_qp_tir): 0 or the errno.
int check_rss(uint64_t fields, uint32_t function, uint32_t key_len, uint32_t log_size);

}  // namespace uroce::device
