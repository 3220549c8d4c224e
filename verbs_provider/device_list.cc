// Device discovery: every engine publishes a socket in the runtime directory;
// each answering engine is one ibv_device. Device structs live for the whole
// process (a context may outlive the list it came from).
#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "uroce/runtime_dir.h"
#include "verbs_provider/provider.h"

namespace uroce::provider {

namespace {

const UroceDeviceOps kDeviceOps{kUroceDeviceOpsName};

std::mutex g_mu;
std::vector<UDevice*> g_devices;  // never freed: see above

// Where programs read the device's sysfs files: /sys/class/infiniband/<name>
// (which `uroce run` provides), or for an mlx5-mode engine the tree below its
// PCI function in the runtime directory (uroce/runtime_dir.h,
// engine_mlx5_ibdev_path), where the PCI ids are two levels up.
void set_ibdev_path(UDevice* d, const std::string& sock) {
  ibv_device& dev = d->device;
  std::snprintf(dev.ibdev_path, sizeof(dev.ibdev_path), "/sys/class/infiniband/%s", d->info.name);
  if (d->info.vendor_id != abi::kMlx5VendorId) return;
  const std::string path = engine_mlx5_ibdev_path(sock.substr(0, sock.rfind('/')), d->info.name);
  if (path.size() < sizeof(dev.ibdev_path))
    std::snprintf(dev.ibdev_path, sizeof(dev.ibdev_path), "%s", path.c_str());
}

UDevice* find_or_add(const abi::DeviceInfo& info, const std::string& sock) {
  for (UDevice* d : g_devices)
    if (std::strcmp(d->info.name, info.name) == 0) {
      d->info = info;
      std::snprintf(d->socket_path, sizeof(d->socket_path), "%s", sock.c_str());
      set_ibdev_path(d, sock);
      return d;
    }
  auto* d = new (std::nothrow) UDevice{};
  if (!d) return nullptr;
  d->ops = &kDeviceOps;
  d->info = info;
  d->index = int(g_devices.size());
  std::snprintf(d->socket_path, sizeof(d->socket_path), "%s", sock.c_str());
  ibv_device& dev = d->device;
  dev.node_type = IBV_NODE_CA;
  dev.transport_type = IBV_TRANSPORT_IB;  // RoCE reports the IB transport
  std::snprintf(dev.name, sizeof(dev.name), "%s", info.name);
  std::snprintf(dev.dev_name, sizeof(dev.dev_name), "uverbs-%.56s", info.name);
  std::snprintf(dev.dev_path, sizeof(dev.dev_path), "/sys/class/infiniband_verbs/uverbs-%s", info.name);
  set_ibdev_path(d, sock);
  try {
    g_devices.push_back(d);
  } catch (const std::bad_alloc&) {
    delete d;
    return nullptr;
  }
  return d;
}

bool probe(const std::string& sock, abi::DeviceInfo* info) {
  Connection c;
  if (int err = c.connect_to(sock.c_str()); err != 0) {
    // The socket's mode keeps us out (an engine of another user): as a
    // /dev/infiniband node we may not open, the device is not ours to list.
    if (err == EACCES) warn_refused(sock, "");
    return false;
  }
  abi::HelloReply rep;
  const int err = c.call(abi::CtlOp::kQueryDevice, nullptr, 0, &rep, sizeof(rep));
  c.close_fd();
  if (err == EACCES) warn_refused(sock, c.error_text());
  if (err == 0) *info = rep.device;
  return err == 0;
}

}  // namespace

// Once per engine and process: a program that lists devices in a loop must
// not fill its stderr.
void warn_refused(const std::string& sock, const std::string& engine_text) {
  static std::mutex mu;
  static std::vector<std::string> warned;
  std::lock_guard<std::mutex> lock(mu);
  if (std::find(warned.begin(), warned.end(), sock) != warned.end()) return;
  warned.push_back(sock);
  if (!engine_text.empty())
    std::fprintf(stderr, "uroce: warning: %s\n", engine_text.c_str());
  else
    std::fprintf(stderr,
                 "uroce: warning: %s: permission denied: the engine belongs to another user, who "
                 "can admit others with 'uroce start --users LIST' or '--group NAME'\n",
                 sock.c_str());
}

// Once per process, as libibverbs warns about its config directory: a
// program that finds no device otherwise says only "No IB devices found"
// (or nothing), and a CI job may pass without having tested anything.
void warn_no_engine(const std::string& dir) {
  static std::once_flag once;
  std::call_once(once, [&dir] {
    std::fprintf(stderr,
                 "uroce: warning: no uroce engine runs in %s: 'uroce start' starts one (UROCE_RUNTIME_DIR "
                 "names the directory)\n",
                 dir.c_str());
  });
}

}  // namespace uroce::provider

using namespace uroce;
using namespace uroce::provider;

namespace {

ibv_device** device_list(int* num_devices) {
  const std::string dir = uroce::runtime_dir();
  std::vector<std::string> socks;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n.size() > 5 && n.compare(n.size() - 5, 5, ".sock") == 0) socks.push_back(dir + "/" + n);
    }
    closedir(d);
  } else if (errno == EACCES) {
    warn_refused(dir, "cannot list the runtime directory " + dir +
                          ": permission denied (its engines belong to another user)");
  }
  std::sort(socks.begin(), socks.end());
  std::vector<UDevice*> found;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    for (const std::string& s : socks) {
      abi::DeviceInfo info;
      if (probe(s, &info))
        if (UDevice* d = find_or_add(info, s)) found.push_back(d);
    }
  }
  if (found.empty() && socks.empty()) warn_no_engine(dir);
  auto** list = static_cast<ibv_device**>(calloc(found.size() + 1, sizeof(ibv_device*)));
  if (!list) {
    errno = ENOMEM;
    return nullptr;
  }
  for (size_t i = 0; i < found.size(); ++i) {
    found[i]->refcount.fetch_add(1);
    list[i] = &found[i]->device;
  }
  if (num_devices) *num_devices = int(found.size());
  return list;
}

}  // namespace

// The list is built with the standard library's containers: an allocation
// that fails is ENOMEM, as from rdma-core's, never an exception through C.
UROCE_EXPORT ibv_device** ibv_get_device_list(int* num_devices) {
  try {
    return device_list(num_devices);
  } catch (const std::bad_alloc&) {
    errno = ENOMEM;
    return nullptr;
  }
}

UROCE_EXPORT void ibv_free_device_list(ibv_device** list) {
  if (!list) return;
  for (ibv_device** d = list; *d; ++d) reinterpret_cast<UDevice*>(*d)->refcount.fetch_sub(1);
  free(list);
}

UROCE_EXPORT const char* ibv_get_device_name(ibv_device* device) { return device->name; }

UROCE_EXPORT __be64 ibv_get_device_guid(ibv_device* device) {
  return reinterpret_cast<UDevice*>(device)->info.node_guid;
}

UROCE_EXPORT int ibv_get_device_index(ibv_device* device) {
  return reinterpret_cast<UDevice*>(device)->index;
}
