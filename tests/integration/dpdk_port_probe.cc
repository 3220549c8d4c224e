// One end of the DPDK port smoke test (tests/integration/dpdk_port_test.sh):
// opens a net::DpdkPort (EAL once per process, STYLE.md 19), resolves or
// answers ARP with net::ArpTable/ArpPending, and sends or receives RoCEv2
// frames built by net::begin_roce_packet/finish_roce_packet.
//
//   --mode send|recv          a bounded, windowed transfer of --count frames
//                             of varying size, every byte checked (ICRC too);
//                             the receiver acknowledges every 64 frames and,
//                             when idle, sleeps on a net::AfPacketWakeup fd
//                             (--hold: the receiver keeps every frame it
//                             got until the end and checks each again, so
//                             that the port has to copy once few of its
//                             receive buffers are left, and a buffer the
//                             engine holds is never written)
//   --mode rate-send|rate-recv   raw rate: --size-byte frames for --seconds
//
// Output: key=value lines on stdout ("ready" once the port is open). Exit 0
// when the run met its checks, 1 when it did not, 2 on a setup error.
#include <arpa/inet.h>
#include <poll.h>
#include <time.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "net/af_packet_wakeup.h"
#include "net/arp.h"
#include "net/dpdk_port.h"
#include "net/packet.h"

using namespace uroce::net;

namespace {

constexpr uint32_t kDataQpn = 0x000011;
constexpr uint32_t kAckQpn = 0x000022;
constexpr uint32_t kPollPsn = 0xffffff;  // sender: "are you done?"
constexpr uint32_t kEndPsn = 0xfffffe;   // rate sender: "that was all"
constexpr uint32_t kWindow = 256;        // frames in flight (af_packet ring: 512)
constexpr uint32_t kAckEvery = 64;
constexpr uint64_t kMs = 1'000'000;

struct Options {
  std::string mode, name = "probe", spec;
  Ipv4Addr ip{}, peer{};
  uint32_t count = 1000;
  uint32_t size = 1100;
  double seconds = 2;
  uint16_t mtu = 9000;
  double timeout = 30;
  bool hold = false;
};

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000 + uint64_t(ts.tv_nsec);
}

std::string mac_str(const MacAddr& m) {
  char buf[18];
  std::snprintf(buf, sizeof(buf), "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4],
                m[5]);
  return buf;
}

bool parse_ip(const char* s, Ipv4Addr& out) { return inet_pton(AF_INET, s, out.data()) == 1; }

[[noreturn]] void usage() {
  std::fprintf(stderr,
               "usage: dpdk_port_probe --mode send|recv|rate-send|rate-recv --spec SPEC --ip A "
               "--peer B [--name N] [--count N] [--size BYTES] [--seconds S] [--mtu M] "
               "[--timeout S] [--hold]\n");
  std::exit(2);
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--hold") {
      o.hold = true;
      continue;
    }
    if (i + 1 >= argc) usage();
    const char* v = argv[++i];
    if (a == "--mode") o.mode = v;
    else if (a == "--name") o.name = v;
    else if (a == "--spec") o.spec = v;
    else if (a == "--ip") { if (!parse_ip(v, o.ip)) usage(); }
    else if (a == "--peer") { if (!parse_ip(v, o.peer)) usage(); }
    else if (a == "--count") o.count = uint32_t(std::strtoul(v, nullptr, 0));
    else if (a == "--size") o.size = uint32_t(std::strtoul(v, nullptr, 0));
    else if (a == "--seconds") o.seconds = std::strtod(v, nullptr);
    else if (a == "--mtu") o.mtu = uint16_t(std::strtoul(v, nullptr, 0));
    else if (a == "--timeout") o.timeout = std::strtod(v, nullptr);
    else usage();
  }
  if (o.mode.empty() || o.spec.empty()) usage();
  return o;
}

// Frame n of the checked transfer: RDMA WRITE ONLY, 0..4096 payload bytes.
uint32_t payload_len_of(uint32_t n) { return (n * 37u) % 4097u; }
uint8_t payload_byte(uint32_t n, uint32_t i) { return uint8_t(n * 131u + i * 7u + (i >> 8)); }

// Whole frame of `frame_len` bytes (raw-rate mode): payload beyond 4096 is
// fine for the wire, the receiver only counts.
void build_data(Packet& p, const Route& route, uint32_t psn, uint32_t payload_len, bool pattern) {
  begin_roce_packet(p, 0x0a);  // RC RDMA WRITE ONLY
  p.bth()->pkey = 0xffff;
  p.bth()->dest_qp = kDataQpn;
  p.bth()->ack_psn = psn;
  auto* reth = p.hdr<Reth>(p.info().reth_off);
  reth->va = 0x10000;
  reth->rkey = 0x42;
  reth->dma_len = payload_len;
  if (pattern)
    for (uint32_t i = 0; i < payload_len; ++i) p.payload()[i] = payload_byte(psn, i);
  p.payload_len = payload_len;
  finish_roce_packet(p, route);
}

void build_control(Packet& p, const Route& route, uint8_t opcode, uint32_t qpn, uint32_t psn,
                   uint32_t value) {
  begin_roce_packet(p, opcode);
  p.bth()->pkey = 0xffff;
  p.bth()->dest_qp = qpn;
  p.bth()->ack_psn = psn;
  if (p.info().has(kHasAeth)) {
    p.hdr<Aeth>(p.info().aeth_off)->syndrome_msn = (value & 0x00ffffffu) | (0x1fu << 24);
  } else {
    p.payload_len = 4;
    std::memcpy(p.payload(), &value, 4);
  }
  finish_roce_packet(p, route);
}

// RoCEv2 (IPv4, UDP 4791) BTH offset by a cheap header check, 0 otherwise.
size_t quick_bth(const Packet& p) {
  if (p.len < 14 + 20 + 8 + 12) return 0;
  if (p.data[12] != 0x08 || p.data[13] != 0x00 || p.data[14] != 0x45 || p.data[23] != 17) return 0;
  if (p.data[36] != (kRoceV2Port >> 8) || p.data[37] != (kRoceV2Port & 0xff)) return 0;
  return 42;
}

struct Probe {
  Options opt;
  DpdkPort port;
  PacketPool pool;
  ArpTable arp;
  ArpPending pending{ArpPendingConfig{.max_dests = 4, .max_per_dest = 4,
                                      .retry_interval_ns = 100 * kMs, .max_requests = 100}};
  Route route;  // to the peer, once resolved
  bool resolved = false;
  Packet scratch;

  bool open() {
    DpdkPortConfig c;
    c.engine_name = opt.name;
    c.spec = opt.spec;
    c.mtu = opt.mtu;
    const uint64_t t0 = now_ns();
    const std::string err = port.open(c);
    if (!err.empty()) {
      std::printf("error=%s\n", err.c_str());
      return false;
    }
    std::string args;
    for (const std::string& a : DpdkPort::eal_args()) args += (args.empty() ? "" : " ") + a;
    std::printf("eal_args=%s\nopen_ms=%.1f\nmac=%s\nmtu=%u\ndevice=%s\nlink_up=%d\n",
                args.c_str(), double(now_ns() - t0) / 1e6, mac_str(port.mac()).c_str(),
                port.mtu(), port.device_name().c_str(), int(port.link_up()));
    if (!port.notes().empty()) std::printf("notes=%s\n", port.notes().c_str());
    std::printf("ready\n");
    std::fflush(stdout);
    route.src_mac = port.mac();
    route.src_ip = opt.ip;
    route.dst_ip = opt.peer;
    route.src_port = 0xc011;
    return true;
  }

  void learn_route(uint64_t now) {
    if (resolved) return;
    if (auto mac = arp.lookup(opt.peer, now)) {
      route.dst_mac = *mac;
      resolved = true;
    }
  }

  // Handles ARP (answers, learns, releases frames waiting for the peer);
  // returns true if p was ARP.
  bool handle_arp(Packet* p, uint64_t now) {
    if (!is_arp_frame(*p)) return false;
    if (arp.handle(*p, port.mac(), opt.ip, now, &scratch)) port.tx(&scratch);
    learn_route(now);
    if (resolved) {
      pending.resolved(opt.peer, [&](Packet* q) {
        std::memcpy(q->data, route.dst_mac.data(), 6);
        port.tx(q);
        pool.put(q);
      });
    }
    return true;
  }

  // Sender: resolves the peer (first request at once, retried every 100 ms).
  bool resolve(uint64_t deadline) {
    Packet* first = pool.get();
    build_control(*first, route, 0x04, kDataQpn, kPollPsn, 0);  // harmless poll frame
    if (pending.enqueue(opt.peer, first, now_ns()) == ArpPending::Enqueue::kQueuedSendRequest) {
      build_arp_request(scratch, port.mac(), opt.ip, opt.peer);
      port.tx(&scratch);
    }
    Packet* burst[DpdkPort::kBurst];
    while (!resolved) {
      const uint64_t now = now_ns();
      if (now > deadline) return false;
      const size_t n = port.rx_burst(burst, DpdkPort::kBurst, pool);
      for (size_t i = 0; i < n; ++i) {
        handle_arp(burst[i], now);
        pool.put(burst[i]);
      }
      pending.tick(
          now,
          [&](const Ipv4Addr& ip) {
            build_arp_request(scratch, port.mac(), opt.ip, ip);
            port.tx(&scratch);
          },
          [&](Packet* p) { pool.put(p); });
      port.flush();
      if (!n) sleep_us(50);
    }
    port.flush();
    std::printf("peer_mac=%s\narp_requests=%" PRIu64 "\n", mac_str(route.dst_mac).c_str(),
                pending.counters().requests);
    return true;
  }

  static void sleep_us(long us) {
    timespec ts{0, us * 1000};
    nanosleep(&ts, nullptr);
  }

  void print_port() {
    port.refresh_hw_counters();
    const DpdkPortCounters& c = port.counters();
    std::printf("port_rx_frames=%" PRIu64 "\nport_tx_frames=%" PRIu64 "\nport_tx_ring_full=%" PRIu64
                "\nport_tx_no_mbuf=%" PRIu64 "\nport_rx_missed=%" PRIu64 "\nport_rx_errors=%" PRIu64
                "\nport_tx_errors=%" PRIu64 "\nport_rx_oversize=%" PRIu64 "\nport_rx_in_place=%" PRIu64 "\n",
                c.rx_frames, c.tx_frames, c.tx_ring_full, c.tx_no_mbuf, c.rx_missed, c.rx_errors,
                c.tx_errors, c.rx_oversize, c.rx_in_place);
  }

  // ---- checked transfer ----

  int send() {
    const uint64_t start = now_ns();
    const uint64_t deadline = start + uint64_t(opt.timeout * 1e9);
    if (!resolve(deadline)) {
      std::printf("result=arp_timeout\n");
      return 1;
    }
    const uint64_t t0 = now_ns();
    uint32_t sent = 0, acked = 0;
    uint64_t bytes = 0, last_poll = 0;
    Packet* burst[DpdkPort::kBurst];
    Packet* data = pool.get();
    while (acked < opt.count) {
      const uint64_t now = now_ns();
      if (now > deadline) break;
      bool work = false;
      while (sent < opt.count && sent - acked < kWindow) {
        build_data(*data, route, sent, payload_len_of(sent), true);
        port.tx(data);
        bytes += data->len;
        ++sent;
        work = true;
        if (sent % DpdkPort::kBurst == 0) break;
      }
      port.flush();
      const size_t n = port.rx_burst(burst, DpdkPort::kBurst, pool);
      for (size_t i = 0; i < n; ++i) {
        Packet* p = burst[i];
        if (!handle_arp(p, now) && parse_roce_packet(*p, true) == ParseError::kOk &&
            p->bth()->qpn() == kAckQpn && p->info().has(kHasAeth))
          acked = std::max(acked, p->hdr<Aeth>(p->info().aeth_off)->msn());
        pool.put(p);
      }
      work |= n != 0;
      if (sent == opt.count && acked < opt.count && now - last_poll > 100 * kMs) {
        last_poll = now;  // the last ACK may have been lost: ask again
        build_control(scratch, route, 0x04, kDataQpn, kPollPsn, 0);
        port.tx(&scratch);
        port.flush();
      }
      if (!work) sleep_us(20);
    }
    const double secs = double(now_ns() - t0) / 1e9;
    std::printf("sent=%u\nacked=%u\nbytes=%" PRIu64 "\nseconds=%.3f\n", sent, acked, bytes, secs);
    print_port();
    const bool ok = acked == opt.count && port.counters().tx_ring_full == 0;
    std::printf("result=%s\n", ok ? "ok" : "fail");
    return ok ? 0 : 1;
  }

  int recv() {
    const uint64_t deadline = now_ns() + uint64_t(opt.timeout * 1e9);
    uint32_t received = 0, bad_parse = 0, bad_payload = 0, out_of_order = 0, not_ours = 0;
    uint64_t done_at = 0;
    // Idle: poll the port once more, then block on its socket (readable
    // while a frame waits in its ring).
    AfPacketWakeup wakeup;
    const std::string wakeup_err = wakeup.attach(port.af_packet_socket());
    if (!wakeup_err.empty()) std::printf("wakeup_error=%s\n", wakeup_err.c_str());
    bool last_looked = false;
    uint32_t sleeps = 0, fd_wakeups = 0;
    Packet* burst[DpdkPort::kBurst];
    std::vector<Packet*> held;
    held.reserve(opt.count);
    auto ack = [&]() {
      learn_route(now_ns());
      if (!resolved) return;
      build_control(scratch, route, 0x11, kAckQpn, received, received);  // RC ACKNOWLEDGE
      port.tx(&scratch);
    };
    for (;;) {
      const uint64_t now = now_ns();
      if (now > deadline) break;
      // Once complete, linger 300 ms to answer the sender's polls.
      if (done_at && now - done_at > 300 * kMs) break;
      const size_t n = port.rx_burst(burst, DpdkPort::kBurst, pool);
      for (size_t i = 0; i < n; ++i) {
        Packet* p = burst[i];
        if (handle_arp(p, now)) {
        } else if (!quick_bth(*p)) {
          ++not_ours;
        } else if (parse_roce_packet(*p, true) != ParseError::kOk) {
          ++bad_parse;
          std::printf("bad_frame=%s\n", parse_error_name(parse_roce_packet(*p, true)));
        } else if (p->bth()->qpn() != kDataQpn) {
          ++not_ours;
        } else if (p->bth()->psn() == kPollPsn) {
          ack();
        } else {
          const uint32_t psn = p->bth()->psn();
          if (psn != received) {
            ++out_of_order;
          } else {
            const uint32_t len = payload_len_of(psn);
            bool good = p->opcode == 0x0a && p->payload_len == len;
            for (uint32_t k = 0; good && k < len; ++k) good = p->payload()[k] == payload_byte(psn, k);
            if (!good) ++bad_payload;
            if (opt.hold && good) {
              held.push_back(p);
              p = nullptr;
            }
            ++received;
            if (received % kAckEvery == 0 || received == opt.count) ack();
            if (received == opt.count) done_at = now;
          }
        }
        if (p) pool.put(p);
      }
      port.flush();
      if (n) {
        last_looked = false;
      } else if (!last_looked) {
        last_looked = true;  // the next iteration is the last poll before blocking
      } else if (wakeup.is_attached()) {
        ++sleeps;
        pollfd pfd = {wakeup.fd(), POLLIN, 0};
        if (poll(&pfd, 1, 50) == 1) ++fd_wakeups;
        last_looked = false;
      } else {
        sleep_us(20);
      }
    }
    learn_route(now_ns());
    // Every frame held is still the one received (its buffer was not lent
    // to the driver again).
    uint32_t held_changed = 0;
    for (Packet* p : held) {
      const uint32_t psn = p->bth()->psn();
      bool same = p->payload_len == payload_len_of(psn);
      for (uint32_t k = 0; same && k < p->payload_len; ++k) same = p->payload()[k] == payload_byte(psn, k);
      held_changed += !same;
      pool.put(p);
    }
    if (opt.hold) std::printf("held=%zu\nheld_changed=%u\n", held.size(), held_changed);
    std::printf("sleeps=%u\nfd_wakeups=%u\n", sleeps, fd_wakeups);
    std::printf("received=%u\nbad_parse=%u\nbad_payload=%u\nout_of_order=%u\nnot_ours=%u\n",
                received, bad_parse, bad_payload, out_of_order, not_ours);
    std::printf("learned_peer_mac=%s\n", resolved ? mac_str(route.dst_mac).c_str() : "none");
    print_port();
    const bool ok = received == opt.count && !bad_parse && !bad_payload && !out_of_order;
    std::printf("result=%s\n", ok ? "ok" : "fail");
    return ok ? 0 : 1;
  }

  // ---- raw rate ----

  int rate_send() {
    const uint64_t deadline = now_ns() + uint64_t(opt.timeout * 1e9);
    if (!resolve(deadline)) {
      std::printf("result=arp_timeout\n");
      return 1;
    }
    const uint32_t headers = 14 + 20 + 8 + 28 + 4;  // Ethernet, IPv4, UDP, BTH+RETH, ICRC
    if (opt.size < headers || opt.size > kFrameCapacity) {
      std::printf("error=size must be %u..%zu\n", headers, kFrameCapacity);
      return 2;
    }
    Packet* data = pool.get();
    build_data(*data, route, 0, opt.size - headers, false);
    sleep_us(100'000);  // let the receiver settle after the ARP exchange
    const uint64_t before = port.counters().tx_frames;
    const uint64_t t0 = now_ns(), end = t0 + uint64_t(opt.seconds * 1e9);
    uint64_t offered = 0;
    while (now_ns() < end) {
      for (size_t i = 0; i < DpdkPort::kBurst; ++i) port.tx(data);
      offered += DpdkPort::kBurst;
    }
    port.flush();
    const double secs = double(now_ns() - t0) / 1e9;
    const uint64_t tx_frames = port.counters().tx_frames - before;
    for (int i = 0; i < 10; ++i) {  // the receiver stops at the first one
      build_control(scratch, route, 0x04, kDataQpn, kEndPsn, uint32_t(tx_frames));
      port.tx(&scratch);
      port.flush();
      sleep_us(10'000);
    }
    std::printf("offered=%" PRIu64 "\nsent=%" PRIu64 "\nseconds=%.3f\ntx_rate_pps=%.0f\n",
                offered, tx_frames, secs, double(tx_frames) / secs);
    print_port();
    std::printf("result=ok\n");
    return 0;
  }

  int rate_recv() {
    const uint64_t deadline = now_ns() + uint64_t(opt.timeout * 1e9);
    uint64_t frames = 0, bytes = 0, first = 0, last = 0, sender_count = 0;
    Packet* burst[DpdkPort::kBurst];
    bool end = false;
    while (!end && now_ns() < deadline) {
      const size_t n = port.rx_burst(burst, DpdkPort::kBurst, pool);
      const uint64_t now = n ? now_ns() : 0;
      for (size_t i = 0; i < n; ++i) {
        Packet* p = burst[i];
        if (handle_arp(p, now)) {
        } else if (size_t bth = quick_bth(*p)) {
          const uint8_t opcode = p->data[bth];
          const uint32_t psn = uint32_t(p->data[bth + 9]) << 16 | p->data[bth + 10] << 8 | p->data[bth + 11];
          if (opcode == 0x0a) {
            if (!first) first = now;
            last = now;
            ++frames;
            bytes += p->len;
          } else if (psn == kEndPsn && parse_roce_packet(*p, true) == ParseError::kOk) {
            std::memcpy(&sender_count, p->payload(), 4);
            end = true;
          }
        }
        pool.put(p);
      }
      port.flush();
      if (!n && !first) sleep_us(20);
    }
    const double secs = first && last > first ? double(last - first) / 1e9 : 0;
    std::printf("frames=%" PRIu64 "\nbytes=%" PRIu64 "\nseconds=%.3f\n", frames, bytes, secs);
    if (secs > 0)
      std::printf("rx_rate_pps=%.0f\nrx_rate_gbps=%.3f\n", double(frames) / secs,
                  double(bytes) * 8 / secs / 1e9);
    std::printf("sender_tx_frames=%" PRIu64 "\n", sender_count);
    print_port();
    const bool ok = frames > 0 && end;
    std::printf("result=%s\n", ok ? "ok" : "fail");
    return ok ? 0 : 1;
  }
};

}  // namespace

int main(int argc, char** argv) {
  Probe probe;
  probe.opt = parse_args(argc, argv);
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (!probe.open()) return 2;
  int rc = 2;
  if (probe.opt.mode == "send") rc = probe.send();
  else if (probe.opt.mode == "recv") rc = probe.recv();
  else if (probe.opt.mode == "rate-send") rc = probe.rate_send();
  else if (probe.opt.mode == "rate-recv") rc = probe.rate_recv();
  else usage();
  probe.port.close();
  return rc;
}
