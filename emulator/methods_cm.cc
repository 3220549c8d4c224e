// Methods of the connection manager (librdmacm): each forwards to the
// device's CM agent (cm/cm_agent.h), which checks that the ids and
// channels named are the caller's.
#include <unistd.h>

#include <cerrno>

#include "device/device.h"
#include "emulator/engine.h"
#include "emulator/methods.h"

namespace uroce::emulator {

// Request fds: [the channel's event pipe, write end].
int cm_create_channel(Call& c) {
  abi::CmHandleReply rep{};
  const int fd = c.take_fd(0);
  if (int err = c.engine.cm().create_channel(&c.owner, fd, &rep.handle)) {
    if (fd >= 0) close(fd);
    return err;
  }
  return c.reply(rep);
}

int cm_destroy_channel(Call& c) {
  return c.engine.cm().destroy_channel(&c.owner, c.request<abi::CmHandleRequest>().handle);
}

int cm_create_id(Call& c) {
  abi::CmHandleReply rep{};
  if (int err = c.engine.cm().create_id(&c.owner, c.request<abi::CmCreateIdRequest>(), &rep.handle)) return err;
  return c.reply(rep);
}

int cm_destroy_id(Call& c) { return c.engine.cm().destroy_id(&c.owner, c.request<abi::CmHandleRequest>().handle); }

int cm_bind(Call& c) {
  abi::CmBindReply rep{};
  if (int err = c.engine.cm().bind(&c.owner, c.request<abi::CmBindRequest>(), &rep)) return err;
  return c.reply(rep);
}

int cm_resolve_addr(Call& c) {
  abi::CmBindReply rep{};
  if (int err = c.engine.cm().resolve_addr(&c.owner, c.request<abi::CmResolveAddrRequest>(), &rep)) return err;
  return c.reply(rep);
}

int cm_resolve_route(Call& c) {
  return c.engine.cm().resolve_route(&c.owner, c.request<abi::CmHandleRequest>().handle);
}

int cm_listen(Call& c) {
  const auto req = c.request<abi::CmListenRequest>();
  return c.engine.cm().listen(&c.owner, req.id, req.backlog);
}

int cm_connect(Call& c) { return c.engine.cm().connect(&c.owner, c.request<abi::CmConnectRequest>()); }

int cm_accept(Call& c) { return c.engine.cm().accept(&c.owner, c.request<abi::CmConnectRequest>()); }

int cm_reject(Call& c) { return c.engine.cm().reject(&c.owner, c.request<abi::CmRejectRequest>()); }

int cm_establish(Call& c) { return c.engine.cm().establish(&c.owner, c.request<abi::CmHandleRequest>().handle); }

int cm_disconnect(Call& c) {
  return c.engine.cm().disconnect(&c.owner, c.request<abi::CmHandleRequest>().handle);
}

int cm_migrate(Call& c) {
  const auto req = c.request<abi::CmMigrateRequest>();
  return c.engine.cm().migrate(&c.owner, req.id, req.channel);
}

}  // namespace uroce::emulator
