// Indirect memory keys (mlx5dv_create_mkey with
// MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT; rdma-core providers/mlx5/verbs.c
// _mlx5dv_create_mkey, qp.c mlx5_send_wr_mr_list / _mr_interleaved /
// _mkey_configure, man mlx5dv_wr_post(3)). An mkey is created free; a
// memory-registration WQE (kWrUmr) on a QP of its PD gives it a layout over
// regions of that PD and its rights; LOCAL_INV frees it again, as does a
// SEND_WITH_INV naming it when it was created with remote invalidation.
// Local SGEs (sends, receives) address it zero-based: an SGE's address is an
// offset into the layout's bytes, which the device gathers from and
// scatters to the regions' bytes the layout names. Remote access through
// its R_Key is not offered: the responder's windows lookup finds no window
// at its index and answers as for a bad R_Key.
#include <cerrno>

#include "device/device.h"

namespace uroce::device {

namespace {

constexpr uint32_t kMkeyAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

uint32_t mkey_index(uint32_t key) { return (key >> 8) - kMkeyIndexBase; }

}  // namespace

Mkey* Device::find_mkey(uint32_t key) const {
  if (!is_mkey_key(key)) return nullptr;
  Mkey* m = mkeys_.get(mkey_index(key));
  return m && m->key == key ? m : nullptr;
}

// ---------------------------------------------------------------- control

Result<uint32_t> Device::create_mkey(Owner* o, uint32_t pd_handle, uint32_t flags, uint32_t max_entries,
                                     uint32_t* key, uint32_t* num_desc) {
  Pd* pd = pds_.get(pd_handle);
  if (!pd || pd->owner != o) return {EINVAL};
  if (flags & ~abi::kMkeyRemoteInvalidate) return {EOPNOTSUPP};
  // mlx5 rounds the entries up to 4 (verbs.c: align(max_entries, 4)).
  const uint32_t desc = (max_entries + 3) & ~3u;
  if (desc == 0 || desc > kMaxMkeyEntries) return {EINVAL};
  if (mkeys_.count() >= kMaxMkey) return {ENOMEM};
  auto m = std::make_unique<Mkey>();
  m->owner = o;
  m->pd = pd_handle;
  m->num_desc = desc;
  m->remote_invalidate = flags & abi::kMkeyRemoteInvalidate;
  m->entries.reserve(desc);
  Mkey* raw = m.get();
  const uint32_t idx = mkeys_.insert(std::move(m));
  raw->key = (kMkeyIndexBase + idx) << 8;  // key part 0, as mlx5's (mkey_7_0)
  ++pd->refs;  // ibv_dealloc_pd with mkeys is EBUSY
  *key = raw->key;
  *num_desc = desc;
  return {0, idx};
}

int Device::destroy_mkey(Owner* o, uint32_t index) {
  Mkey* m = mkeys_.get(index);
  if (!m || m->owner != o) return EINVAL;
  --pds_.get(m->pd)->refs;
  mkeys_.erase(index);
  return 0;
}

// ---------------------------------------------------------------- work requests

// kWrUmr: only a free mkey of the QP's PD takes a layout (man
// mlx5dv_wr_post: "Unregister the mkey to enable another pattern
// registration ... via IBV_WR_LOCAL_INV"); each entry's region must be the
// owner's, of the same PD, and hold the entry's bytes (every repeat's, for
// an interleaved one). A registration that breaks a rule completes with
// IBV_WC_MW_BIND_ERR (uroce's choice: mlx5's syndrome for a failed UMR is
// not documented) and leaves the mkey free.
uint32_t Device::register_mkey(const Qp& qp, const abi::UmrArgs& umr, const abi::Sge* layout, uint32_t slots) {
  constexpr uint32_t kErr = IBV_WC_MW_BIND_ERR;
  Mkey* m = find_mkey(umr.mkey);
  if (!m || m->owner != qp.owner || m->pd != qp.pd || m->valid) return kErr;
  if (umr.access & ~kMkeyAccess) return kErr;
  if (umr.layout > abi::kUmrInterleaved) return kErr;
  const bool interleaved = umr.layout == abi::kUmrInterleaved;
  if (interleaved && umr.repeat_count == 0) return kErr;
  const uint32_t n = umr.layout == abi::kUmrNoLayout ? 0 : umr.num_entries;
  // An interleaved layout spends one entry on its repeat header (mlx5: "the
  // mkey should be created with one more entry than ... num_interleaved").
  if (n + (interleaved ? 1 : 0) > m->num_desc || n * (interleaved ? 2 : 1) > slots) return kErr;
  uint64_t unit = 0;
  m->entries.clear();
  for (uint32_t i = 0; i < n; ++i) {
    const abi::Sge& s = layout[interleaved ? 2 * i : i];
    const uint64_t stride = interleaved ? uint64_t(s.length) + layout[2 * i + 1].addr : 0;
    const Mr* mr = find_mr(s.lkey);
    if (!mr || mr->owner != qp.owner || mr->pd != qp.pd) return kErr;
    // The mkey grants no write its regions do not allow.
    if ((umr.access & IBV_ACCESS_LOCAL_WRITE) && !(mr->access & IBV_ACCESS_LOCAL_WRITE)) return kErr;
    // The last repeat's bytes are the furthest the entry reaches.
    const uint64_t reach = interleaved ? stride * (umr.repeat_count - 1) + s.length : s.length;
    if (s.addr < mr->iova || reach > mr->length || s.addr - mr->iova > mr->length - reach) return kErr;
    m->entries.push_back(MkeyEntry{s.addr, s.length, s.lkey, stride});
    unit += s.length;
  }
  m->repeat_count = interleaved ? umr.repeat_count : 0;
  m->unit = unit;
  m->length = interleaved ? unit * umr.repeat_count : unit;
  m->access = umr.access;
  m->valid = true;
  return IBV_WC_SUCCESS;
}

// ---------------------------------------------------------------- local access

Device::MrCheck Device::check_mkey(uint32_t key, uint32_t pd, uint64_t offset, uint64_t len, uint32_t access,
                                   uint64_t* length_left) const {
  const Mkey* m = find_mkey(key);
  if (!m || !m->valid) return MrCheck::kBadKey;
  if (m->pd != pd) return MrCheck::kBadPd;
  if ((m->access & access) != access) return MrCheck::kBadAccess;
  if (offset > m->length || len > m->length - offset) return MrCheck::kBadBounds;
  *length_left = m->length - offset;
  return MrCheck::kOk;
}

bool Device::mkey_spans(const Owner& owner, uint32_t key, uint64_t offset, uint64_t len, RemoteSpan* out, int* n,
                        int room) const {
  const Mkey* m = find_mkey(key);
  if (!m || !m->valid || offset > m->length || len > m->length - offset) return false;
  if (len == 0) return true;  // and so the layout has bytes (unit > 0) below
  const size_t count = m->entries.size();
  // The entry and repeat offset starts in: a list is one repeat.
  uint64_t repeat = m->repeat_count ? offset / m->unit : 0;
  uint64_t at = m->repeat_count ? offset % m->unit : offset;
  size_t i = 0;
  while (i < count && at >= m->entries[i].bytes) at -= m->entries[i++].bytes;
  while (len) {
    if (i == count) {  // the next repeat (a list has none: len ended first)
      i = 0;
      ++repeat;
    }
    const MkeyEntry& e = m->entries[i];
    const uint64_t chunk = std::min<uint64_t>(e.bytes - at, len);
    if (chunk) {
      const Mr* mr = find_mr(e.lkey);
      if (!mr || mr->owner != &owner || *n == room) return false;  // deregistered since
      const uint64_t va = e.addr + repeat * e.stride + at;
      if (va < mr->iova || chunk > mr->length || va - mr->iova > mr->length - chunk) return false;  // shrunk since
      out[(*n)++] = mr->span(mr->addr + (va - mr->iova), size_t(chunk));
      len -= chunk;
    }
    at = 0;
    ++i;
  }
  return true;
}

// ---------------------------------------------------------------- remote access

// An R_Key that is an mkey's (its lkey, as mlx5's): bytes [offset, offset +
// len) of its zero-based layout, read into or written from `data`, in as
// many passes as the spans need.
bool Device::mkey_io(uint32_t key, uint32_t pd, uint64_t offset, uint8_t* data, uint64_t len, bool to_memory) const {
  const Mkey* m = find_mkey(key);
  if (!m || !m->valid || m->pd != pd) return false;  // invalidated (or its key reused) since the check
  RemoteSpan spans[ProcessMemory::kMaxSpans];
  int n = 0;
  if (mkey_spans(*m->owner, key, offset, len, spans, &n, int(std::size(spans))))
    return to_memory ? m->owner->mem.write(spans, size_t(n), data) : m->owner->mem.read(spans, size_t(n), data);
  // More pieces than one pass holds (an interleaved layout of small
  // entries), or a region gone: halves, until a piece fails alone.
  if (n < int(std::size(spans)) || len < 2) return false;
  const uint64_t half = len / 2;
  return mkey_io(key, pd, offset, data, half, to_memory) &&
         mkey_io(key, pd, offset + half, data + half, len - half, to_memory);
}

bool Device::mkey_word(uint32_t key, uint32_t pd, uint64_t offset, RemoteSpan* span, Owner** owner) const {
  const Mkey* m = find_mkey(key);
  if (!m || !m->valid || m->pd != pd) return false;
  int n = 0;
  // One piece: an atomic is one access to one word (a word split across two
  // entries is refused as a remote access error).
  if (!mkey_spans(*m->owner, key, offset, 8, span, &n, 1) || n != 1) return false;
  *owner = m->owner;
  return true;
}

// LOCAL_INV and SEND_WITH_INV naming an mkey (device/mw.cc hands them
// here): a valid mkey of the PD becomes free; remotely only one created
// with MLX5DV_MKEY_INIT_ATTR_FLAGS_REMOTE_INVALIDATE (mlx5's en_rinval).
bool Device::invalidate_mkey(const Owner* owner, uint32_t pd, uint32_t key, bool remote) {
  Mkey* m = find_mkey(key);
  if (!m || !m->valid || m->pd != pd || (owner && m->owner != owner) || (remote && !m->remote_invalidate))
    return false;
  m->valid = false;
  m->entries.clear();
  m->length = 0;
  return true;
}

}  // namespace uroce::device
