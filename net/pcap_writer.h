// Classic pcap files (LINKTYPE_ETHERNET) of the frames crossing a port, for
// `uroce capture`: Wireshark and tshark decode UDP 4791 as RoCEv2.
//
// open() and close() are control path; write() is called on the datapath for
// every frame and only copies into a stdio buffer (no allocation, no
// exceptions; a failed write closes the file and is counted).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "net/packet.h"

namespace uroce::net {

enum class PcapTimestamp : uint8_t { kMicro, kNano };

// The file format (pcap-savefile(5)), fields in the writer's byte order; the
// magic number tells readers the order and the timestamp resolution.
struct PcapFileHeader {
  uint32_t magic;
  uint16_t version_major;  // 2
  uint16_t version_minor;  // 4
  int32_t thiszone;        // 0: timestamps are UTC
  uint32_t sigfigs;        // 0
  uint32_t snaplen;
  uint32_t linktype;
};
static_assert(sizeof(PcapFileHeader) == 24);

struct PcapRecordHeader {
  uint32_t ts_sec;
  uint32_t ts_frac;  // microseconds or nanoseconds, per the magic
  uint32_t incl_len;
  uint32_t orig_len;
};
static_assert(sizeof(PcapRecordHeader) == 16);

constexpr uint32_t kPcapMagicMicro = 0xa1b2c3d4;
constexpr uint32_t kPcapMagicNano = 0xa1b23c4d;
constexpr uint32_t kLinktypeEthernet = 1;

class PcapWriter {
 public:
  PcapWriter() = default;
  PcapWriter(const PcapWriter&) = delete;
  PcapWriter& operator=(const PcapWriter&) = delete;
  ~PcapWriter() { close(); }

  // Creates (truncates) path and writes the file header. max_frames > 0
  // closes the file after that many frames. Returns "" or the reason.
  std::string open(const std::string& path, PcapTimestamp ts = PcapTimestamp::kNano,
                   uint64_t max_frames = 0, uint32_t snaplen = 65535);
  // Flushes and closes; idempotent.
  void close();
  bool is_open() const { return file_ != nullptr; }
  // True once max_frames frames were written (the file is closed then).
  bool limit_reached() const { return max_frames_ && frames_ >= max_frames_; }

  // Appends one frame stamped unix_ns (nanoseconds since the epoch, UTC).
  // Returns false if the writer is closed (then nothing is written).
  bool write(const uint8_t* frame, uint32_t len, uint64_t unix_ns);
  bool write(const Packet& p, uint64_t unix_ns) { return write(p.data, p.len, unix_ns); }
  // Same, stamped with CLOCK_REALTIME now.
  bool write(const Packet& p);
  // Pushes buffered records to the file (e.g. once a second, so a reader
  // following the file sees them).
  void flush();

  uint64_t frames() const { return frames_; }
  uint64_t bytes() const { return bytes_; }
  // Frames lost because a write to the file failed (the file is closed).
  uint64_t write_errors() const { return write_errors_; }
  const std::string& error() const { return error_; }

 private:
  std::FILE* file_ = nullptr;
  PcapTimestamp ts_ = PcapTimestamp::kNano;
  uint32_t snaplen_ = 65535;
  uint64_t max_frames_ = 0;
  uint64_t frames_ = 0;
  uint64_t bytes_ = 0;
  uint64_t write_errors_ = 0;
  std::string error_;
};

}  // namespace uroce::net
