// Helpers for tests that let Wireshark's tshark decode frames uroce built:
// write them to a pcap file with net::PcapWriter, run tshark, read rows.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "net/pcap_writer.h"

namespace uroce::net::test {

inline bool have_tshark() { return std::system("command -v tshark >/dev/null 2>&1") == 0; }

inline std::string run_command(const std::string& cmd) {
  std::string out;
  if (FILE* f = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
    pclose(f);
  }
  return out;
}

// A pcap file of the given frames, removed when the object goes.
struct PcapFile {
  std::string path;
  explicit PcapFile(const std::vector<const Packet*>& frames) {
    char tmpl[] = "/tmp/uroce-v6-test.XXXXXX";
    const int fd = mkstemp(tmpl);
    if (fd >= 0) ::close(fd);
    path = tmpl;
    PcapWriter w;
    if (!w.open(path, PcapTimestamp::kNano).empty()) return;
    uint64_t t = 1'700'000'000'000'000'000ull;
    for (const Packet* p : frames) w.write(*p, t += 1000);
  }
  ~PcapFile() { ::unlink(path.c_str()); }
};

// tshark's rows for the file: one per frame, the -e fields separated by tabs.
inline std::vector<std::vector<std::string>> tshark_fields(const std::string& path,
                                                          const std::string& options,
                                                          const std::vector<std::string>& fields) {
  std::string cmd = "tshark -n -r " + path + " " + options + " -T fields -E occurrence=a";
  for (const std::string& f : fields) cmd += " -e " + f;
  cmd += " 2>/dev/null";
  std::vector<std::vector<std::string>> rows;
  std::istringstream lines(run_command(cmd));
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> cols;
    std::istringstream cs(line);
    for (std::string c; std::getline(cs, c, '\t');) cols.push_back(c);
    cols.resize(fields.size());
    rows.push_back(cols);
  }
  return rows;
}

}  // namespace uroce::net::test
