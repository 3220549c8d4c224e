// Tests for net/pcap_writer.cc: the file and record headers byte by byte, a
// round trip through a reader written here, the frame limit, and (when tshark
// is installed) Wireshark's own decoding of the RoCEv2 frames uroce builds.
#include "net/pcap_writer.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "net/arp.h"

namespace uroce::net {
namespace {

struct TempFile {
  std::string path;
  TempFile() {
    char tmpl[] = "/tmp/uroce-pcap-test.XXXXXX";
    const int fd = mkstemp(tmpl);
    if (fd >= 0) ::close(fd);
    path = tmpl;
  }
  ~TempFile() { ::unlink(path.c_str()); }
  std::vector<uint8_t> read() const {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  }
};

uint32_t le32(const std::vector<uint8_t>& b, size_t off) {
  return uint32_t(b[off]) | uint32_t(b[off + 1]) << 8 | uint32_t(b[off + 2]) << 16 |
         uint32_t(b[off + 3]) << 24;
}

std::unique_ptr<Packet> raw_frame(uint32_t len, uint8_t seed) {
  auto p = std::make_unique<Packet>();
  for (uint32_t i = 0; i < len; ++i) p->data[i] = uint8_t(seed + i * 7);
  p->len = len;
  return p;
}

// A minimal pcap reader, independent of the writer's structs.
struct Record {
  uint32_t sec, frac, incl, orig;
  std::vector<uint8_t> data;
};
std::vector<Record> read_records(const std::vector<uint8_t>& b) {
  std::vector<Record> out;
  size_t off = 24;
  while (off + 16 <= b.size()) {
    Record r{le32(b, off), le32(b, off + 4), le32(b, off + 8), le32(b, off + 12), {}};
    off += 16;
    if (off + r.incl > b.size()) break;
    r.data.assign(b.begin() + long(off), b.begin() + long(off + r.incl));
    off += r.incl;
    out.push_back(std::move(r));
  }
  return out;
}

TEST(PcapWriter, FileHeaderBytesNanosecond) {
  TempFile f;
  {
    PcapWriter w;
    ASSERT_EQ(w.open(f.path), "");
  }
  // Little-endian host: the magic reads back in the writer's order.
  const std::vector<uint8_t> expected = {
      0x4d, 0x3c, 0xb2, 0xa1,  // magic: nanosecond timestamps
      0x02, 0x00, 0x04, 0x00,  // version 2.4
      0x00, 0x00, 0x00, 0x00,  // thiszone
      0x00, 0x00, 0x00, 0x00,  // sigfigs
      0xff, 0xff, 0x00, 0x00,  // snaplen 65535
      0x01, 0x00, 0x00, 0x00,  // LINKTYPE_ETHERNET
  };
  EXPECT_EQ(f.read(), expected);
}

TEST(PcapWriter, FileHeaderMicrosecondMagicAndSnaplen) {
  TempFile f;
  {
    PcapWriter w;
    ASSERT_EQ(w.open(f.path, PcapTimestamp::kMicro, 0, 9000), "");
  }
  const auto b = f.read();
  ASSERT_EQ(b.size(), 24u);
  EXPECT_EQ(le32(b, 0), 0xa1b2c3d4u);
  EXPECT_EQ(le32(b, 16), 9000u);
}

TEST(PcapWriter, RecordHeaderAndDataRoundTrip) {
  TempFile f;
  auto a = raw_frame(60, 1), b = raw_frame(4234, 2);
  const uint64_t t0 = 1'700'000'000'123'456'789ull;
  {
    PcapWriter w;
    ASSERT_EQ(w.open(f.path), "");
    ASSERT_TRUE(w.write(*a, t0));
    ASSERT_TRUE(w.write(*b, t0 + 1'000'000'000));
    EXPECT_EQ(w.frames(), 2u);
    EXPECT_EQ(w.bytes(), 60u + 4234u);
  }
  const auto bytes = f.read();
  ASSERT_EQ(bytes.size(), 24u + 16 + 60 + 16 + 4234);
  // First record header, by offset.
  EXPECT_EQ(le32(bytes, 24), 1'700'000'000u);
  EXPECT_EQ(le32(bytes, 28), 123'456'789u);
  EXPECT_EQ(le32(bytes, 32), 60u);
  EXPECT_EQ(le32(bytes, 36), 60u);
  const auto recs = read_records(bytes);
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].data, std::vector<uint8_t>(a->data, a->data + a->len));
  EXPECT_EQ(recs[1].sec, 1'700'000'001u);
  EXPECT_EQ(recs[1].data, std::vector<uint8_t>(b->data, b->data + b->len));
}

TEST(PcapWriter, MicrosecondTimestampsAndSnaplenTruncation) {
  TempFile f;
  auto a = raw_frame(200, 3);
  {
    PcapWriter w;
    ASSERT_EQ(w.open(f.path, PcapTimestamp::kMicro, 0, 100), "");
    ASSERT_TRUE(w.write(*a, 5'000'000'000ull + 987'654'321));
  }
  const auto recs = read_records(f.read());
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].sec, 5u);
  EXPECT_EQ(recs[0].frac, 987'654u);
  EXPECT_EQ(recs[0].incl, 100u);
  EXPECT_EQ(recs[0].orig, 200u);
  EXPECT_EQ(recs[0].data, std::vector<uint8_t>(a->data, a->data + 100));
}

TEST(PcapWriter, FrameLimitClosesTheFile) {
  TempFile f;
  auto a = raw_frame(64, 4);
  PcapWriter w;
  ASSERT_EQ(w.open(f.path, PcapTimestamp::kNano, 3), "");
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(w.write(*a, uint64_t(i)));
  EXPECT_TRUE(w.limit_reached());
  EXPECT_FALSE(w.is_open());
  EXPECT_FALSE(w.write(*a, 9));
  EXPECT_EQ(read_records(f.read()).size(), 3u);
}

TEST(PcapWriter, OpenFailureIsAMessage) {
  PcapWriter w;
  const std::string err = w.open("/nonexistent-dir/x.pcap");
  EXPECT_NE(err.find("/nonexistent-dir/x.pcap"), std::string::npos);
  EXPECT_FALSE(w.is_open());
  Packet p;
  p.len = 60;
  EXPECT_FALSE(w.write(p));
}

TEST(PcapWriter, WriteWithClockStampsNow) {
  TempFile f;
  auto a = raw_frame(60, 5);
  // CLOCK_REALTIME itself: time() reads the coarse clock, which may still
  // say the last second when the writer's stamp already says the next.
  auto now_sec = [] {
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return uint32_t(ts.tv_sec);
  };
  const uint32_t before = now_sec();
  {
    PcapWriter w;
    ASSERT_EQ(w.open(f.path), "");
    ASSERT_TRUE(w.write(*a));
  }
  const auto recs = read_records(f.read());
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_GE(recs[0].sec, before);
  EXPECT_LE(recs[0].sec, now_sec());
}

// ---- Wireshark's view, when tshark is installed ----

bool have_tshark() { return std::system("command -v tshark >/dev/null 2>&1") == 0; }

std::string run(const std::string& cmd) {
  std::string out;
  if (FILE* f = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
    pclose(f);
  }
  return out;
}

std::unique_ptr<Packet> roce(uint8_t opcode, uint32_t payload_len) {
  auto p = std::make_unique<Packet>();
  begin_roce_packet(*p, opcode);
  p->bth()->pkey = 0xffff;
  p->bth()->dest_qp = 0x000123;
  p->bth()->ack_psn = Bth::kAckReq | 0x000456;
  const OpcodeInfo& info = p->info();
  if (info.has(kHasReth)) {
    auto* reth = p->hdr<Reth>(info.reth_off);
    reth->va = 0x7f0000001000ull;
    reth->rkey = 0x1234;
    reth->dma_len = payload_len;
  }
  if (info.has(kHasAeth)) p->hdr<Aeth>(info.aeth_off)->syndrome_msn = 0x1f000007u;
  for (uint32_t i = 0; i < payload_len; ++i) p->payload()[i] = uint8_t(i);
  p->payload_len = payload_len;
  Route r;
  r.src_mac = {0x02, 0, 0, 0, 0, 1};
  r.dst_mac = {0x02, 0, 0, 0, 0, 2};
  r.src_ip = {10, 200, 0, 1};
  r.dst_ip = {10, 200, 0, 2};
  finish_roce_packet(*p, r);
  return p;
}

// ATOMIC WRITE (0x1d, IBA 1.5 annex A19) and its answer, an RDMA READ
// response ONLY of no data. Debian 12's tshark (4.0) has no dissector for
// the opcode: it names it "Unknown (29)" and shows the RETH and the 8 bytes
// as one vendor-specific block; the frame must still be a well-formed
// InfiniBand frame, its headers where Wireshark reads them.
TEST(PcapWriterTshark, AtomicWriteAndItsAnswerDecodeWithoutMalformedPackets) {
  if (!have_tshark()) GTEST_SKIP() << "tshark not installed";
  TempFile f;
  std::vector<std::unique_ptr<Packet>> frames;
  frames.push_back(roce(0x1d, 8));   // RC ATOMIC WRITE: RETH + 8 bytes
  frames.push_back(roce(0x10, 0));   // RC RDMA READ RESPONSE ONLY, no data
  {
    PcapWriter w;
    ASSERT_EQ(w.open(f.path, PcapTimestamp::kNano), "");
    uint64_t t = 1'700'000'000'000'000'000ull;
    for (const auto& p : frames) ASSERT_TRUE(w.write(*p, t += 1000));
  }
  const std::string out = run("tshark -n -r " + f.path +
                              " -T fields -e frame.protocols -e infiniband.bth.opcode"
                              " -e infiniband.bth.destqp -e infiniband.bth.psn -e infiniband.aeth.syndrome"
                              " -e _ws.malformed -e _ws.expert.message 2>/dev/null");
  std::istringstream lines(out);
  std::vector<std::string> rows;
  for (std::string line; std::getline(lines, line);) rows.push_back(line);
  ASSERT_EQ(rows.size(), 2u) << out;
  EXPECT_EQ(rows[0].rfind("eth:ethertype:ip:udp:infiniband\t29\t0x000123\t1110\t\t", 0), 0u) << rows[0];
  EXPECT_EQ(rows[1].rfind("eth:ethertype:ip:udp:infiniband\t16\t0x000123\t1110\t31\t", 0), 0u) << rows[1];
  EXPECT_EQ(out.find("alformed"), std::string::npos) << out;
  const std::string verbose = run("tshark -n -V -r " + f.path + " 2>&1");
  EXPECT_EQ(verbose.find("Malformed"), std::string::npos) << verbose.substr(0, 4000);
  // The RETH (va 0x7f0000001000, R_Key 0x1234, length 8) and the bytes 0..7,
  // in the order the wire carries them.
  EXPECT_NE(verbose.find("00007f000000100000001234000000080001020304050607"), std::string::npos)
      << verbose.substr(0, 4000);
}

TEST(PcapWriterTshark, RoceFramesDecodeAsInfiniBandWithoutMalformedPackets) {
  if (!have_tshark()) GTEST_SKIP() << "tshark not installed";
  TempFile f;
  std::vector<std::unique_ptr<Packet>> frames;
  frames.push_back(roce(0x04, 13));    // RC SEND ONLY, padded payload
  frames.push_back(roce(0x0a, 4096));  // RC RDMA WRITE ONLY (RETH), full 4096 MTU
  frames.push_back(roce(0x11, 0));     // RC ACKNOWLEDGE (AETH)
  frames.push_back(roce(0x0c, 0));     // RC RDMA READ REQUEST
  frames.push_back(roce(0x64, 100));   // UD SEND ONLY (DETH)
  auto arp = std::make_unique<Packet>();
  build_arp_request(*arp, {0x02, 0, 0, 0, 0, 1}, {10, 200, 0, 1}, {10, 200, 0, 2});
  {
    PcapWriter w;
    ASSERT_EQ(w.open(f.path, PcapTimestamp::kNano), "");
    uint64_t t = 1'700'000'000'000'000'000ull;
    for (const auto& p : frames) ASSERT_TRUE(w.write(*p, t += 1000));
    ASSERT_TRUE(w.write(*arp, t += 1000));
  }
  // One line per frame: the protocol stack and, if any, expert messages.
  const std::string out = run("tshark -n -r " + f.path +
                              " -T fields -e frame.protocols -e infiniband.bth.opcode"
                              " -e _ws.malformed -e _ws.expert.message 2>/dev/null");
  std::istringstream lines(out);
  std::vector<std::string> rows;
  for (std::string line; std::getline(lines, line);) rows.push_back(line);
  ASSERT_EQ(rows.size(), frames.size() + 1) << out;
  const char* kOpcodes[] = {"4", "10", "17", "12", "100"};
  for (size_t i = 0; i < frames.size(); ++i) {
    SCOPED_TRACE(rows[i]);
    EXPECT_NE(rows[i].find("eth:ethertype:ip:udp:infiniband"), std::string::npos);
    std::istringstream cols(rows[i]);
    std::string protocols, opcode;
    std::getline(cols, protocols, '\t');
    std::getline(cols, opcode, '\t');
    EXPECT_EQ(opcode, kOpcodes[i]);
    EXPECT_EQ(rows[i].find("alformed"), std::string::npos);
  }
  EXPECT_NE(rows.back().find("eth:ethertype:arp"), std::string::npos) << rows.back();
  EXPECT_EQ(out.find("alformed"), std::string::npos) << out;
  // The verbose dissection has no malformed packet or exception either.
  const std::string verbose = run("tshark -n -V -r " + f.path + " 2>&1");
  EXPECT_EQ(verbose.find("Malformed"), std::string::npos) << verbose.substr(0, 4000);
  EXPECT_NE(verbose.find("InfiniBand"), std::string::npos);
}

}  // namespace
}  // namespace uroce::net
