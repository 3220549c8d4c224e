// Memory windows (IBA 10.6.7; Linux rxe_mw.c): allocation, the bind and
// invalidate operations the device performs for a send queue, and remote
// access through a window's R_Key. Where rxe and mlx5 differ, the rule
// follows mlx5 and says so.
#include <cerrno>

#include "device/device.h"

namespace uroce::device {

namespace {

// The rights a window holds: remote ones, and whether it is zero-based.
constexpr uint32_t kMwRights = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                               IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ZERO_BASED;
// Bits a bind may carry. LOCAL_WRITE and MW_BIND grant nothing through a
// window, but programs written for mlx5 pass a region's access flags to
// their binds (pyverbs' MW tests too): mlx5 ignores what does not map to a
// window right (get_umr_mr_flags), rxe accepts them
// (RXE_ACCESS_SUPPORTED_MW); the window gets its remote rights.
constexpr uint32_t kMwAccess = kMwRights | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND;

uint32_t mw_index(uint32_t rkey) { return (rkey >> 8) - kMwIndexBase; }

// [va, va + len) inside [start, start + length).
bool inside(uint64_t va, uint64_t len, uint64_t start, uint64_t length) {
  return va >= start && len <= length && va - start <= length - len;
}

}  // namespace

Mw* Device::find_mw(uint32_t rkey) const {
  return is_mw_key(rkey) ? mws_.get(mw_index(rkey)) : nullptr;
}

// ---------------------------------------------------------------- control

Result<uint32_t> Device::alloc_mw(Owner* o, uint32_t pd_handle, uint32_t type, uint32_t* rkey) {
  Pd* pd = pds_.get(pd_handle);
  if (!pd || pd->owner != o) return {EINVAL};
  // ib_uverbs_alloc_mw: a type other than 1 and 2 is EINVAL (pyverbs
  // test_reg_mw_wrong_type expects a failure other than EOPNOTSUPP).
  if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) return {EINVAL};
  if (mws_.count() >= info_.max_mw) return {ENOMEM};
  auto mw = std::make_unique<Mw>();
  mw->owner = o;
  mw->pd = pd_handle;
  mw->type = ibv_mw_type(type);
  Mw* raw = mw.get();
  const uint32_t idx = mws_.insert(std::move(mw));
  if (++mw_generation_ == 0) mw_generation_ = 1;
  raw->rkey = (kMwIndexBase + idx) << 8 | mw_generation_;
  ++pd->refs;  // ibv_dealloc_pd with windows is EBUSY
  *rkey = raw->rkey;
  return {0, idx};
}

// A bound window may be deallocated (rxe and mlx5): its R_Key is dead at once.
int Device::dealloc_mw(Owner* o, uint32_t index) {
  Mw* mw = mws_.get(index);
  if (!mw || mw->owner != o) return EINVAL;
  invalidate(*mw);
  --pds_.get(mw->pd)->refs;
  mws_.erase(index);
  return 0;
}

// Back to free (type 2) or bound to nothing (type 1). The R_Key stays: the
// next bind gives it a new key part.
bool Device::invalidate(Mw& mw) {
  if (!mw.bound) return false;
  if (Qp* q = qp(mw.qpn); q && mw.qpn) --q->bound_windows;
  if (Mr* mr = mrs_.get(mw.mr_key >> 8); mr && mr->key == mw.mr_key) --mr->windows;
  mw.bound = false;
  mw.qpn = mw.mr_key = mw.access = 0;
  mw.addr = mw.length = 0;
  return true;
}

// A destroyed QP's type 2 windows stay valid and reach nothing until
// invalidated (rxe keeps the QP referenced, mlx5 the QP number in the mkey:
// no other QP matches either way).
void Device::unbind_windows_of(Qp& qp) {
  if (!qp.bound_windows) return;
  mws_.for_each([&](uint32_t, Mw& mw) {
    if (mw.bound && mw.type == IBV_MW_TYPE_2 && mw.qpn == qp.qpn) mw.qpn = 0;
  });
  qp.bound_windows = 0;
}

// A deregistered MR's windows reach nothing: mlx5 lets the MR go (its mkey
// dies under the windows' indirect mkeys); rxe refuses with EINVAL while
// windows are bound. The windows stay bound until rebound or invalidated.
void Device::detach_windows_of(Mr& mr) {
  if (!mr.windows) return;
  mws_.for_each([&](uint32_t, Mw& mw) {
    if (mw.mr_key == mr.key) mw.mr_key = 0;
  });
  mr.windows = 0;
}

// ---------------------------------------------------------------- work requests

// IBV_WR_BIND_MW, executed when the requester reaches it (rxe_bind_mw). Any
// broken rule fails the WQE with IBV_WC_MW_BIND_ERR and the QP errs.
uint32_t Device::bind_mw(Qp& qp, const abi::MwBind& b) {
  constexpr uint32_t kErr = IBV_WC_MW_BIND_ERR;
  Mw* mw = find_mw(b.mw_rkey);
  // The index names the window, as mlx5's UMR names its mkey: a stale key
  // part (pyverbs keeps a type 2 window's first R_Key) still names it.
  if (!mw || mw->owner != qp.owner) return kErr;
  if (b.access & ~kMwAccess) return kErr;
  // C10-72: the window belongs to the QP's PD (rxe checks it for type 2;
  // IBA 10.6.7.2 asks it of every bind).
  if (mw->pd != qp.pd) return kErr;
  const bool zero_based = b.access & IBV_ACCESS_ZERO_BASED;
  if (mw->type == IBV_MW_TYPE_1) {
    if (zero_based) return kErr;  // o10-36.2.2
  } else {
    if (mw->bound) return kErr;       // o10-37.2.30: only a free window binds
    if (b.length == 0) return kErr;   // o10-37.2.40: and not to nothing
  }
  Mr* mr = nullptr;
  if (b.length) {
    mr = mrs_.get(b.mr_lkey >> 8);
    if (!mr || mr->key != b.mr_lkey || mr->owner != qp.owner) return kErr;
    if (mr->pd != mw->pd) return kErr;  // ibv_bind_mw says EPERM before posting
    if (mr->access & IBV_ACCESS_ZERO_BASED) return kErr;  // rxe
    if (!(mr->access & IBV_ACCESS_MW_BIND)) return kErr;  // C10-73
    // C10-74: a window that may be written needs a region that may be.
    if ((b.access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
        !(mr->access & IBV_ACCESS_LOCAL_WRITE))
      return kErr;
    if (!inside(b.addr, b.length, mr->iova, mr->length)) return kErr;  // C10-75
  }
  // A type 1 window moves: its old range is gone with the rebind.
  invalidate(*mw);
  mw->rkey = (mw->rkey & ~0xffu) | (b.new_rkey & 0xffu);
  mw->bound = true;
  mw->access = b.access & kMwRights;
  mw->addr = b.addr;
  mw->length = b.length;
  if (mr) {
    mw->mr_key = mr->key;
    ++mr->windows;
  }
  if (mw->type == IBV_MW_TYPE_2) {
    mw->qpn = qp.qpn;
    ++qp.bound_windows;
  }
  return IBV_WC_SUCCESS;
}

// IBV_WR_LOCAL_INV (rxe_invalidate_mw): the whole R_Key of a valid type 2
// window of the QP's PD (o10-37.2.26: type 1 windows are never
// invalidated). Anything else, a region's key among them (ibv_reg_mr
// regions cannot be invalidated on rxe or mlx5), is IBV_WC_LOC_QP_OP_ERR as
// on rxe.
uint32_t Device::local_invalidate(const Qp& qp, uint32_t rkey) {
  if (is_mkey_key(rkey)) [[unlikely]]
    return invalidate_mkey(qp.owner, qp.pd, rkey, false) ? IBV_WC_SUCCESS : IBV_WC_LOC_QP_OP_ERR;
  Mw* mw = find_mw(rkey);
  if (!mw || mw->owner != qp.owner || mw->rkey != rkey || mw->type != IBV_MW_TYPE_2 ||
      mw->pd != qp.pd || !invalidate(*mw))
    return IBV_WC_LOC_QP_OP_ERR;
  return IBV_WC_SUCCESS;
}

// SEND_WITH_INV's R_Key, at the responder: as a local invalidation, and a
// window bound to a QP only through that QP (type 2B).
bool Device::remote_invalidate(const Qp& qp, uint32_t pd, uint32_t rkey) {
  if (is_mkey_key(rkey)) [[unlikely]]
    return invalidate_mkey(nullptr, pd, rkey, true);
  Mw* mw = find_mw(rkey);
  if (!mw || mw->rkey != rkey || mw->type != IBV_MW_TYPE_2 || mw->pd != pd || mw->qpn != qp.qpn)
    return false;
  return invalidate(*mw);
}

// ---------------------------------------------------------------- remote access

// rxe_lookup_mw's rules: the whole R_Key of a bound window, the PD the
// request is checked against, a type 2 window only through its QP, then the
// window's rights and range. The bytes are the region's: its PD and bounds
// are checked again (ibv_rereg_mr may have moved or shrunk it).
Device::MrCheck Device::check_mw(uint32_t rkey, uint32_t pd, uint32_t qpn, uint64_t va, uint64_t len,
                                 uint32_t access, const Mr** out, uint64_t* owner_addr) const {
  const Mw* mw = find_mw(rkey);
  if (!mw || mw->rkey != rkey || !mw->bound) return MrCheck::kBadKey;
  if (mw->pd != pd || (mw->type == IBV_MW_TYPE_2 && mw->qpn != qpn)) return MrCheck::kBadPd;
  if ((mw->access & access) != access) return MrCheck::kBadAccess;
  // A zero-based window (type 2 only) is addressed from 0.
  const uint64_t start = mw->access & IBV_ACCESS_ZERO_BASED ? 0 : mw->addr;
  if (!inside(va, len, start, mw->length)) return MrCheck::kBadBounds;
  const Mr* mr = find_mr(mw->mr_key);
  if (!mr || mr->owner != mw->owner) return MrCheck::kBadKey;
  if (mr->pd != mw->pd) return MrCheck::kBadPd;  // re-registered into another PD since
  const uint64_t mr_va = mw->addr + (va - start);
  if (!inside(mr_va, len, mr->iova, mr->length)) return MrCheck::kBadBounds;
  *out = mr;
  *owner_addr = mr->addr + (mr_va - mr->iova);
  return MrCheck::kOk;
}

}  // namespace uroce::device
