// The device's objects other than QPs: the owning client, PD, MR, completion
// channel and CQ, with typed tables whose handles are indices.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device/memory.h"
#include "device/params.h"
#include "device/queue_memory.h"
#include "device/tag_matching.h"
#include "uroce/abi.h"

namespace uroce::device {

// One client process (an emulator session). The engine reaches its memory and
// posts its async events; every object it creates records its owner.
struct Owner {
  uint64_t id = 0;
  ProcessMemory mem;
  int async_fd = -1;  // write end of the client's async event pipe (non-blocking)
  std::string comm;   // process name, for status
  uint64_t async_dropped = 0;
  SharedBudget shared_budget{kMaxSharedBytesPerOwner};  // its memfds the engine maps
  void post_async(uint32_t event_type, uint64_t cookie);
};

// Objects live in tables whose handles are indices (0 means none).
template <typename T>
class Table {
 public:
  Table() : slots_(1) {}
  uint32_t insert(std::unique_ptr<T> obj) {
    uint32_t idx;
    if (!free_.empty()) {
      idx = free_.back();
      free_.pop_back();
      slots_[idx] = std::move(obj);
    } else {
      idx = uint32_t(slots_.size());
      slots_.push_back(std::move(obj));
    }
    ++count_;
    return idx;
  }
  T* get(uint64_t idx) const { return idx < slots_.size() ? slots_[idx].get() : nullptr; }
  void erase(uint32_t idx) {
    if (idx < slots_.size() && slots_[idx]) {
      slots_[idx].reset();
      free_.push_back(idx);
      --count_;
    }
  }
  // Erases without freeing the index: insert does not hand it out again
  // until release(idx) (a QPN in time-wait).
  void erase_held(uint32_t idx) {
    if (idx < slots_.size() && slots_[idx]) {
      slots_[idx].reset();
      --count_;
    }
  }
  void release(uint32_t idx) {
    if (idx < slots_.size() && !slots_[idx]) free_.push_back(idx);
  }
  size_t count() const { return count_; }
  template <typename Fn>
  void for_each(Fn fn) const {
    for (uint32_t i = 1; i < slots_.size(); ++i)
      if (slots_[i]) fn(i, *slots_[i]);
  }

 private:
  std::vector<std::unique_ptr<T>> slots_;
  std::vector<uint32_t> free_;
  size_t count_ = 0;
};

struct Pd {
  Owner* owner = nullptr;
  uint32_t refs = 0;  // MRs and QPs using it
};

// Device memory (ibv_alloc_dm; device/device_memory.cc): a sealed memfd the
// engine owns and the client maps; its MRs map it too (Mr::pages).
struct Dm {
  Owner* owner = nullptr;
  int fd = -1;
  uint64_t length = 0;      // what the client asked for: the bounds of its MRs
  uint64_t map_length = 0;  // the memfd's size, whole pages
  uint32_t mrs = 0;         // MRs on it: ibv_free_dm is EBUSY until they are gone
};

struct Mr {
  Owner* owner = nullptr;
  uint32_t pd = 0;
  uint32_t key = 0;   // lkey == rkey: index << 8 | generation
  uint64_t iova = 0;  // what the peer addresses
  uint64_t addr = 0;  // where it lives in the owner's address space
  uint64_t length = 0;
  uint32_t access = 0;  // enum ibv_access_flags
  uint32_t windows = 0;  // memory windows bound to it
  uint32_t dm = 0;       // the device memory it covers (ibv_reg_dm_mr), 0: none
  std::unique_ptr<SharedPages> pages;  // its pages the engine maps, if any

  // Owner bytes [owner_addr, owner_addr + len) reached through this MR.
  RemoteSpan span(uint64_t owner_addr, size_t len) const { return {owner_addr, len, pages.get()}; }
};

// A memory window (IBA 10.6.7; device/mw.cc): a range of an MR that remote
// peers reach through the window's own R_Key, with its own rights.
// Type 1 windows are bound by ibv_bind_mw, always valid (bound to nothing
// until then: no access). Type 2 windows are free until a bind WQE binds
// them to the posting QP (type 2B: only that QP reaches them, and type 2A's
// QP-number rule is the same check here), free again after LOCAL_INV or
// SEND_WITH_INV.
struct Mw {
  Owner* owner = nullptr;
  uint32_t pd = 0;
  uint32_t rkey = 0;  // (kMwIndexBase + index) << 8 | key part
  ibv_mw_type type = IBV_MW_TYPE_1;
  bool bound = false;   // type 2: valid (not free)
  uint32_t mr_key = 0;  // the region, 0: none (length 0)
  uint32_t qpn = 0;     // type 2: the QP it is bound to; 0 once that QP is gone
  uint64_t addr = 0;    // window start in the region's address space (iova)
  uint64_t length = 0;
  uint32_t access = 0;  // IBV_ACCESS_REMOTE_* and IBV_ACCESS_ZERO_BASED
};

// An indirect memory key (mlx5dv_create_mkey; device/mkey.cc): free until a
// memory-registration WQE gives it a layout over regions of its PD, valid
// until LOCAL_INV (or SEND_WITH_INV, with remote invalidation) frees it.
// Zero-based: [0, length) are the layout's bytes.
struct MkeyEntry {
  uint64_t addr;          // in the region's address space (iova)
  uint32_t bytes;         // taken from addr
  uint32_t lkey;          // the region
  uint64_t stride;        // interleaved: how far addr moves each repeat
};
struct Mkey {
  Owner* owner = nullptr;
  uint32_t pd = 0;
  uint32_t key = 0;  // (kMkeyIndexBase + index) << 8
  uint32_t num_desc = 0;
  bool remote_invalidate = false;
  bool valid = false;  // not free
  uint32_t access = 0;
  uint32_t repeat_count = 0;  // 0: a list
  uint64_t unit = 0;          // interleaved: the bytes of one repeat
  uint64_t length = 0;
  std::vector<MkeyEntry> entries;  // reserved to num_desc at creation: no allocation after
};

// An address handle: its address vector lives in the client (it travels in
// each UD work request); the device counts it against max_ah and holds its PD.
struct Ah {
  Owner* owner = nullptr;
  uint32_t pd = 0;
};

struct CompChannel {
  Owner* owner = nullptr;
  int fd = -1;  // write end of the client's channel pipe (non-blocking)
  uint32_t refs = 0;
  ~CompChannel();
};

struct Cq {
  Owner* owner = nullptr;
  uint64_t cookie = 0;
  QueueMemory mem;
  RingView ring;
  uint32_t prod = 0;      // engine's own producer index (never read back)
  uint32_t capacity = 0;  // usable entries
  uint32_t channel = 0;   // handle, 0: none
  uint32_t refs = 0;      // QPs attached
  bool error = false;     // overflowed: IBV_EVENT_CQ_ERR raised
  bool timestamps = false;  // abi::kCqTimestamps: stamp each entry
  bool ignore_overrun = false;  // abi::kCqIgnoreOverrun
  uint64_t last_wallclock_ns = 0;  // the wall clock may step back: entries never do
  uint64_t completions = 0;
  // mlx5 mode, once mlx5dv_init_obj asked for it (Device::cq_to_mlx5): the
  // ring holds mlx5 CQEs (uroce/mlx5_cqe.h) and is armed through its UAR
  // page, as a ConnectX's (abi::kMlx5Cq*Offset).
  struct Mlx5Ring {
    uint8_t* cqes = nullptr;
    uint32_t cqe_size = 64;
    std::atomic<uint32_t>* dbrec = nullptr;    // [0] consumer index, [1] arm command (big-endian)
    std::atomic<uint64_t>* doorbell = nullptr;  // the UAR's CQ doorbell: arm commands
    bool armed = false;           // an arm command taken, no event raised for it yet
    bool solicited_only = false;  // ... MLX5_CQ_DB_REQ_NOT_SOL
    uint32_t arm_ci = 0;          // ... for CQEs from this index (24 bits)
    uint32_t solicited_end = 0;   // one past the last solicited or error CQE written
  };
  std::unique_ptr<Mlx5Ring> mlx5;
};

// An XRC domain. Processes that open the same file share it (keyed by the
// file's device and inode); fd -1 makes a private one.
struct Xrcd {
  bool has_inode = false;
  uint64_t dev = 0, ino = 0;
  uint32_t handles = 0;  // open handles, all processes
  uint32_t users = 0;    // XRC SRQs and XRC_RECV QPs living in it
};

// One process's handle on a domain (ibv_open_xrcd); ibv_close_xrcd fails
// with EBUSY while objects made through it exist.
struct XrcdHandle {
  Owner* owner = nullptr;
  uint32_t xrcd = 0;
  uint32_t objects = 0;
};

// Shared receive queue: a ring of receive WQEs that several QPs consume in
// FIFO order (basic), or that XRC requests name by number (XRC).
struct Srq {
  Owner* owner = nullptr;
  uint64_t cookie = 0;
  ibv_srq_type type = IBV_SRQT_BASIC;
  uint32_t pd = 0;
  uint32_t xrcd = 0;         // XRC: the domain
  uint32_t xrcd_handle = 0;  // XRC: the handle it was made through
  uint32_t cq = 0;           // XRC and TM: every receive completes here
  QueueMemory mem;
  RingView ring;
  uint32_t head = 0;     // engine's consumer index
  uint32_t max_wr = 0;   // usable depth: ring slots - 1
  uint32_t max_sge = 0;
  uint32_t limit = 0;    // armed low watermark, 0: disarmed
  uint32_t refs = 0;     // QPs created with it
  uint64_t consumed = 0;
  std::unique_ptr<TagList> tm;  // IBV_SRQT_TM: its tag list
  // IBV_SRQT_TM: the list-operation ring and freed handles (abi::TmOpsHeader),
  // with the engine's own copies of what it must not reread from the client.
  QueueMemory tm_mem;
  abi::TmOpsHeader* tm_hdr = nullptr;
  uint32_t tm_log2_ops = 0, tm_log2_freed = 0;
  uint32_t tm_consumer = 0, tm_answered = 0;
  uint32_t tm_cq_seen = 0;  // the CQ's consumer at the last retire
  // IBV_SRQT_TM in mlx5's format: the list entry the next append fills
  // (the index the previous TAG_MATCHING append named; mlx5's list starts at 0).
  uint32_t tm_append_slot = 0;
  // mlx5 mode, after mlx5dv_init_obj (Device::srq_to_mlx5, device/
  // mlx5_srq.cc): WQEs in mlx5's linked list, which the program fills and
  // links itself (abi::kMlx5Srq*Offset). `head` then counts the WQEs taken
  // (16 bits, as the doorbell record's count).
  struct Mlx5List {
    QueueMemory mem;
    const uint8_t* wqes = nullptr;
    uint32_t stride = 0;
    const std::atomic<uint32_t>* dbrec = nullptr;  // WQEs posted, big-endian
    bool started = false;  // a WQE was taken: the next is the one `last` links to
    uint32_t last = 0;     // the index of the WQE taken last
  };
  std::unique_ptr<Mlx5List> mlx5;
};

}  // namespace uroce::device
