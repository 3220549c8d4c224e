// Client side of an engine's control socket, as the uroce command uses it:
// probing whether an engine answers, and the text requests (status, stats).
#pragma once

#include <sys/types.h>

#include <cerrno>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "uroce/abi.h"

namespace uroce::tool {

// Owns one file descriptor.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    reset(std::exchange(other.fd_, -1));
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// What connecting to an engine's socket told us.
struct ProbeResult {
  // Something listens on the socket: it accepted, or its backlog is full.
  bool running = false;
  // The listener's pid (SO_PEERCRED), 0 when unknown.
  pid_t pid = 0;
  // errno of the failed connect when !running. ENOENT and ECONNREFUSED mean
  // "no engine"; anything else (EACCES...) means "cannot tell".
  int error = 0;
};

// Connects (non-blocking) and closes again without sending anything.
ProbeResult probe_engine(const std::string& socket_path);

// True when a probe failed because nothing listens there.
inline bool probe_says_absent(const ProbeResult& probe) {
  return !probe.running && (probe.error == ENOENT || probe.error == ECONNREFUSED);
}

struct CtlReply {
  int32_t status = 0;  // 0 or a positive errno
  std::string body;
};

// Sends one request with an empty body (CtlRequestHeader{op, 0}) and waits up
// to timeout_ms for one reply message. Returns nullopt and sets *error when
// there is no well-formed reply. File descriptors attached to the reply are
// closed.
std::optional<CtlReply> control_request(const std::string& socket_path, abi::CtlOp op,
                                        int timeout_ms, std::string* error,
                                        std::string_view body = {});

// A document of the engine fetched in pieces over one connection: its
// report (kReport, JSON: state and counters), or the text of `uroce status`
// (kStatus) or `uroce stats` (kStats), which outgrow one control message.
std::optional<std::string> fetch_report(const std::string& socket_path, int timeout_ms,
                                        std::string* error, abi::CtlOp op = abi::CtlOp::kReport);

}  // namespace uroce::tool
