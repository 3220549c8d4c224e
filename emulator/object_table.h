// One session's handles (the kernel's per-file uobject table): what a client
// names in a control request, mapped to the device object it created. A
// client can only reach objects through its own table, so another session's
// handle or a stale one is ENOENT, never another client's object.
//
// Handles come from one engine-wide counter, so they are unique across
// sessions and types and are not reused until it wraps (2^32 creations):
// a handle of another ibv_context never names an object of this one.
#pragma once

#include <cerrno>
#include <cstdint>
#include <unordered_map>

#include "emulator/methods.h"

namespace uroce::emulator {

class ObjectTable {
 public:
  struct Entry {
    ObjType type;
    uint64_t id;  // the device's id: PD/CQ/SRQ index, MR key, QPN (id << 32 | QPN if opened)
  };

  // A new handle for a device object of this session.
  uint32_t insert(ObjType type, uint64_t id) {
    uint32_t h;
    do {
      h = next_++;
    } while (h == 0 || entries_.count(h));
    entries_.emplace(h, Entry{type, id});
    return h;
  }
  // 0 and the device id, or the errno of a handle that names no live object
  // of this session (`missing`), or EINVAL for one of another type
  // (rdma_lookup_get_uobject: "uobj->uapi_object != obj").
  int lookup(uint64_t handle, ObjType type, int missing, uint64_t* id) const {
    auto it = handle <= UINT32_MAX ? entries_.find(uint32_t(handle)) : entries_.end();
    if (it == entries_.end()) return missing;
    if (it->second.type != type) return EINVAL;
    *id = it->second.id;
    return 0;
  }
  void erase(uint64_t handle) { entries_.erase(uint32_t(handle)); }
  size_t size() const { return entries_.size(); }

 private:
  static inline uint32_t next_ = 1;  // engine-wide: every session draws from it
  std::unordered_map<uint32_t, Entry> entries_;
};

}  // namespace uroce::emulator
