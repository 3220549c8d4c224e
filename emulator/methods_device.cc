// Methods of the connection, the device and its port.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "emulator/engine.h"
#include "emulator/methods.h"

namespace uroce::emulator {

// Request fds: [async event pipe]. Reply fds: [engine page read-only, doorbell].
int hello(Call& c) {
  const auto req = c.request<abi::HelloRequest>();
  if (req.magic != abi::kMagic) return EINVAL;
  if (req.version != abi::kVersion) return EPROTO;
  const int async_fd = c.take_fd(0);
  fcntl(async_fd, F_SETFL, fcntl(async_fd, F_GETFL) | O_NONBLOCK);
  if (c.owner.async_fd >= 0) close(c.owner.async_fd);
  c.owner.async_fd = async_fd;
  // Clients get the engine page read-only.
  const std::string path = "/proc/self/fd/" + std::to_string(c.engine.shared_fd());
  const int ro = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (ro < 0) return errno;
  c.pass_fd(ro, true);
  c.pass_fd(c.engine.doorbell_fd(), false);
  return c.reply(abi::HelloReply{c.dev.info()});
}

int query_device(Call& c) { return c.reply(abi::HelloReply{c.dev.info()}); }

int query_port(Call& c) { return c.reply(abi::QueryPortReply{c.dev.info().port}); }

int set_port_state(Call& c) {
  const auto req = c.request<abi::SetPortStateRequest>();
  if (req.state != IBV_PORT_ACTIVE && req.state != IBV_PORT_DOWN) return EINVAL;
  c.engine.set_port_state(req.state == IBV_PORT_ACTIVE);
  return 0;
}

}  // namespace uroce::emulator
