// Device memory (ibv_alloc_dm, ibv_free_dm, ibv_reg_dm_mr): mlx5's MEMIC, a
// small memory on the HCA that applications copy into and peers reach with
// RDMA READ, WRITE and atomics without crossing PCIe to host memory. Here it
// is a memfd the engine creates and the client maps: the client's
// ibv_memcpy_*_dm are its own loads and stores (as mlx5's on the BAR), and an
// MR on it maps the same memfd in the engine, so remote access takes the
// shared-pages path of any MR (Mr::pages). It counts against
// config().max_dm_size for all clients together, as MEMIC is one per device,
// and goes away with its client (release_owner).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

#include "device/device.h"

namespace uroce::device {

namespace {

// mlx5_reg_dm_mr's MLX5_DM_ALLOWED_ACCESS: no MW binding, no ODP.
constexpr uint32_t kDmMrAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                                 IBV_ACCESS_ZERO_BASED;

uint64_t page_size() { return uint64_t(sysconf(_SC_PAGESIZE)); }

// A zero-filled memfd of `length` bytes sealed against resizing: the client
// holds it too and must not shrink it under the engine's mapping (SIGBUS).
int make_dm_memfd(uint64_t length) {
  const int fd = memfd_create("uroce-dm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  if (ftruncate(fd, off_t(length)) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

Result<uint32_t> Device::alloc_dm(Owner* o, const abi::AllocDmRequest& req, int* fd,
                                  uint64_t* map_length) {
  const uint64_t page = page_size();
  // mlx5_alloc_dm: larger than max_dm_size is EINVAL; the kernel refuses an
  // alignment the memory cannot give (here: more than a page).
  if (req.length == 0 || req.length > config_.max_dm_size || req.log_align_req > 12 ||
      (uint64_t(1) << req.log_align_req) > page)
    return {EINVAL};
  const uint64_t length = (req.length + page - 1) & ~(page - 1);
  // MEMIC exhausted (mlx5_cmd_alloc_memic): ENOMEM.
  if (dm_used_ + length > config_.max_dm_size) return {ENOMEM};
  const int memfd = make_dm_memfd(length);
  if (memfd < 0) return {ENOMEM};
  auto dm = std::make_unique<Dm>();
  dm->owner = o;
  dm->fd = memfd;
  dm->length = req.length;
  dm->map_length = length;
  dm_used_ += length;
  *fd = memfd;
  *map_length = length;
  return {0, dms_.insert(std::move(dm))};
}

// ib_uverbs' DM destroy: EBUSY while an MR uses it (ib_destroy_usecnt).
int Device::free_dm(Owner* o, uint32_t index) {
  Dm* dm = dms_.get(index);
  if (!dm || dm->owner != o) return EINVAL;
  if (dm->mrs) return EBUSY;
  close(dm->fd);
  dm_used_ -= dm->map_length;
  dms_.erase(index);
  return 0;
}

Result<uint32_t> Device::reg_dm_mr(Owner* o, const abi::RegDmMrRequest& req) {
  Pd* pd = pds_.get(req.pd);
  Dm* dm = dms_.get(req.dm);
  if (!pd || pd->owner != o || !dm || dm->owner != o) return {EINVAL};
  // ib_uverbs_reg_dm_mr: zero-based only, inside the allocation; mlx5: its
  // allowed access bits; IBA 10.6.3.1: remote write or atomic needs local write.
  if (!(req.access & IBV_ACCESS_ZERO_BASED) || (req.access & ~kDmMrAccess)) return {EINVAL};
  if ((req.access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(req.access & IBV_ACCESS_LOCAL_WRITE))
    return {EINVAL};
  if (req.offset > dm->length || req.length > dm->length - req.offset) return {EINVAL};
  if (req.client_addr & (page_size() - 1)) return {EINVAL};
  if (mrs_.count() >= info_.max_mr) return {ENOMEM};
  // Over the shared-mapping budget the MR reaches the client's own mapping of
  // the memfd through process_vm_* instead: slower, same bytes.
  int err = 0;
  std::unique_ptr<SharedPages> pages =
      SharedPages::map(dm->fd, req.client_addr, dm->map_length, &err, &o->shared_budget);
  if (err) return {err};
  const uint32_t key = add_mr(*pd, Mr{.owner = o, .pd = uint32_t(req.pd), .iova = 0,
                                     .addr = req.client_addr + req.offset, .length = req.length,
                                     .access = req.access, .dm = uint32_t(req.dm), .pages = std::move(pages)});
  ++dm->mrs;
  return {0, key};
}

}  // namespace uroce::device
