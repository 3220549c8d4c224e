// Methods the uroce command calls: fault injection, capture, status, counters.
#include <cerrno>

#include "emulator/engine.h"
#include "emulator/methods.h"

namespace uroce::emulator {

int set_fault(Call& c) {
  const auto req = c.request<abi::SetFaultRequest>();
  if (req.port > abi::kFaultPortWire) return EINVAL;
  net::FaultConfig cfg;
  cfg.drop = req.drop;
  cfg.duplicate = req.duplicate;
  cfg.reorder = req.reorder;
  cfg.corrupt = req.corrupt;
  cfg.delay_us = req.delay_us;
  cfg.seed = req.seed;
  const device::PortId port =
      req.port == abi::kFaultPortLoopback || (req.port == abi::kFaultPortDefault && !c.dev.has_wire())
          ? device::PortId::kLoopback
          : device::PortId::kWire;
  const std::string err = c.dev.set_fault(port, cfg);
  if (!err.empty()) {
    c.reply_text(err);
    return EINVAL;
  }
  return 0;
}

int capture(Call& c) {
  auto req = c.request<abi::CaptureRequest>();
  req.path[abi::kMaxCapturePath - 1] = 0;
  if (req.action == abi::kCaptureStart) {
    const std::string err = c.dev.start_capture(req.path, req.max_frames);
    if (!err.empty()) {
      c.reply_text(err);
      return EIO;
    }
  } else if (req.action == abi::kCaptureStop) {
    c.dev.stop_capture();
  } else if (req.action != abi::kCaptureStatus) {
    return EINVAL;
  }
  return c.reply(abi::CaptureReply{c.dev.captured_frames(), c.dev.capturing() ? 1u : 0u, 0});
}

// One piece of a document read as kReport's: ReportReply, then its bytes
// from the request's offset, as many as fit.
static int reply_piece(Call& c, Engine::Snapshot kind) {
  const auto req = c.request<abi::ReportRequest>();
  const std::string& doc = c.engine.snapshot(c.owner, kind, req.offset == 0);
  if (req.offset > doc.size()) return EINVAL;
  const abi::ReportReply head{doc.size()};
  std::memcpy(c.rep, &head, sizeof(head));
  const size_t piece = std::min<size_t>(doc.size() - req.offset, sizeof(c.rep) - sizeof(head));
  std::memcpy(c.rep + sizeof(head), doc.data() + req.offset, piece);
  c.rep_len = uint32_t(sizeof(head) + piece);
  return 0;
}

int report(Call& c) { return reply_piece(c, Engine::Snapshot::kReport); }

// status and stats: with a ReportRequest, in pieces as the report; without a
// body (a tool of ABI version 10 or older), the text cut to one message.
int status(Call& c) {
  if (c.len) return reply_piece(c, Engine::Snapshot::kStatus);
  c.reply_text(c.engine.status_text(&c.owner));
  return 0;
}

int stats(Call& c) {
  if (c.len) return reply_piece(c, Engine::Snapshot::kStats);
  c.reply_text(c.engine.stats_text());
  return 0;
}

}  // namespace uroce::emulator
