#include "net/pcap_writer.h"

#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace uroce::net {

namespace {
// stdio buffer: a few hundred full-size frames per write(2).
constexpr size_t kFileBuffer = 1 << 20;
}  // namespace

std::string PcapWriter::open(const std::string& path, PcapTimestamp ts, uint64_t max_frames,
                             uint32_t snaplen) {
  close();
  error_.clear();
  frames_ = bytes_ = write_errors_ = 0;
  ts_ = ts;
  max_frames_ = max_frames;
  snaplen_ = std::max<uint32_t>(snaplen, 64);
  file_ = std::fopen(path.c_str(), "wb");
  if (!file_) return "cannot create " + path + ": " + std::strerror(errno);
  std::setvbuf(file_, nullptr, _IOFBF, kFileBuffer);
  const PcapFileHeader h = {ts == PcapTimestamp::kNano ? kPcapMagicNano : kPcapMagicMicro,
                            2, 4, 0, 0, snaplen_, kLinktypeEthernet};
  if (std::fwrite(&h, sizeof(h), 1, file_) != 1 || std::fflush(file_) != 0) {
    error_ = "cannot write " + path + ": " + std::strerror(errno);
    std::fclose(file_);
    file_ = nullptr;
    return error_;
  }
  return "";
}

void PcapWriter::close() {
  if (!file_) return;
  if (std::fclose(file_) != 0 && error_.empty()) error_ = std::strerror(errno);
  file_ = nullptr;
}

void PcapWriter::flush() {
  if (file_) std::fflush(file_);
}

bool PcapWriter::write(const uint8_t* frame, uint32_t len, uint64_t unix_ns) {
  if (!file_) return false;
  const uint32_t incl = std::min(len, snaplen_);
  const uint64_t frac = unix_ns % 1'000'000'000;
  const PcapRecordHeader r = {uint32_t(unix_ns / 1'000'000'000),
                              uint32_t(ts_ == PcapTimestamp::kNano ? frac : frac / 1000), incl,
                              len};
  if (std::fwrite(&r, sizeof(r), 1, file_) != 1 || std::fwrite(frame, 1, incl, file_) != incl) {
    ++write_errors_;
    if (error_.empty()) error_ = std::strerror(errno);
    close();
    return false;
  }
  ++frames_;
  bytes_ += incl;
  if (limit_reached()) close();
  return true;
}

bool PcapWriter::write(const Packet& p) {
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return write(p.data, p.len, uint64_t(now.tv_sec) * 1'000'000'000 + uint64_t(now.tv_nsec));
}

}  // namespace uroce::net
