#!/usr/bin/env python3
"""uroce bench: uroce's speed beside the baselines that judge it, in one run.

    uroce bench [--quick] [--out DIR] [--no-two-hosts] [--keep] [--only PARTS]
    uroce bench --against BUILD [--runs N] [--tolerance F] [--quick] [--only PARTS]

`uroce bench` execs this script with --uroce PATH (the uroce command of the
build tree or installation). It

  1. measures the baselines with uroce-bench-baselines (built beside uroce):
     single-core memcpy on buffers larger than the last-level cache, a flag
     bounced between two processes through shared memory, TCP over loopback
     (ping-pong latency and streaming bandwidth per message size);
  2. starts an engine of its own (private runtime directory, device uroce0),
     measures its idle CPU, and runs Debian's unmodified perftest through it:
     ib_write_bw, ib_read_bw, ib_send_bw, ib_write_lat, ib_send_lat,
     ib_read_lat, ib_atomic_bw, 2 B .. 1 MiB (--quick: a few sizes);
     then hardware tag matching (issue 10): uroce-tag-pingpong streaming
     tagged eager 64 B messages and 1 MiB rendezvous, beside ib_send_bw
     --use-srq 64 B and ib_read_bw 1 MiB on the same engine; and raw
     Ethernet (issue 11, as root): raw_ethernet_bw 64 B frames beside
     ib_send_bw -c UD 64 B on the same engine;
  3. full run: one engine serving 16 perftest processes with 64 RC QPs each
     (engine memory per QP), and, when network namespaces can be made (root),
     two engines in two namespaces joined by a veth pair (MTU 9000) on DPDK
     net_af_packet ports: the raw-frame rate of that port (dpdk_port_probe,
     from the build tree's tests), TCP over the same veth, perftest
     across the engines at path MTU 4096, and raw_ethernet_bw 1500 B frames
     across them beside the port's raw rate for 1500-byte frames;
     and UCX's own perftest (Debian's ucx_perftest) through an engine in
     mlx5 mode: am_bw 1 KiB, put_bw 64 KiB and am_lat over rc_mlx5,
     dc_mlx5 and ud_mlx5 beside rc_verbs and ud_verbs (--only ucx runs it
     with --quick);
  4. prints a table (each figure, its baselines and the ratios), and writes
     results.json, table.md and bench.svg into --out (default
     ./uroce-bench-results).

With --against, it is an A/B instead: this build and BUILD (another build
directory, e.g. a worktree of main built alongside) run the same bench
alternately, --runs times each on the same machine, and the table compares
their medians figure by figure (ab.md, ab.json), naming each figure that came
out worse than BUILD's by more than --tolerance.

Progress goes to stdout while it runs. The exit status is 0 unless something
failed (a run that did not complete, an engine that did not start); the
figures themselves never fail it. Every process runs under `timeout`; the
engines, namespaces and temporary files are removed on exit.
"""

import argparse
import atexit
import datetime
import json
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

KIB = 1024
MIB = 1024 * 1024
MIB_PER_S = float(MIB)  # perftest's "MB/sec" is MiB/s (its --help says so)

ALL_SIZES = [2 ** k for k in range(1, 21)]  # 2 B .. 1 MiB

# Figures of issue 5: (key, description, comparison, bound, unit).
TARGETS = [
    ("write_bw_64k_vs_memcpy", "ib_write_bw 64 KiB >= 50% of memcpy", ">=", 0.5, "ratio"),
    ("send_bw_64b_msg_rate", "ib_send_bw 64 B >= 2 M messages/s", ">=", 2e6, "msg/s"),
    ("send_lat_2b_median", "ib_send_lat 2 B median <= 5 us", "<=", 5.0, "us"),
    ("write_lat_2b_median", "ib_write_lat 2 B median <= 5 us", "<=", 5.0, "us"),
    ("two_hosts_write_bw_64k", "2 engines: ib_write_bw 64 KiB >= 1 GB/s", ">=", 1e9, "B/s"),
    ("two_hosts_write_bw_64k_vs_raw", "2 engines: ib_write_bw 64 KiB >= 60% of raw frames",
     ">=", 0.6, "ratio"),
    ("idle_engine_cpu", "idle engine < 1% of one core over 10 s", "<", 1.0, "%"),
    ("scale_16x64", "1 engine, 16 processes x 64 RC QPs, all passing traffic", "==", 1, "bool"),
    # Issue 10, tag matching.
    ("tm_eager_64b_vs_send_srq", "tagged eager 64 B >= 70% of ib_send_bw --use-srq msg/s", ">=", 0.7, "ratio"),
    ("tm_rndv_1m_vs_read_bw", "tag rendezvous 1 MiB >= 70% of ib_read_bw 1 MiB", ">=", 0.7, "ratio"),
    # Issue 11, raw Ethernet.
    ("raw_bw_64b_vs_send_ud", "raw_ethernet_bw 64 B >= 70% of ib_send_bw UD 64 B frames/s", ">=", 0.7, "ratio"),
    ("two_hosts_raw_bw_1500_vs_raw", "2 engines: raw_ethernet_bw 1500 B >= 80% of raw frames/s", ">=", 0.8,
     "ratio"),
    # Issue 28, two engines near the wire's rate (the default placement, an idle machine).
    ("two_hosts_write_bw_64k_vs_raw_90", "2 engines: ib_write_bw 64 KiB >= 90% of raw frames (issue 28)",
     ">=", 0.9, "ratio"),
    ("two_hosts_raw_bw_1500_vs_raw_90", "2 engines: raw_ethernet_bw 1500 B >= 90% of raw frames/s (issue 28)",
     ">=", 0.9, "ratio"),
]

# raw_ethernet_bw's MACs: the server's flow rule takes the frames to its own.
RAW_MAC_SERVER, RAW_MAC_CLIENT = "02:00:00:00:00:02", "02:00:00:00:00:01"


class BenchError(Exception):
    pass


def fmt_bw(bps):
    if bps is None:
        return "-"
    if bps >= 1e9:
        return "%.2f GB/s" % (bps / 1e9)
    return "%.0f MB/s" % (bps / 1e6) if bps >= 1e7 else "%.1f MB/s" % (bps / 1e6)


def fmt_rate(mps):
    if mps is None:
        return "-"
    return "%.3f M msg/s" % (mps / 1e6)


def fmt_us(us):
    if us is None:
        return "-"
    return "%.2f us" % us if us < 100 else "%.0f us" % us


def fmt_size(n):
    if n >= MIB and n % MIB == 0:
        return "%d MiB" % (n // MIB)
    if n >= KIB and n % KIB == 0:
        return "%d KiB" % (n // KIB)
    return "%d B" % n


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def fmt_ratio(r):
    if r is None:
        return "-"
    return "%.3g x" % r


class Bench:
    def __init__(self, opts):
        self.opts = opts
        self.quick = opts.quick
        self.t0 = time.monotonic()
        self.uroce = os.path.abspath(opts.uroce)
        self.bin_dir = os.path.dirname(self.uroce)
        self.baselines_bin = os.path.join(self.bin_dir, "uroce-bench-baselines")
        self.probe_bin = os.path.join(self.bin_dir, "dpdk_port_probe")
        self.tag_bin = os.path.join(self.bin_dir, "uroce-tag-pingpong")
        self.work = tempfile.mkdtemp(prefix="uroce-bench.", dir="/tmp")
        self.runtime = os.path.join(self.work, "run")
        self.logs = os.path.join(self.work, "logs")
        os.makedirs(self.runtime, mode=0o700)
        os.makedirs(self.logs)
        os.environ["UROCE_RUNTIME_DIR"] = self.runtime
        self.port = 20000 + (os.getpid() % 2000) * 10
        self.children = []
        self.namespaces = []
        self.errors = []
        self.run_count = 0
        self.results = {
            "mode": "quick" if self.quick else "full",
            "machine": {},
            "baselines": {},
            "perftest": {},
            "idle_engine": None,
            "scale": None,
            "two_sessions": None,
            "tag_matching": None,
            "raw_ethernet": None,
            "two_hosts": None,
            "targets": [],
            "table": [],
            "errors": self.errors,
        }

    # ---- plumbing ----

    def log(self, msg):
        print("[%6.1fs] %s" % (time.monotonic() - self.t0, msg), flush=True)

    def error(self, msg):
        self.errors.append(msg)
        self.log("ERROR: " + msg)

    def next_port(self):
        self.port += 1
        return self.port

    def spawn(self, cmd, limit, log_path, new_session=False):
        """Starts cmd under `timeout` in a process group of its own (killpg), in
        the bench's session: server and client run as a script runs them; with
        new_session, in a session of its own, as from another terminal (see
        docs/PERFORMANCE.md, "Two sessions"). Output to log_path."""
        out = open(log_path, "w")
        group = {"start_new_session": True} if new_session else {"process_group": 0}
        p = subprocess.Popen(["timeout", "-k", "5", str(int(limit))] + cmd, stdin=subprocess.DEVNULL,
                             stdout=out, stderr=subprocess.STDOUT, **group)
        out.close()
        self.children.append(p)
        return p

    def run(self, cmd, limit, log_path=None, new_session=False):
        """Runs cmd under `timeout`; returns (rc, output)."""
        if log_path is None:
            self.run_count += 1
            log_path = os.path.join(self.logs, "run%d.log" % self.run_count)
        p = self.spawn(cmd, limit, log_path, new_session)
        rc = p.wait()
        self.children.remove(p)
        with open(log_path, errors="replace") as f:
            return rc, f.read()

    def kill(self, p):
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        if p in self.children:
            self.children.remove(p)

    def start_load(self):
        """--load N: N busy shell loops, each in a session of its own (another
        terminal's job), for the whole run; cleanup() ends them."""
        n = getattr(self.opts, "load", 0) or 0
        self.results["machine"]["load_spinners"] = n
        for _ in range(n):
            p = subprocess.Popen(["sh", "-c", "while :; do :; done"], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            self.children.append(p)
        if n:
            time.sleep(1)  # let the load average see them
            self.log("load: %d busy processes (load average now %.2f)" % (n, os.getloadavg()[0]))

    def cleanup(self):
        for p in list(self.children):
            self.kill(p)
        self.stop_engines()
        for ns in self.namespaces:
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
        self.namespaces = []
        if self.opts.keep or self.errors:
            print("bench files kept in %s" % self.work, flush=True)
        else:
            shutil.rmtree(self.work, ignore_errors=True)

    def runtime_for(self, netns):
        """A host (network namespace) has a runtime directory of its own, as a
        machine would: `uroce run` there sees only that host's engine."""
        if not netns:
            return self.runtime
        d = self.runtime + "-" + netns
        os.makedirs(d, mode=0o700, exist_ok=True)
        return d

    def in_ns(self, netns, cmd):
        if not netns:
            return cmd
        return ["ip", "netns", "exec", netns, "env", "UROCE_RUNTIME_DIR=" + self.runtime_for(netns)] + cmd

    def stop_engines(self):
        dirs = [self.runtime] + [self.runtime + "-" + ns for ns in self.namespaces]
        for d in dirs:
            if os.path.isdir(d):
                subprocess.run(["timeout", "-k", "5", "30", self.uroce, "--runtime-dir", d, "stop", "--all"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def start_engine(self, name, extra=(), netns=None):
        cmd = self.in_ns(netns, [self.uroce, "start", "--name", name] + list(extra))
        rc, out = self.run(cmd, 30)
        runtime = self.runtime_for(netns)
        if rc != 0:
            log = os.path.join(runtime, name + ".log")
            tail = open(log, errors="replace").read()[-2000:] if os.path.exists(log) else ""
            raise BenchError("engine %s did not start (exit %d): %s\n%s" % (name, rc, out.strip(), tail))
        with open(os.path.join(runtime, name + ".pid")) as f:
            return int(f.read().split()[0])

    # Engine counters whose change a run records (spurious ACK timeouts show up here).
    WATCHED_STATS = ("retransmits", "rx_duplicate", "retry_exceeded", "rx_out_of_seq", "nak_sent",
                     "rnr_nak_sent", "memory_faults", "packet_buffers", "rx_missed", "raw_rx_no_recv",
                     "tx_backpressure", "no_packet_buffer")

    def engine_stats(self, name, netns=None):
        cmd = self.in_ns(netns, [self.uroce, "stats", "--name", name])
        try:
            out = subprocess.run(["timeout", "-k", "2", "10"] + cmd, capture_output=True, text=True).stdout
        except OSError:
            return {}
        return {k: int(v) for k, v in re.findall(r"^\s+(\w+) (\d+)", out, re.M)}

    def stats_delta(self, before, after):
        d = {k: after.get(k, 0) - before.get(k, 0) for k in self.WATCHED_STATS if k != "packet_buffers"}
        d = {k: v for k, v in d.items() if v}
        if "packet_buffers" in after:
            d["packet_buffers"] = after["packet_buffers"]
        return d

    def baseline(self, args, limit=60, wrap=()):
        rc, out = self.run(list(wrap) + [self.baselines_bin] + args, limit)
        for line in out.splitlines():
            if line.startswith("{"):
                try:
                    return json.loads(line)
                except ValueError:
                    pass
        raise BenchError("uroce-bench-baselines %s failed (exit %d): %s" % (" ".join(args), rc, out[-500:]))

    # ---- machine ----

    def machine(self):
        m = {"nproc": os.cpu_count(), "kernel": platform.release(), "cpu_model": None,
             "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
             "load_average_start": list(os.getloadavg())}
        try:
            out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
            for line in out.splitlines():
                if line.startswith("Model name:"):
                    m["cpu_model"] = line.split(":", 1)[1].strip()
                elif line.startswith("Hypervisor vendor:"):
                    m["hypervisor"] = line.split(":", 1)[1].strip()
                elif line.startswith("L3 cache:"):
                    m["l3_cache"] = line.split(":", 1)[1].strip()
        except (OSError, subprocess.SubprocessError):
            pass
        try:
            with open("/proc/meminfo") as f:
                m["mem_total_kib"] = int(f.readline().split()[1])
        except (OSError, ValueError, IndexError):
            pass
        try:
            src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            m["git_commit"] = subprocess.run(["git", "-C", src, "rev-parse", "--short", "HEAD"],
                                             capture_output=True, text=True, timeout=10).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            m["git_commit"] = None
        try:
            m["perftest"] = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "perftest"],
                                           capture_output=True, text=True, timeout=10).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            m["perftest"] = None
        self.results["machine"] = m
        self.log("machine: %s, %s cores, kernel %s, load %.2f" %
                 (m["cpu_model"], m["nproc"], m["kernel"], m["load_average_start"][0]))
        if m["load_average_start"][0] > 0.5 * (m["nproc"] or 1):
            self.log("note: the machine is busy (load %.2f on %s cores): other processes take cores from the "
                     "engine and the perftest pair, so figures will be low and noisy" %
                     (m["load_average_start"][0], m["nproc"]))

    # ---- baselines ----

    def baselines(self):
        b = self.results["baselines"]
        secs = 1 if self.quick else 3
        b["memcpy"] = self.baseline(["memcpy", "--seconds", str(secs)])
        self.log("baseline memcpy (%s buffers, LLC %s): %s" % (
            fmt_size(b["memcpy"]["buffer_bytes"]), fmt_size(b["memcpy"]["llc_bytes"]),
            fmt_bw(b["memcpy"]["bytes_per_s"])))
        b["shm_pingpong"] = self.baseline(["shm-pingpong", "--iters", "20000" if self.quick else "100000"])
        self.log("baseline shared-memory flag round trip: %s median" %
                 fmt_us(b["shm_pingpong"]["rtt_median_us"]))
        lat_sizes = [2, 4096, 65536] if self.quick else ALL_SIZES
        bw_sizes = [64, 65536] if self.quick else ALL_SIZES
        # TCP: the best of 3 short runs per size in the full bench (what this machine can do;
        # another busy process shows up as a slow run), one run with --quick.
        reps = 1 if self.quick else 3
        pp, st = [], []
        for size in lat_sizes:
            iters = 2000 if self.quick else (3000 if size <= 64 * KIB else 1000)
            runs = [self.baseline(["tcp-pingpong", "--size", str(size), "--iters", str(iters)]) for _ in range(reps)]
            r = min(runs, key=lambda x: x["rtt_median_us"])
            r["runs_rtt_median_us"] = [x["rtt_median_us"] for x in runs]
            pp.append(r)
        self.log("baseline TCP loopback ping-pong: %s" % ", ".join(
            "%s %s" % (fmt_size(r["size"]), fmt_us(r["rtt_median_us"])) for r in pp))
        for size in bw_sizes:
            runs = [self.baseline(["tcp-stream", "--size", str(size), "--seconds", "0.5" if self.quick else "0.4"])
                    for _ in range(reps)]
            r = max(runs, key=lambda x: x["bytes_per_s"])
            r["runs_bytes_per_s"] = [x["bytes_per_s"] for x in runs]
            st.append(r)
        self.log("baseline TCP loopback stream: %s" % ", ".join(
            "%s %s" % (fmt_size(r["size"]), fmt_bw(r["bytes_per_s"])) for r in st))
        b["tcp_loopback"] = {"tool": "uroce-bench-baselines", "best_of": reps, "pingpong": pp, "stream": st}
        if shutil.which("qperf") and not self.quick:
            b["tcp_loopback"]["qperf"] = self.qperf()

    def qperf(self):
        """Cross-check of the TCP baseline with Debian's qperf, when installed."""
        port = self.next_port()
        server = self.spawn(["qperf", "-lp", str(port)], 60, os.path.join(self.logs, "qperf-server.log"))
        time.sleep(0.5)
        res = {}
        try:
            for test, size in (("tcp_lat", 2), ("tcp_bw", 65536)):
                rc, out = self.run(["qperf", "127.0.0.1", "-lp", str(port), "-t", "2", "-m", str(size),
                                    test], 20)
                m = re.search(r"(latency|bw)\s*=\s*([\d.]+)\s*(\S+)", out)
                if rc == 0 and m:
                    res["%s_%d" % (test, size)] = "%s %s" % (m.group(2), m.group(3))
            self.log("qperf cross-check: %s" % res)
        finally:
            self.kill(server)
        return res

    # ---- perftest ----

    def iterations(self, prog, size):
        if prog.endswith("_lat"):
            if self.quick:
                return 300 if size <= 4096 else 100
            return 2000 if size <= 4096 else (500 if size <= 64 * KIB else 100)
        budget = 64 * MIB if self.quick else 512 * MIB
        # Enough messages that small ones run for a measurable time (at 4 M
        # messages/s, 200 000 take 50 ms; 20 000 were mostly start-up).
        lo, hi = (200, 200000) if self.quick else (500, 1000000)
        return max(lo, min(hi, budget // max(size, 1)))

    def perftest(self, prog, size, iters, dev="uroce0", server_dev=None, server_ns=None, client_ns=None,
                 server_addr="127.0.0.1", extra=(), limit=None, new_sessions=False, seconds=None):
        """Runs one perftest server/client pair; returns the client's parsed figures.
        With `seconds`, perftest's duration mode (-D) instead of `iters` messages."""
        limit = limit or (60 if self.quick else 120)
        count = ["-D", str(seconds)] if seconds else ["-n", str(iters)]
        args = ["-x", "0", "-F"] + count + list(extra)
        if prog != "ib_atomic_bw":
            args += ["-s", str(size)]
        tag = "%s-%s-%d" % (prog, dev, size)
        stats_before = self.engine_stats(dev, client_ns)
        for attempt in range(3):
            port = self.next_port()
            sv_cmd = [self.uroce, "run", "--", prog, "-d", server_dev or dev, "-p", str(port)] + args
            cl_cmd = [self.uroce, "run", "--", prog, "-d", dev, "-p", str(port)] + args + [server_addr]
            sv_cmd = self.in_ns(server_ns, sv_cmd)
            cl_cmd = self.in_ns(client_ns, cl_cmd)
            sv_log = os.path.join(self.logs, "%s.%d.server.log" % (tag, attempt))
            cl_log = os.path.join(self.logs, "%s.%d.client.log" % (tag, attempt))
            server = self.spawn(sv_cmd, limit, sv_log, new_sessions)
            time.sleep(0.3)
            rc, out = 1, ""
            for _ in range(20):  # the client retries while the server starts listening
                started = time.monotonic()
                rc, out = self.run(cl_cmd, limit, cl_log, new_sessions)
                refused = re.search(r"[Cc]ouldn't connect|Unable to init the socket", out)
                if rc == 0 or not refused or server.poll() is not None or time.monotonic() - started > 5:
                    break
                time.sleep(0.2)
            if rc != 0:
                self.kill(server)
            else:
                try:
                    server.wait(15)
                except subprocess.TimeoutExpired:
                    pass
                self.kill(server)
            if rc == 0:
                parsed = self.parse_perftest(prog, out)
                if parsed:
                    parsed["iters"] = iters if not seconds else parsed["iters_done"]
                    if seconds:
                        parsed["seconds"] = seconds
                    parsed["load_average_1min"] = round(os.getloadavg()[0], 2)
                    parsed["engine_counters"] = self.stats_delta(stats_before, self.engine_stats(dev, client_ns))
                    ec = parsed["engine_counters"]
                    if ec.get("retransmits"):
                        self.log("%s %s: %d retransmissions (RNR NAKs sent %d, the rest after ACK timeouts%s)" % (
                            prog, fmt_size(size), ec["retransmits"], ec.get("rnr_nak_sent", 0),
                            "; loopback loses nothing" if client_ns is None else ""))
                    return parsed
                self.log("%s %s: could not read the result; output kept in %s" % (prog, fmt_size(size), cl_log))
            why = "timed out after %d s" % limit if rc in (124, 137) else "exit %d" % rc
            tail = " | ".join(out.strip().splitlines()[-3:])
            self.log("%s %s attempt %d failed (%s): %s" % (prog, fmt_size(size), attempt + 1, why, tail))
        raise BenchError("%s %s on %s failed three times (logs: %s)" % (prog, fmt_size(size), dev, self.logs))

    @staticmethod
    def parse_perftest(prog, out):
        lines = out.splitlines()
        for i, line in enumerate(lines):
            if "#bytes" not in line:
                continue
            for data in lines[i + 1:]:
                nums = data.split()
                if len(nums) < 5 or not re.match(r"^\d+$", nums[0]):
                    continue
                try:
                    v = [float(x) for x in nums]
                except ValueError:
                    continue
                if prog.endswith("_lat"):
                    r = {"size": int(v[0]), "t_min_us": v[2], "t_max_us": v[3], "t_typical_us": v[4],
                         "t_avg_us": v[5], "t_stdev_us": v[6]}
                    if len(v) >= 9:
                        r["p99_us"], r["p999_us"] = v[7], v[8]
                    # ib_send_lat/ib_write_lat report half a round trip; ib_read_lat a whole one.
                    r["kind"] = "round trip" if prog == "ib_read_lat" else "half round trip"
                    return r
                return {"size": int(v[0]), "iters_done": int(v[1]), "bw_peak_bytes_per_s": v[2] * MIB_PER_S,
                        "bw_bytes_per_s": v[3] * MIB_PER_S, "msgs_per_s": v[4] * 1e6}
        return None

    def perftest_suite(self):
        if self.quick:
            plan = [("ib_write_bw", [64, 4096, 65536]), ("ib_send_bw", [64, 65536]),
                    ("ib_read_bw", [65536]), ("ib_atomic_bw", [8]),
                    ("ib_write_lat", [2, 4096]), ("ib_send_lat", [2, 4096]), ("ib_read_lat", [2])]
        else:
            plan = [(p, ALL_SIZES) for p in ("ib_write_bw", "ib_send_bw", "ib_read_bw",
                                             "ib_send_lat", "ib_write_lat", "ib_read_lat")]
            plan.insert(3, ("ib_atomic_bw", [8]))
        pt = self.results["perftest"]
        for prog, sizes in plan:
            pt[prog] = []
            for size in sizes:
                try:
                    r = self.perftest(prog, size, self.iterations(prog, size))
                except BenchError as e:
                    self.error(str(e))
                    continue
                pt[prog].append(r)
                if prog.endswith("_lat"):
                    self.log("%-12s %7s: median %s (p99 %s)" % (prog, fmt_size(size), fmt_us(r["t_typical_us"]),
                                                               fmt_us(r.get("p99_us"))))
                else:
                    self.log("%-12s %7s: %s, %s" % (prog, fmt_size(size), fmt_bw(r["bw_bytes_per_s"]),
                                                    fmt_rate(r["msgs_per_s"])))

    def tag_stream(self, size, count, window):
        """uroce-tag-pingpong -B: the client streams `count` tagged messages
        of `size` bytes to the server; returns the receiving server's figures.
        -P lays its buffers out as perftest does (every tagged buffer and every
        rendezvous send buffer the same one, no byte checked: tools/examples/tag_pingpong.c),
        so a 1 MiB rendezvous reads from and writes to cache-resident memory as
        ib_read_bw 1 MiB does."""
        limit = 60 if self.quick else 120
        args = ["-B", str(count), "-s", str(size), "-w", str(window), "-P"]
        for attempt in range(3):
            port = str(self.next_port())
            sv_log = os.path.join(self.logs, "tag-stream-%d.%d.server.log" % (size, attempt))
            cl_log = os.path.join(self.logs, "tag-stream-%d.%d.client.log" % (size, attempt))
            server = self.spawn([self.uroce, "run", "--", self.tag_bin, "-p", port] + args, limit, sv_log)
            rc, out = self.run([self.uroce, "run", "--", self.tag_bin, "-p", port] + args + ["127.0.0.1"],
                               limit, cl_log)
            try:
                server.wait(15)
            except subprocess.TimeoutExpired:
                pass
            self.kill(server)
            with open(sv_log, errors="replace") as f:
                sv_out = f.read()
            m = re.search(r"stream: received (\d+) \w+ messages of (\d+) bytes in ([0-9.]+) s: ([0-9.]+) msg/s, "
                          r"([0-9.]+) MiB/s", sv_out)
            if rc == 0 and server.returncode == 0 and m:
                return {"size": size, "messages": int(m.group(1)), "window": window, "buffers": "one, as perftest",
                        "seconds": float(m.group(3)),
                        "msgs_per_s": float(m.group(4)), "bw_bytes_per_s": float(m.group(5)) * MIB_PER_S,
                        "load_average_1min": round(os.getloadavg()[0], 2)}
            tail = " | ".join((out.strip() or sv_out.strip()).splitlines()[-3:])
            self.log("tag stream %s attempt %d failed (exit %d): %s" % (fmt_size(size), attempt + 1, rc, tail))
        raise BenchError("uroce-tag-pingpong -B %s failed three times (logs: %s)" % (fmt_size(size), self.logs))

    def tag_matching(self):
        """Tag matching beside the same engine's perftest: eager 64 B messages
        per second against ib_send_bw --use-srq 64 B, rendezvous 1 MiB
        bandwidth against ib_read_bw 1 MiB (issue 10)."""
        tm = self.results["tag_matching"] = {}
        if not os.access(self.tag_bin, os.X_OK):  # an example of the build tree, not installed
            tm["skipped"] = "%s not built" % self.tag_bin
            self.log("tag matching skipped: %s" % tm["skipped"])
            return
        runs = (("send_bw_srq_64b", lambda: self.perftest("ib_send_bw", 64, self.iterations("ib_send_bw", 64),
                                                          extra=["--use-srq"])),
                ("read_bw_1m", lambda: self.perftest("ib_read_bw", MIB, self.iterations("ib_read_bw", MIB))),
                ("eager_64b", lambda: self.tag_stream(64, 50000 if self.quick else 200000, 256)),
                ("rndv_1m", lambda: self.tag_stream(MIB, 200 if self.quick else 1000, 32)))
        for key, fn in runs:
            try:
                tm[key] = fn()
            except BenchError as e:
                self.error("tag matching: %s" % e)
                continue
            self.log("tag matching %-16s %s, %s" % (key, fmt_bw(tm[key]["bw_bytes_per_s"]),
                                                    fmt_rate(tm[key]["msgs_per_s"])))

    # ---- UCX ----

    UCX_PLAN = (
        # key, ucx_perftest arguments, messages (full run; --quick: a fifth)
        ("am_bw_1k", ["-t", "am_bw", "-D", "bcopy", "-s", "1024"], 20000),
        ("put_bw_64k", ["-t", "put_bw", "-D", "zcopy", "-s", "65536"], 2000),
        ("am_lat_8b", ["-t", "am_lat", "-s", "8"], 200),
    )
    UCX_TRANSPORTS = ("rc_verbs", "rc_mlx5", "dc_mlx5", "ud_verbs", "ud_mlx5")

    def ucx_pair(self, tl, args, iters):
        """One ucx_perftest server/client pair on uroce0:1 over transport tl;
        the client's "Final:" figures."""
        limit = 60 if self.quick else 120
        common = ["-d", "uroce0:1", "-x", tl, "-n", str(iters), "-w", "5"] + args
        tag = "ucx-%s-%s" % (tl, "-".join(args[1:2] + args[-1:]))
        for attempt in range(3):
            port = str(self.next_port())
            sv_log = os.path.join(self.logs, "%s.%d.server.log" % (tag, attempt))
            cl_log = os.path.join(self.logs, "%s.%d.client.log" % (tag, attempt))
            server = self.spawn([self.uroce, "run", "--", "ucx_perftest", "-p", port], limit, sv_log)
            time.sleep(0.5)
            rc, out = self.run([self.uroce, "run", "--", "ucx_perftest", "127.0.0.1", "-p", port] + common,
                               limit, cl_log)
            self.kill(server)
            m = re.search(r"^Final:\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+"
                          r"([\d.]+)\s+([\d.]+)", out, re.M)
            if rc == 0 and m:
                v = [float(x) for x in m.groups()]
                return {"iters": int(v[0]), "t_median_us": v[1], "t_avg_us": v[2],
                        "bw_bytes_per_s": v[5] * MIB_PER_S, "msgs_per_s": v[7],
                        "load_average_1min": round(os.getloadavg()[0], 2)}
            self.log("ucx_perftest -x %s %s attempt %d failed (exit %d): %s" % (
                tl, " ".join(args), attempt + 1, rc, " | ".join(out.strip().splitlines()[-2:])))
        raise BenchError("ucx_perftest -x %s %s failed three times (logs: %s)" % (tl, " ".join(args), self.logs))

    def ucx(self):
        """Debian's UCX perftest, unmodified, through an engine in mlx5 mode:
        rc_mlx5, dc_mlx5 and ud_mlx5 (UCX writes its WQEs and reads its CQEs
        in memory) next to rc_verbs and ud_verbs on the same device (issue
        29; dc_mlx5's baseline is rc_verbs, the connected transport it
        stands in for).
        UD transports have no put (UCT's UD has active messages only)."""
        u = self.results["ucx"] = {}
        if not shutil.which("ucx_perftest"):
            u["skipped"] = "ucx_perftest not installed (Debian ucx-utils)"
            self.log("UCX skipped: %s" % u["skipped"])
            return
        self.start_engine("uroce0", extra=["--mlx5"])
        try:
            for tl in self.UCX_TRANSPORTS:
                u[tl] = {}
                for key, args, iters in self.UCX_PLAN:
                    if tl.startswith("ud") and key.startswith("put"):
                        continue
                    n = max(50, iters // 5) if self.quick else iters
                    try:
                        r = u[tl][key] = self.ucx_pair(tl, args, n)
                    except BenchError as e:
                        self.error("UCX: %s" % e)
                        continue
                    self.log("ucx_perftest %-8s %-10s %s, %s, median %s" % (
                        tl, key, fmt_bw(r["bw_bytes_per_s"]), fmt_rate(r["msgs_per_s"]), fmt_us(r["t_median_us"])))
        finally:
            self.stop_engines()

    def raw_ethernet_bw(self, size, seconds, dev="uroce0", server_dev=None, server_ns=None, client_ns=None,
                        extra=()):
        """Debian's raw_ethernet_bw, unmodified: a server receiving on a raw
        packet QP (its flow rule takes the frames to its MAC) and a client
        sending size - 4 byte frames (perftest leaves 4 bytes to the FCS the
        device adds), both in duration mode: a frame that finds no receive
        posted is dropped, as on a NIC, and a fixed count would leave the
        server waiting for it. No TCP handshake (no server address): the
        client starts once the server has attached its MAC. Returns the
        client's figures (frames it sent per second, as every perftest row
        of the bench), with the receiving server's beside them."""
        limit = seconds + (40 if self.quick else 60)
        common = ["-F", "-s", str(size), "-D", str(seconds)] + list(extra)
        tag = "raw_ethernet_bw-%s-%d" % (dev, size)
        stats_before = self.engine_stats(dev, client_ns)
        rx_engine = server_dev or dev
        rx_before = self.engine_stats(rx_engine, server_ns)
        for attempt in range(3):
            port = str(self.next_port())
            sv_cmd = self.in_ns(server_ns, [self.uroce, "run", "--", "raw_ethernet_bw", "-d", server_dev or dev, "-p",
                                            port, "--server", "-B", RAW_MAC_SERVER, "-E", RAW_MAC_CLIENT] + common)
            cl_cmd = self.in_ns(client_ns, [self.uroce, "run", "--", "raw_ethernet_bw", "-d", dev, "-p", port,
                                            "--client", "-B", RAW_MAC_CLIENT, "-E", RAW_MAC_SERVER] + common)
            sv_log = os.path.join(self.logs, "%s.%d.server.log" % (tag, attempt))
            cl_log = os.path.join(self.logs, "%s.%d.client.log" % (tag, attempt))
            server = self.spawn(sv_cmd, limit, sv_log)
            for _ in range(100):  # its rule and receives are in place once it prints its MAC
                with open(sv_log, errors="replace") as f:
                    if "MAC attached" in f.read():
                        break
                if server.poll() is not None:
                    break
                time.sleep(0.1)
            time.sleep(0.2)
            rc, out = self.run(cl_cmd, limit, cl_log)
            try:
                server.wait(seconds + 15)
            except subprocess.TimeoutExpired:
                pass
            self.kill(server)
            with open(sv_log, errors="replace") as f:
                sv_out = f.read()
            parsed = self.parse_perftest("raw_ethernet_bw", out) if rc == 0 else None
            if parsed:
                parsed["iters"] = parsed["iters_done"]
                parsed["seconds"] = seconds
                parsed["frame_bytes"] = size - 4
                parsed["receiver"] = self.parse_perftest("raw_ethernet_bw", sv_out)
                parsed["load_average_1min"] = round(os.getloadavg()[0], 2)
                parsed["engine_counters"] = self.stats_delta(stats_before, self.engine_stats(dev, client_ns))
                # Where the frames the receiver missed went: its port's RX
                # ring (rx_missed) or no receive posted (raw_rx_no_recv).
                parsed["receiver_engine_counters"] = self.stats_delta(
                    rx_before, self.engine_stats(rx_engine, server_ns))
                return parsed
            why = "timed out after %d s" % limit if rc in (124, 137) else "exit %d" % rc
            tail = " | ".join(out.strip().splitlines()[-3:])
            self.log("raw_ethernet_bw %s attempt %d failed (%s): %s" % (fmt_size(size), attempt + 1, why, tail))
        raise BenchError("raw_ethernet_bw %s on %s failed three times (logs: %s)" % (fmt_size(size), dev, self.logs))

    def raw_ethernet(self):
        """Raw packet QPs beside UD on the same engine (issue 11): frames per
        second of raw_ethernet_bw 64 B against ib_send_bw -c UD 64 B, both
        in perftest's duration mode, alternating, each the best of its runs
        (another busy process on the machine only ever slows one down)."""
        rw = self.results["raw_ethernet"] = {}
        if os.geteuid() != 0:  # raw packet QPs need CAP_NET_RAW, as on a NIC
            rw["skipped"] = "raw packet QPs need CAP_NET_RAW (run as root)"
            self.log("raw ethernet skipped: %s" % rw["skipped"])
            return
        secs = 2 if self.quick else 4
        runs = {"send_bw_ud_64b": [], "raw_bw_64b": []}
        for _ in range(1 if self.quick else 2):
            for key, fn in (("send_bw_ud_64b", lambda: self.perftest("ib_send_bw", 64, 0, extra=["-c", "UD"],
                                                                      seconds=secs)),
                            ("raw_bw_64b", lambda: self.raw_ethernet_bw(64, secs))):
                try:
                    runs[key].append(fn())
                except BenchError as e:
                    self.error("raw ethernet: %s" % e)
        for key, rs in runs.items():
            if not rs:
                continue
            best = max(rs, key=lambda r: r["msgs_per_s"])
            best["runs_msgs_per_s"] = [r["msgs_per_s"] for r in rs]
            rw[key] = best
            self.log("raw ethernet %-15s %s (runs: %s)" % (key, fmt_rate(best["msgs_per_s"]),
                                                          ", ".join(fmt_rate(r["msgs_per_s"]) for r in rs)))

    def two_sessions(self):
        """Server and client each in a session of its own, as from two terminals."""
        ts = self.results["two_sessions"] = {}
        for prog, size in (("ib_send_bw", 64), ("ib_send_lat", 2), ("ib_write_lat", 2)):
            try:
                r = self.perftest(prog, size, self.iterations(prog, size), new_sessions=True)
            except BenchError as e:
                self.error("two sessions: %s" % e)
                continue
            ts[prog] = [r]
            if prog.endswith("_lat"):
                self.log("two sessions %-12s %5s: median %s (p99 %s)" % (
                    prog, fmt_size(size), fmt_us(r["t_typical_us"]), fmt_us(r.get("p99_us"))))
            else:
                self.log("two sessions %-12s %5s: %s" % (prog, fmt_size(size), fmt_rate(r["msgs_per_s"])))

    def qperf_uroce(self):
        """Debian's qperf over the engine (its RC tests through rdma_cm):
        rc_lat, and rc_rdma_write_poll_lat, whose two ends spin on memory
        without yielding (the CPU placement's case, docs/consumers.md)."""
        if not shutil.which("qperf"):
            return
        # -cm1 needs the build's drop-in librdmacm (an older build has none).
        env = subprocess.run([self.uroce, "env"], capture_output=True, text=True).stdout
        m = re.search(r"LD_LIBRARY_PATH='([^']*)'", env)
        if not m or not any(os.path.exists(os.path.join(d, "librdmacm.so.1")) for d in m.group(1).split(":")):
            self.log("qperf over uroce skipped: this build has no drop-in librdmacm")
            return
        port = self.next_port()
        server = self.spawn([self.uroce, "run", "--", "qperf", "-lp", str(port)], 60,
                            os.path.join(self.logs, "qperf-uroce-server.log"))
        res = self.results["qperf_uroce"] = {}
        try:
            time.sleep(0.5)
            for test in ("rc_lat", "rc_rdma_write_poll_lat"):
                rc, out = self.run([self.uroce, "run", "--", "qperf", "-cm1", "-lp", str(port), "-t", "2",
                                    "127.0.0.1", test], 30, os.path.join(self.logs, "qperf-uroce-%s.log" % test))
                m = re.search(r"latency\s*=\s*([\d.]+)\s*(ns|us|ms|sec)", out)
                if rc != 0 or not m:
                    self.error("qperf %s over uroce0: exit %d" % (test, rc))
                    continue
                scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "sec": 1e6}[m.group(2)]
                res[test + "_us"] = float(m.group(1)) * scale
                self.log("qperf %-22s: %s" % (test, fmt_us(res[test + "_us"])))
        finally:
            self.kill(server)

    # ---- idle engine, scale ----

    @staticmethod
    def cpu_ticks(pid):
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime

    @staticmethod
    def rss_kib(pid, key="VmRSS"):
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
        return None

    @staticmethod
    def engine_rss_kib(pid):
        """The engine's resident memory without its clients' registered memory: the
        MR pages it maps from clients' memfds (/memfd:uroce-mr) are theirs."""
        total, counting = 0, True
        try:
            with open("/proc/%d/smaps" % pid) as f:
                for line in f:
                    if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                        counting = "/memfd:uroce-mr" not in line
                    elif counting and line.startswith("Rss:"):
                        total += int(line.split()[1])
        except OSError:
            return None
        return total

    def idle_engine(self, pid):
        secs = 3.0 if self.quick else 10.0
        time.sleep(0.5)
        hz = os.sysconf("SC_CLK_TCK")
        a, t = self.cpu_ticks(pid), time.monotonic()
        time.sleep(secs)
        b, t2 = self.cpu_ticks(pid), time.monotonic()
        pct = 100.0 * (b - a) / hz / (t2 - t)
        self.results["idle_engine"] = {"seconds": round(t2 - t, 2), "cpu_percent_of_one_core": round(pct, 3),
                                       "rss_kib": self.rss_kib(pid)}
        self.log("idle engine over %.0f s: %.2f%% of one core, RSS %d KiB" % (secs, pct, self.rss_kib(pid)))

    def scale_run(self, engine_pid, pairs, qps, depth, size, iters, label):
        """`pairs` ib_write_bw pairs with `qps` RC QPs each, all at once; engine RSS and counters."""
        procs = 2 * pairs
        self.log("%s: %d perftest processes with %d RC QPs each (ib_write_bw -q %d -t %s -s %d -n %d)..." % (
            label, procs, qps, qps, depth or "128 (default)", size, iters))
        base_rss = self.engine_rss_kib(engine_pid)
        stats_before = self.engine_stats("uroce0")
        limit = 120 if self.quick else 300
        common = ["ib_write_bw", "-d", "uroce0", "-x", "0", "-F", "-q", str(qps), "-s", str(size), "-n", str(iters)]
        if depth:
            common += ["-t", str(depth)]
        servers, clients, logs = [], [], []
        ports = [self.next_port() for _ in range(pairs)]
        for i, port in enumerate(ports):
            servers.append(self.spawn([self.uroce, "run", "--"] + common + ["-p", str(port)], limit,
                                      os.path.join(self.logs, "%s%d.server.log" % (label, i))))
        time.sleep(1.0)
        for i, port in enumerate(ports):
            logs.append(os.path.join(self.logs, "%s%d.client.log" % (label, i)))
            clients.append(self.spawn([self.uroce, "run", "--"] + common + ["-p", str(port), "127.0.0.1"], limit,
                                      logs[-1]))
        peak = base_rss
        t0 = time.monotonic()
        while any(p.poll() is None for p in clients):
            peak = max(peak, self.engine_rss_kib(engine_pid) or 0)
            time.sleep(0.1)
        elapsed = time.monotonic() - t0
        ok, total_bw, failures = 0, 0.0, []
        for c, log in zip(clients, logs):
            rc = c.wait()
            self.children.remove(c)
            with open(log, errors="replace") as f:
                out = f.read()
            r = self.parse_perftest("ib_write_bw", out)
            if rc == 0 and r:
                ok += 1
                total_bw += r["bw_bytes_per_s"]
            else:
                m = re.search(r"Failed status (\d+)", out)
                failures.append("exit %d%s" % (rc, ", completion status %s" % m.group(1) if m else ""))
        for sv in servers:
            try:
                sv.wait(15)
            except subprocess.TimeoutExpired:
                pass
            self.kill(sv)
        total_qps = procs * qps
        stats_after = self.engine_stats("uroce0")
        # Frame buffers the pool grew by during the run (about 4.25 KiB each: a 4096-byte MTU
        # frame and its headers), so that what is left is per-QP state.
        pool_kib = (stats_after.get("packet_buffers", 0) - stats_before.get("packet_buffers", 0)) * 4.25
        res = {"processes": procs, "qps_per_process": qps, "total_qps": total_qps, "tx_depth": depth or 128,
               "pairs": pairs, "pairs_ok": ok, "failures": failures, "size": size, "iters_per_qp": iters,
               "seconds": round(elapsed, 2), "aggregate_bw_bytes_per_s": total_bw,
               "engine_rss_idle_kib": base_rss, "engine_rss_peak_kib": peak,
               "engine_kib_per_qp": round((peak - base_rss) / total_qps, 2) if peak and base_rss else None,
               "engine_packet_pool_growth_kib": round(pool_kib),
               "engine_kib_per_qp_without_packet_pool":
                   round(max(0.0, peak - base_rss - pool_kib) / total_qps, 2) if peak and base_rss else None,
               "engine_counters": self.stats_delta(stats_before, stats_after)}
        self.log("%s: %d/%d pairs passed traffic, %s aggregate, engine RSS (without clients' MR pages) %d -> %d KiB (%.1f KiB per QP, "
                 "%.1f KiB per QP without the packet pool's growth), counters %s" % (
                     label, ok, pairs, fmt_bw(total_bw), base_rss, peak, res["engine_kib_per_qp"] or 0,
                     res["engine_kib_per_qp_without_packet_pool"] or 0, res["engine_counters"]))
        return res

    def scale(self, engine_pid):
        # Every QP gets 4 outstanding 4 KiB writes: 16 x 64 x 4 = 4096 frames in flight
        # in the one engine. (perftest's default of 128 per QP is the second run.)
        # The iterations are a multiple of the CQ moderation (-t 4 makes it 4; 100 at the
        # default depth): perftest 4.5-0.17 (Debian 12's) counts a whole moderation for the
        # last completion of a QP, so with -n 50 each QP counted 52 and the total of -n x QPs
        # was reached while the QP counted last still had writes to post (8 QPs: 7 x 52 + 36,
        # 14 to go; the engine serves QPs in turn), and its client spun without polling
        # again (the quick run lost one pair of two in about half the runs).
        if self.quick:
            self.results["scale"] = self.scale_run(engine_pid, 2, 8, 4, 4096, 48, "scale")
            return
        self.results["scale"] = self.scale_run(engine_pid, 8, 64, 4, 4096, 200, "scale")
        self.results["scale_default_depth"] = self.scale_run(engine_pid, 1, 64, None, 4096, 200,
                                                             "scale_default_depth")

    # ---- two engines over a veth pair ----

    def two_hosts(self):
        tag = "%d" % (os.getpid() % 100000)
        ns_a, ns_b = "ubench-a-" + tag, "ubench-b-" + tag
        veth_a, veth_b = "uba" + tag, "ubb" + tag
        net = "10.232.%d" % (os.getpid() % 200)
        kern_a, kern_b = net + ".1", net + ".2"
        eng_a, eng_b = net + ".11", net + ".12"
        probe_a, probe_b = net + ".21", net + ".22"
        if os.geteuid() != 0 or subprocess.run(["ip", "netns", "add", ns_a], stderr=subprocess.DEVNULL).returncode:
            self.results["two_hosts"] = {"skipped": "cannot create network namespaces (needs root)"}
            self.log("two hosts: skipped (cannot create network namespaces)")
            return
        self.namespaces.append(ns_a)
        if subprocess.run(["ip", "netns", "add", ns_b]).returncode:
            raise BenchError("cannot create namespace " + ns_b)
        self.namespaces.append(ns_b)
        setup = [["ip", "link", "add", veth_a, "netns", ns_a, "mtu", "9000", "type", "veth", "peer", "name",
                  veth_b, "netns", ns_b, "mtu", "9000"]]
        for ns, dev, addr in ((ns_a, veth_a, kern_a), (ns_b, veth_b, kern_b)):
            setup += [["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.%s.disable_ipv6=1" % dev],
                      ["ip", "-n", ns, "link", "set", "lo", "up"],
                      ["ip", "-n", ns, "link", "set", dev, "up"],
                      ["ip", "-n", ns, "addr", "add", addr + "/24", "dev", dev]]
        for cmd in setup:
            if subprocess.run(cmd, stderr=subprocess.DEVNULL).returncode:
                raise BenchError("two hosts: setup failed: " + " ".join(cmd))
        th = {"veth_mtu": 9000, "path_mtu": 4096}
        self.results["two_hosts"] = th
        self.log("two hosts: namespaces %s and %s, veth pair (MTU 9000)" % (ns_a, ns_b))

        # The port's own limit: raw frames, one sender and one receiver (no engine running yet).
        th["raw_frames"] = []
        if os.access(self.probe_bin, os.X_OK):
            for frame in (4200, 1500, 1100):
                r = self.raw_rate(ns_a, ns_b, veth_a, veth_b, probe_a, probe_b, frame, tag)
                if r:
                    th["raw_frames"].append(r)
        else:
            th["raw_frames_skipped"] = "dpdk_port_probe not built (%s)" % self.probe_bin
            self.log("two hosts: raw-frame rate skipped: %s not built" % self.probe_bin)

        # TCP over the same veth: the receiver (stream) or echoer (ping-pong) in B, the other side in A.
        tcp = {}
        for key, mode, size, extra in (("stream_64k", "tcp-stream", 65536, ["--seconds", "2"]),
                                       ("pingpong_2b", "tcp-pingpong", 2, ["--iters", "10000"])):
            port = self.next_port()
            common = [mode, "--size", str(size)] + extra
            listen_log = os.path.join(self.logs, "veth-%s.listen.log" % mode)
            listen = self.spawn(["ip", "netns", "exec", ns_b, self.baselines_bin] + common +
                                ["--listen", "%s:%d" % (kern_b, port)], 60, listen_log)
            try:
                rc, out = self.run(["ip", "netns", "exec", ns_a, self.baselines_bin] + common +
                                   ["--connect", "%s:%d" % (kern_b, port)], 60)
                listen.wait(30)
                if mode == "tcp-stream":
                    with open(listen_log, errors="replace") as f:
                        out = f.read()
                lines = [l for l in out.splitlines() if l.startswith("{")]
                if not lines:
                    raise BenchError("%s over the veth failed: %s" % (mode, out[-300:]))
                tcp[key] = json.loads(lines[-1])
            except subprocess.TimeoutExpired:
                raise BenchError("%s over the veth did not finish" % mode)
            finally:
                self.kill(listen)
        th["tcp"] = tcp
        self.log("two hosts: TCP over the veth: 64 KiB stream %s, 2 B round trip %s" % (
            fmt_bw(tcp["stream_64k"]["bytes_per_s"]), fmt_us(tcp["pingpong_2b"]["rtt_median_us"])))

        # Two engines on DPDK net_af_packet ports.
        self.start_engine("hostA", ["--port", "net_af_packet0,iface=" + veth_a, "--ip", eng_a], netns=ns_a)
        self.start_engine("hostB", ["--port", "net_af_packet0,iface=" + veth_b, "--ip", eng_b], netns=ns_b)
        runs = {"ib_write_bw": [4096, 65536] if self.quick else [64, 1024, 4096, 16384, 65536, 262144, 1048576],
                "ib_send_lat": [2]}
        for prog, sizes in runs.items():
            th[prog] = []
            for size in sizes:
                try:
                    # Bandwidth for as long as the raw probe sends (2 s; 4 s in a full
                    # run), as perftest's duration mode measures it: a fixed count of
                    # 64 KiB writes took 0.13 s, mostly the connection's start.
                    seconds = (2 if self.quick else 4) if prog == "ib_write_bw" else None
                    r = self.perftest(prog, size, self.iterations(prog, size), dev="hostA", server_dev="hostB",
                                      server_ns=ns_b, client_ns=ns_a, server_addr=kern_b, extra=["-m", "4096"],
                                      seconds=seconds)
                except BenchError as e:
                    self.error(str(e))
                    continue
                r["server_dev"] = "hostB"
                th[prog].append(r)
                if prog.endswith("_lat"):
                    self.log("two hosts %-12s %7s: median %s" % (prog, fmt_size(size), fmt_us(r["t_typical_us"])))
                else:
                    self.log("two hosts %-12s %7s: %s" % (prog, fmt_size(size), fmt_bw(r["bw_bytes_per_s"])))
        # Raw Ethernet between the engines (issue 11): 1500-byte frames out of
        # A's port, steered to B's raw QP, beside the port's raw 1500 B rate.
        if os.geteuid() == 0:
            try:
                r = self.raw_ethernet_bw(1504, 2 if self.quick else 4, dev="hostA", server_dev="hostB",
                                         server_ns=ns_b, client_ns=ns_a)
                th["raw_ethernet_bw"] = [r]
                rc = r.get("receiver_engine_counters") or {}
                self.log("two hosts raw_ethernet_bw %d B frames: %.0f frames/s sent, %s received "
                         "(receiver's port missed %d frames, %d found no receive posted)" % (
                             r["frame_bytes"], r["msgs_per_s"],
                             "%.0f frames/s" % r["receiver"]["msgs_per_s"] if r.get("receiver") else "-",
                             rc.get("rx_missed", 0), rc.get("raw_rx_no_recv", 0)))
            except BenchError as e:
                self.error(str(e))

    def raw_rate(self, ns_a, ns_b, veth_a, veth_b, ip_a, ip_b, frame, tag):
        secs = 2
        rx_log = os.path.join(self.logs, "raw-%d.recv.log" % frame)
        recv = self.spawn(["ip", "netns", "exec", ns_b, self.probe_bin, "--mode", "rate-recv",
                           "--name", "ubr%s-%d" % (tag, frame), "--spec", "net_af_packet0,iface=" + veth_b,
                           "--ip", ip_b, "--peer", ip_a, "--timeout", str(secs + 30)], secs + 60, rx_log)
        for _ in range(300):
            with open(rx_log, errors="replace") as f:
                if re.search(r"^ready$", f.read(), re.M):
                    break
            if recv.poll() is not None:
                break
            time.sleep(0.1)
        rc, out = self.run(["ip", "netns", "exec", ns_a, self.probe_bin, "--mode", "rate-send",
                            "--name", "ubs%s-%d" % (tag, frame), "--spec", "net_af_packet0,iface=" + veth_a,
                            "--ip", ip_a, "--peer", ip_b, "--size", str(frame), "--seconds", str(secs),
                            "--timeout", "30"], 90)
        try:
            recv.wait(40)
        except subprocess.TimeoutExpired:
            pass
        self.kill(recv)
        with open(rx_log, errors="replace") as f:
            rx = dict(re.findall(r"^(\w+)=(.*)$", f.read(), re.M))
        if rc != 0 or "rx_rate_pps" not in rx:
            self.error("raw-frame rate with %d-byte frames failed (sender exit %d, logs %s)" % (frame, rc, self.logs))
            return None
        pps = float(rx["rx_rate_pps"])
        r = {"frame_bytes": frame, "frames_per_s": pps, "bytes_per_s": pps * frame,
             "frames": int(rx.get("frames", 0)), "sender_tx_frames": int(rx.get("sender_tx_frames", 0) or 0)}
        self.log("two hosts: raw %d-byte frames: %.0f frames/s, %s" % (frame, pps, fmt_bw(r["bytes_per_s"])))
        return r

    # ---- summary ----

    def pick(self, prog, size, key, section=None):
        rows = (section if section is not None else self.results["perftest"]).get(prog) or []
        for r in rows:
            if r["size"] == size:
                return r.get(key)
        return None

    def summarize(self):
        b = self.results["baselines"]
        memcpy = b.get("memcpy", {}).get("bytes_per_s")
        shm_rtt = b.get("shm_pingpong", {}).get("rtt_median_us")
        tcp = b.get("tcp_loopback", {})

        def tcp_stream(size, key):
            for r in tcp.get("stream", []):
                if r["size"] == size:
                    return r[key]
            return None

        def tcp_rtt(size):
            for r in tcp.get("pingpong", []):
                if r["size"] == size:
                    return r["rtt_median_us"]
            return None

        rows = []

        def bw_row(label, value, tcp_value, base1=memcpy, base1_label="memcpy", tcp_label="TCP loopback"):
            rows.append({"figure": label, "uroce": fmt_bw(value), "uroce_value": value,
                         "baseline1": "%s %s" % (base1_label, fmt_bw(base1)), "ratio1": ratio(value, base1),
                         "baseline2": "%s %s" % (tcp_label, fmt_bw(tcp_value)), "ratio2": ratio(value, tcp_value)})

        def rate_row(label, value, tcp_value, tcp_label="TCP loopback"):
            rows.append({"figure": label, "uroce": fmt_rate(value), "uroce_value": value,
                         "baseline1": "", "ratio1": None,
                         "baseline2": "%s %s" % (tcp_label, fmt_rate(tcp_value)), "ratio2": ratio(value, tcp_value)})

        def lat_row(label, value, shm, tcp_value, what):
            rows.append({"figure": label, "uroce": fmt_us(value), "uroce_value": value,
                         "baseline1": "shm flag %s %s" % (what, fmt_us(shm)), "ratio1": ratio(value, shm),
                         "baseline2": "TCP loopback %s %s" % (what, fmt_us(tcp_value)),
                         "ratio2": ratio(value, tcp_value)})

        s64k = 65536
        for prog in ("ib_write_bw", "ib_read_bw", "ib_send_bw"):
            v = self.pick(prog, s64k, "bw_bytes_per_s")
            if v is not None:
                bw_row("%s 64 KiB" % prog, v, tcp_stream(s64k, "bytes_per_s"))
        v = self.pick("ib_send_bw", 64, "msgs_per_s")
        if v is not None:
            rate_row("ib_send_bw 64 B", v, tcp_stream(64, "msgs_per_s"))
        v = self.pick("ib_write_bw", 64, "msgs_per_s")
        if v is not None:
            rate_row("ib_write_bw 64 B", v, tcp_stream(64, "msgs_per_s"))
        v = self.pick("ib_atomic_bw", 8, "msgs_per_s")
        if v is not None:
            rate_row("ib_atomic_bw (8 B)", v, tcp_stream(64, "msgs_per_s"), tcp_label="TCP loopback 64 B")
        half = lambda x: x / 2 if x is not None else None
        for prog in ("ib_send_lat", "ib_write_lat"):
            v = self.pick(prog, 2, "t_typical_us")
            if v is not None:
                lat_row("%s 2 B median" % prog, v, half(shm_rtt), half(tcp_rtt(2)), "1/2 RTT")
        v = self.pick("ib_read_lat", 2, "t_typical_us")
        if v is not None:
            lat_row("ib_read_lat 2 B median", v, shm_rtt, tcp_rtt(2), "RTT")
        ts = self.results.get("two_sessions") or {}
        v = self.pick("ib_send_bw", 64, "msgs_per_s", section=ts)
        if v is not None:
            rate_row("two sessions: ib_send_bw 64 B", v, tcp_stream(64, "msgs_per_s"))
        for prog in ("ib_send_lat", "ib_write_lat"):
            v = self.pick(prog, 2, "t_typical_us", section=ts)
            if v is not None:
                lat_row("two sessions: %s 2 B median" % prog, v, half(shm_rtt), half(tcp_rtt(2)), "1/2 RTT")
        qp = self.results.get("qperf_uroce") or {}
        for test, what in (("rc_lat", "1/2 RTT"), ("rc_rdma_write_poll_lat", "1/2 RTT")):
            v = qp.get(test + "_us")
            if v is not None:
                lat_row("qperf %s" % test, v, half(shm_rtt), half(tcp_rtt(2)), what)
        th = self.results.get("two_hosts") or {}
        raw4200 = next((r for r in th.get("raw_frames", []) if r["frame_bytes"] == 4200), None)
        v = self.pick("ib_write_bw", s64k, "bw_bytes_per_s", section=th)
        if v is not None:
            bw_row("2 engines: ib_write_bw 64 KiB", v, (th.get("tcp", {}).get("stream_64k") or {}).get("bytes_per_s"),
                   base1=raw4200["bytes_per_s"] if raw4200 else None, base1_label="raw 4200 B frames",
                   tcp_label="TCP over veth")
        v = self.pick("ib_send_lat", 2, "t_typical_us", section=th)
        if v is not None:
            tcp_pp = (th.get("tcp", {}).get("pingpong_2b") or {}).get("rtt_median_us")
            rows.append({"figure": "2 engines: ib_send_lat 2 B median", "uroce": fmt_us(v), "uroce_value": v,
                         "baseline1": "", "ratio1": None,
                         "baseline2": "TCP over veth 1/2 RTT %s" % fmt_us(half(tcp_pp)), "ratio2": ratio(v, half(tcp_pp))})
        tm = self.results.get("tag_matching") or {}
        tm_value = lambda key, field: (tm.get(key) or {}).get(field)
        if tm.get("eager_64b"):
            v, base = tm_value("eager_64b", "msgs_per_s"), tm_value("send_bw_srq_64b", "msgs_per_s")
            rows.append({"figure": "tag matching: eager 64 B (window %d)" % tm["eager_64b"]["window"],
                         "uroce": fmt_rate(v), "uroce_value": v,
                         "baseline1": "ib_send_bw --use-srq 64 B %s" % fmt_rate(base), "ratio1": ratio(v, base),
                         "baseline2": "", "ratio2": None})
        if tm.get("rndv_1m"):
            v, base = tm_value("rndv_1m", "bw_bytes_per_s"), tm_value("read_bw_1m", "bw_bytes_per_s")
            rows.append({"figure": "tag matching: rendezvous 1 MiB (window %d)" % tm["rndv_1m"]["window"],
                         "uroce": fmt_bw(v), "uroce_value": v,
                         "baseline1": "ib_read_bw 1 MiB %s" % fmt_bw(base), "ratio1": ratio(v, base),
                         "baseline2": "", "ratio2": None})
        rw = self.results.get("raw_ethernet") or {}
        rw_value = lambda key, field: (rw.get(key) or {}).get(field)
        if rw.get("raw_bw_64b"):
            v, base = rw_value("raw_bw_64b", "msgs_per_s"), rw_value("send_bw_ud_64b", "msgs_per_s")
            rows.append({"figure": "raw_ethernet_bw 64 B (frames sent)", "uroce": fmt_rate(v), "uroce_value": v,
                         "baseline1": "ib_send_bw UD 64 B %s" % fmt_rate(base), "ratio1": ratio(v, base),
                         "baseline2": "", "ratio2": None})
        raw1500 = next((r for r in th.get("raw_frames", []) if r["frame_bytes"] == 1500), None)
        th_raw = (th.get("raw_ethernet_bw") or [None])[0]
        th_raw_rx = ((th_raw or {}).get("receiver") or {}).get("msgs_per_s")
        if th_raw:
            base = raw1500["frames_per_s"] if raw1500 else None
            rows.append({"figure": "2 engines: raw_ethernet_bw %d B frames (received)" % th_raw["frame_bytes"],
                         "uroce": fmt_rate(th_raw_rx), "uroce_value": th_raw_rx,
                         "baseline1": "raw 1500 B frames %s" % fmt_rate(base), "ratio1": ratio(th_raw_rx, base),
                         "baseline2": "", "ratio2": None})
        ucx = self.results.get("ucx") or {}
        for tl in ("rc_mlx5", "dc_mlx5", "ud_mlx5"):
            base_tl = "ud_verbs" if tl == "ud_mlx5" else "rc_verbs"
            for key, what, field, fmt in (("am_bw_1k", "am_bw bcopy 1 KiB", "msgs_per_s", fmt_rate),
                                          ("put_bw_64k", "put_bw zcopy 64 KiB", "bw_bytes_per_s", fmt_bw),
                                          ("am_lat_8b", "am_lat 8 B median", "t_median_us", fmt_us)):
                mine, base = (ucx.get(tl) or {}).get(key), (ucx.get(base_tl) or {}).get(key)
                if not mine:
                    continue
                v, b = mine[field], (base or {}).get(field)
                rows.append({"figure": "UCX %s: %s" % (tl, what), "uroce": fmt(v), "uroce_value": v,
                             "baseline1": "%s %s" % (base_tl, fmt(b)) if b is not None else "",
                             "ratio1": ratio(v, b), "baseline2": "", "ratio2": None})
        idle = self.results.get("idle_engine")
        if idle:
            rows.append({"figure": "idle engine CPU (%d s)" % round(idle["seconds"]),
                         "uroce": "%.2f%% of a core" % idle["cpu_percent_of_one_core"],
                         "uroce_value": idle["cpu_percent_of_one_core"], "baseline1": "", "ratio1": None,
                         "baseline2": "", "ratio2": None})
        sc = self.results.get("scale")
        if sc:
            rows.append({"figure": "scale: %d processes x %d RC QPs" % (sc["processes"], sc["qps_per_process"]),
                         "uroce": "%d/%d pairs ok, %s, engine %s KiB/QP (%s without packet pool)" % (
                             sc["pairs_ok"], sc["pairs"], fmt_bw(sc["aggregate_bw_bytes_per_s"]),
                             sc["engine_kib_per_qp"], sc.get("engine_kib_per_qp_without_packet_pool")),
                         "uroce_value": sc["engine_kib_per_qp"], "baseline1": "", "ratio1": None,
                         "baseline2": "", "ratio2": None})
        sd = self.results.get("scale_default_depth")
        if sd:
            rows.append({"figure": "scale: %d processes x %d RC QPs, perftest's default depth 128" % (
                sd["processes"], sd["qps_per_process"]),
                "uroce": "%d/%d pairs ok, %d retransmits" % (sd["pairs_ok"], sd["pairs"],
                                                             sd["engine_counters"].get("retransmits", 0)),
                "uroce_value": sd["pairs_ok"], "baseline1": "", "ratio1": None, "baseline2": "", "ratio2": None})
        self.results["table"] = rows

        # Targets of issue 5.
        measured = {
            "write_bw_64k_vs_memcpy": ratio(self.pick("ib_write_bw", s64k, "bw_bytes_per_s"), memcpy),
            "send_bw_64b_msg_rate": self.pick("ib_send_bw", 64, "msgs_per_s"),
            "send_lat_2b_median": self.pick("ib_send_lat", 2, "t_typical_us"),
            "write_lat_2b_median": self.pick("ib_write_lat", 2, "t_typical_us"),
            "two_hosts_write_bw_64k": self.pick("ib_write_bw", s64k, "bw_bytes_per_s", section=th),
            "two_hosts_write_bw_64k_vs_raw": ratio(self.pick("ib_write_bw", s64k, "bw_bytes_per_s", section=th),
                                                   raw4200["bytes_per_s"] if raw4200 else None),
            "idle_engine_cpu": idle["cpu_percent_of_one_core"] if idle else None,
            "scale_16x64": None,
            "tm_eager_64b_vs_send_srq": ratio(tm_value("eager_64b", "msgs_per_s"),
                                              tm_value("send_bw_srq_64b", "msgs_per_s")),
            "tm_rndv_1m_vs_read_bw": ratio(tm_value("rndv_1m", "bw_bytes_per_s"),
                                           tm_value("read_bw_1m", "bw_bytes_per_s")),
            # Frames sent on one engine (as every perftest row: the client's
            # figure); frames received between two (as the raw rate is).
            "raw_bw_64b_vs_send_ud": ratio(rw_value("raw_bw_64b", "msgs_per_s"),
                                           rw_value("send_bw_ud_64b", "msgs_per_s")),
            "two_hosts_raw_bw_1500_vs_raw": ratio(th_raw_rx, raw1500["frames_per_s"] if raw1500 else None),
        }
        measured["two_hosts_write_bw_64k_vs_raw_90"] = measured["two_hosts_write_bw_64k_vs_raw"]
        measured["two_hosts_raw_bw_1500_vs_raw_90"] = measured["two_hosts_raw_bw_1500_vs_raw"]
        if sc and sc["processes"] >= 16 and sc["qps_per_process"] >= 64:
            measured["scale_16x64"] = 1 if sc["pairs_ok"] == sc["pairs"] else 0
        targets = []
        for key, desc, op, bound, unit in TARGETS:
            m = measured.get(key)
            met = None
            if m is not None:
                met = {"<=": m <= bound, ">=": m >= bound, "<": m < bound, "==": m == bound}[op]
            if key == "idle_engine_cpu" and idle and idle["seconds"] < 9.5:
                met = None  # --quick measures 3 s, not the 10 s of the target
            targets.append({"key": key, "target": desc, "bound": bound, "unit": unit, "measured": m, "met": met})
        self.results["targets"] = targets
        self.results["machine"]["load_average_end"] = list(os.getloadavg())

    def print_table(self):
        rows = self.results["table"]
        head = ("figure", "uroce", "baseline", "ratio", "baseline", "ratio")
        body = [(r["figure"], r["uroce"], r["baseline1"], fmt_ratio(r["ratio1"]) if r["baseline1"] else "",
                 r["baseline2"], fmt_ratio(r["ratio2"]) if r["baseline2"] else "") for r in rows]
        widths = [max(len(str(x[i])) for x in [head] + body) for i in range(len(head))]
        print()
        print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
        print("  ".join("-" * w for w in widths))
        for row in body:
            print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))
        print("(ratio = uroce / baseline)")
        print()
        print("targets (issues 5, 10, 11 and 28):")
        for t in self.results["targets"]:
            state = {True: "met", False: "NOT met", None: "not measured"}[t["met"]]
            m = t["measured"]
            if m is None:
                shown = "-"
            elif t["unit"] == "ratio":
                shown = "%.1f%%" % (100 * m)
            elif t["unit"] == "B/s":
                shown = fmt_bw(m)
            elif t["unit"] == "msg/s":
                shown = fmt_rate(m)
            elif t["unit"] == "us":
                shown = fmt_us(m)
            elif t["unit"] == "%":
                shown = "%.2f%%" % m
            else:
                shown = "yes" if m else "no"
            print("  %-60s %-14s %s" % (t["target"], shown, state))
        print(flush=True)

    def markdown_table(self):
        out = ["| Figure | uroce | Baseline | Ratio | Baseline | Ratio |", "| --- | --- | --- | --- | --- | --- |"]
        for r in self.results["table"]:
            out.append("| %s | %s | %s | %s | %s | %s |" % (
                r["figure"], r["uroce"], r["baseline1"], fmt_ratio(r["ratio1"]) if r["baseline1"] else "",
                r["baseline2"], fmt_ratio(r["ratio2"]) if r["baseline2"] else ""))
        return "\n".join(out) + "\n"

    # ---- plot ----

    def svg(self):
        pt = self.results["perftest"]
        b = self.results["baselines"]
        th = self.results.get("two_hosts") or {}
        colors = {"ib_write_bw": "#1f77b4", "ib_read_bw": "#2ca02c", "ib_send_bw": "#d62728",
                  "ib_write_lat": "#1f77b4", "ib_read_lat": "#2ca02c", "ib_send_lat": "#d62728",
                  "tcp": "#7f7f7f", "base": "#000000", "two": "#9467bd", "raw": "#ff7f0e"}
        bw_series, lat_series = [], []
        for prog in ("ib_write_bw", "ib_read_bw", "ib_send_bw"):
            pts = [(r["size"], r["bw_bytes_per_s"] / 1e9) for r in pt.get(prog, [])]
            if pts:
                bw_series.append((prog + " (1 engine)", colors[prog], pts, False))
        if th.get("ib_write_bw"):
            bw_series.append(("ib_write_bw, 2 engines over veth", colors["two"],
                              [(r["size"], r["bw_bytes_per_s"] / 1e9) for r in th["ib_write_bw"]], False))
        tcp = b.get("tcp_loopback", {})
        if tcp.get("stream"):
            bw_series.append(("TCP loopback stream", colors["tcp"],
                              [(r["size"], r["bytes_per_s"] / 1e9) for r in tcp["stream"]], True))
        hlines_bw = []
        if b.get("memcpy"):
            hlines_bw.append(("memcpy, 1 core (> LLC)", colors["base"], b["memcpy"]["bytes_per_s"] / 1e9))
        for r in th.get("raw_frames", []):
            if r["frame_bytes"] == 4200:
                hlines_bw.append(("raw 4200 B frames on the veth port", colors["raw"], r["bytes_per_s"] / 1e9))
        if (th.get("tcp") or {}).get("stream_64k"):
            hlines_bw.append(("TCP over the veth (64 KiB)", "#8c564b", th["tcp"]["stream_64k"]["bytes_per_s"] / 1e9))
        for prog in ("ib_send_lat", "ib_write_lat", "ib_read_lat"):
            pts = [(r["size"], r["t_typical_us"]) for r in pt.get(prog, [])]
            if pts:
                label = prog + (" (round trip)" if prog == "ib_read_lat" else " (1/2 round trip)")
                lat_series.append((label, colors[prog], pts, False))
        if th.get("ib_send_lat"):
            lat_series.append(("ib_send_lat, 2 engines", colors["two"],
                               [(r["size"], r["t_typical_us"]) for r in th["ib_send_lat"]], False))
        if tcp.get("pingpong"):
            lat_series.append(("TCP loopback 1/2 round trip", colors["tcp"],
                               [(r["size"], r["rtt_median_us"] / 2) for r in tcp["pingpong"]], True))
        hlines_lat = []
        if b.get("shm_pingpong"):
            hlines_lat.append(("shared-memory flag 1/2 round trip", colors["base"], b["shm_pingpong"]["rtt_median_us"] / 2))
        m = self.results["machine"]
        title = "uroce bench (%s) - %s, %s cores, kernel %s, %s" % (
            self.results["mode"], m.get("cpu_model"), m.get("nproc"), m.get("kernel"), (m.get("date") or "")[:10])
        w, h = 1200, 560
        parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
                 'font-family="sans-serif" font-size="12">' % (w, h, w, h),
                 '<rect width="100%" height="100%" fill="white"/>',
                 '<text x="%d" y="22" text-anchor="middle" font-size="15">%s</text>' % (w // 2, esc(title))]
        parts += panel(30, 40, 560, 500, "Bandwidth (GB/s, log)", bw_series, hlines_bw)
        parts += panel(620, 40, 560, 500, "Latency (us, median, log)", lat_series, hlines_lat)
        parts.append("</svg>")
        return "\n".join(parts) + "\n"

    # ---- main ----

    def main(self):
        self.log("uroce bench (%s): work dir %s" % (self.results["mode"], self.work))
        for tool in ("timeout", "ib_write_bw"):
            if not shutil.which(tool):
                raise BenchError("%s not found (Debian packages coreutils, perftest)" % tool)
        for path in (self.uroce, self.baselines_bin):
            if not os.access(path, os.X_OK):
                raise BenchError("%s is not built" % path)
        only = set(self.opts.only.split(",")) if self.opts.only else None
        want = lambda part: only is None or part in only
        self.machine()
        self.start_load()
        if want("baselines"):
            self.baselines()
        if want("perftest") or want("idle") or want("scale") or want("tag_matching") or want("raw_ethernet"):
            pid = self.start_engine("uroce0")
            self.log("engine uroce0 started (pid %d)" % pid)
            if want("idle"):
                self.idle_engine(pid)
            if want("perftest"):
                self.perftest_suite()
                self.two_sessions()
                self.qperf_uroce()
            if want("perftest") or want("tag_matching"):
                self.tag_matching()
            if want("perftest") or want("raw_ethernet"):
                self.raw_ethernet()
            if want("scale"):
                try:
                    self.scale(pid)
                except BenchError as e:
                    self.error(str(e))
            self.stop_engines()
        if (not self.quick and want("ucx")) or (only and "ucx" in only):
            self.ucx()
        if (not self.quick and not self.opts.no_two_hosts and want("two_hosts")) or (only and "two_hosts" in only):
            try:
                self.two_hosts()
            except BenchError as e:
                self.error("two hosts: %s" % e)
            finally:
                self.stop_engines()
                for ns in self.namespaces:
                    subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
                self.namespaces = []
        self.summarize()
        out = os.path.abspath(self.opts.out)
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "results.json"), "w") as f:
            json.dump(self.results, f, indent=1, sort_keys=True)
            f.write("\n")
        with open(os.path.join(out, "table.md"), "w") as f:
            f.write(self.markdown_table())
        with open(os.path.join(out, "bench.svg"), "w") as f:
            f.write(self.svg())
        self.print_table()
        self.log("wrote %s/results.json, table.md, bench.svg" % out)
        if self.errors:
            self.log("%d error(s):" % len(self.errors))
            for e in self.errors:
                print("  " + e)
            return 1
        return 0


def esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def panel(x0, y0, w, h, ylabel, series, hlines):
    """One log-log plot: message size (2 B .. 1 MiB) against the series' values."""
    left, right, top, bottom = 60, 10, 10, 130
    pw, ph = w - left - right, h - top - bottom
    values = [v for _, _, pts, _ in series for _, v in pts if v and v > 0] + [v for _, _, v in hlines if v and v > 0]
    if not values:
        values = [1.0]
    lo = 10 ** math.floor(math.log10(min(values)))
    hi = 10 ** math.ceil(math.log10(max(values)))
    if hi <= lo:
        hi = lo * 10
    xmin, xmax = 1.0, 20.0  # log2 of the size

    def px(size):
        return x0 + left + (math.log2(size) - xmin) / (xmax - xmin) * pw

    def py(v):
        return y0 + top + (1 - (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))) * ph

    out = ['<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#444"/>' % (x0 + left, y0 + top, pw, ph)]
    for k in range(1, 21):
        x = px(2 ** k)
        out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>' % (x, y0 + top, x, y0 + top + ph))
        if k == 1 or k % 2 == 0:
            out.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>' % (
                x, y0 + top + ph + 15, esc(fmt_size(2 ** k))))
    out.append('<text x="%d" y="%d" text-anchor="middle">message size</text>' % (x0 + left + pw // 2, y0 + top + ph + 32))
    d = lo
    while d <= hi * 1.001:
        y = py(d)
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>' % (x0 + left, y, x0 + left + pw, y))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%s</text>' % (x0 + left - 4, y + 4, ("%g" % d)))
        d *= 10
    out.append('<text transform="translate(%d,%d) rotate(-90)" text-anchor="middle">%s</text>' % (
        x0 + 14, y0 + top + ph // 2, esc(ylabel)))
    legend = []
    for label, color, v in hlines:
        if not v or v <= 0:
            continue
        y = py(v)
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-dasharray="6,4" stroke-width="1.5"/>' % (
            x0 + left, y, x0 + left + pw, y, color))
        legend.append((label, color, "6,4", False))
    for label, color, pts, dashed in series:
        pts = sorted((s, v) for s, v in pts if v and v > 0)
        if not pts:
            continue
        path = " ".join("%.1f,%.1f" % (px(s), py(v)) for s, v in pts)
        out.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>' % (
            path, color, ' stroke-dasharray="2,3"' if dashed else ""))
        for s, v in pts:
            out.append('<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>' % (px(s), py(v), color))
        legend.append((label, color, "2,3" if dashed else "", True))
    ly = y0 + top + ph + 50
    for i, (label, color, dash, marker) in enumerate(legend):
        lx = x0 + left + (i % 2) * (pw // 2)
        yy = ly + (i // 2) * 16
        out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>' % (
            lx, yy - 4, lx + 24, yy - 4, color, ' stroke-dasharray="%s"' % dash if dash else ""))
        out.append('<text x="%d" y="%d">%s</text>' % (lx + 30, yy, esc(label)))
    return out


# ---- A/B: two builds, alternating, in one run ----

def build_commit(uroce):
    """The source commit of the build tree a uroce command belongs to (its
    CMakeCache names the source directory), or None for an installation."""
    cache = os.path.join(os.path.dirname(os.path.dirname(uroce)), "CMakeCache.txt")
    try:
        with open(cache) as f:
            src = next((l.split("=", 1)[1].strip() for l in f if l.startswith("CMAKE_HOME_DIRECTORY")), None)
        out = subprocess.run(["git", "-C", src, "describe", "--always", "--dirty"], capture_output=True, text=True)
        return out.stdout.strip() or None
    except (OSError, StopIteration, TypeError):
        return None


def lower_is_better(row):
    return str(row.get("uroce", "")).endswith(" us") or row["figure"].startswith("idle engine")


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return None if n == 0 else (xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2)


def run_ab(opts):
    """Runs this script for two builds alternately (this build and --against),
    --runs times each, the order swapped every round so neither build always
    goes first; prints each figure's median per build and their ratio, and
    writes ab.json and ab.md. A figure counts as lower for this build when its
    median is worse than the other's by more than --tolerance."""
    other = os.path.abspath(opts.against)
    if os.path.isdir(other):
        other = os.path.join(other, "bin", "uroce")
    if not os.access(other, os.X_OK):
        print("uroce bench: --against: %s is not a uroce command or build directory" % opts.against, file=sys.stderr)
        return 2
    builds = [("this", os.path.abspath(opts.uroce)), ("against", other)]
    out = os.path.abspath(opts.out)
    os.makedirs(out, exist_ok=True)
    passed = (["--quick"] if opts.quick else []) + (["--only", opts.only] if opts.only else []) + \
        (["--no-two-hosts"] if opts.no_two_hosts else []) + (["--load", str(opts.load)] if opts.load else [])
    values = {label: {} for label, _ in builds}
    rows_seen = {}
    failures = 0
    t0 = time.monotonic()
    for i in range(opts.runs):
        order = builds if i % 2 == 0 else builds[::-1]
        for label, uroce in order:
            run_dir = os.path.join(out, "%s-%d" % (label, i + 1))
            print("[%6.1fs] A/B run %d/%d: %s (%s)" % (time.monotonic() - t0, i + 1, opts.runs, label, uroce),
                  flush=True)
            with open(run_dir + ".log", "w") as log:
                rc = subprocess.run([sys.executable, os.path.abspath(__file__), "--uroce", uroce, "--out", run_dir]
                                    + passed, stdout=log, stderr=subprocess.STDOUT).returncode
            if rc != 0:
                failures += 1
                print("  run failed (exit %d): see %s.log" % (rc, run_dir), flush=True)
            try:
                with open(os.path.join(run_dir, "results.json")) as f:
                    table = json.load(f)["table"]
            except (OSError, ValueError, KeyError):
                continue
            for row in table:
                v = row.get("uroce_value")
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    rows_seen.setdefault(row["figure"], row)
                    values[label].setdefault(row["figure"], []).append(v)
    report = {"runs": opts.runs, "args": passed, "failed_runs": failures, "tolerance": opts.tolerance,
              "builds": {label: {"uroce": u, "commit": build_commit(u)} for label, u in builds}, "figures": []}
    lower = []
    for figure, row in rows_seen.items():
        a, b = median(values["this"].get(figure, [])), median(values["against"].get(figure, []))
        r = ratio(a, b)
        better_low = lower_is_better(row)
        worse = r is not None and (r > 1 + opts.tolerance if better_low else r < 1 - opts.tolerance)
        if worse:
            lower.append(figure)
        report["figures"].append({"figure": figure, "this": values["this"].get(figure, []),
                                  "against": values["against"].get(figure, []), "this_median": a,
                                  "against_median": b, "ratio": r, "lower_is_better": better_low, "worse": worse})
    report["worse"] = lower
    fmt = lambda row, v: (fmt_us(v) if str(row.get("uroce", "")).endswith(" us") else
                          fmt_rate(v) if "msg/s" in str(row.get("uroce", "")) else
                          fmt_bw(v) if "/s" in str(row.get("uroce", "")) else "-" if v is None else "%.3g" % v)
    head = "| figure | this (%s) | against (%s) | this / against | |\n|---|---|---|---|---|\n" % (
        report["builds"]["this"]["commit"] or "this", report["builds"]["against"]["commit"] or "against")
    lines = ["| %s | %s | %s | %s | %s |" % (f["figure"], fmt(rows_seen[f["figure"]], f["this_median"]),
                                             fmt(rows_seen[f["figure"]], f["against_median"]), fmt_ratio(f["ratio"]),
                                             "worse" if f["worse"] else "")
             for f in report["figures"]]
    md = "Medians of %d runs each, alternating (%s).\n\n" % (opts.runs, " ".join(passed) or "full") + head + \
        "\n".join(lines) + "\n"
    with open(os.path.join(out, "ab.json"), "w") as f:
        json.dump(report, f, indent=1, sort_keys=True)
        f.write("\n")
    with open(os.path.join(out, "ab.md"), "w") as f:
        f.write(md)
    print()
    print(md)
    print("wrote %s/ab.json, ab.md; %d failed run(s); %d figure(s) worse by more than %d%%" % (
        out, failures, len(lower), round(opts.tolerance * 100)))
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(prog="uroce bench", description="uroce's speed beside its baselines.")
    ap.add_argument("--quick", action="store_true", help="a few sizes, short runs (under 2 minutes)")
    ap.add_argument("--out", default="uroce-bench-results", help="directory for results.json, table.md, bench.svg")
    ap.add_argument("--no-two-hosts", action="store_true", help="skip the two-engine runs of the full bench")
    ap.add_argument("--keep", action="store_true", help="keep the logs and runtime directory")
    ap.add_argument("--only", metavar="PARTS", help="comma-separated parts to run: baselines, idle, perftest, "
                    "tag_matching, raw_ethernet, scale, ucx, two_hosts (default: all; ucx and two_hosts not with --quick)")
    ap.add_argument("--against", metavar="BUILD", help="A/B: run this build and BUILD (another build directory "
                    "or uroce command) alternately, --runs times each, and compare the medians")
    ap.add_argument("--runs", type=int, default=5, help="runs per build with --against (default 5)")
    ap.add_argument("--tolerance", type=float, default=0.05,
                    help="with --against: how much worse a median may be before it is called worse (default 0.05)")
    ap.add_argument("--load", type=int, default=0, metavar="N",
                    help="N busy processes beside the runs (each `sh -c 'while :; do :; done'` in a session of its "
                         "own, as a job started from another terminal; none by default): the documented load")
    ap.add_argument("--uroce", default=None, help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if not opts.uroce:
        build = os.environ.get("UROCE_BUILD_DIR") or os.path.join(
            os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "build")
        opts.uroce = os.path.join(build, "bin", "uroce")
    if opts.against:
        return run_ab(opts)
    bench = Bench(opts)
    atexit.register(bench.cleanup)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, lambda *_: sys.exit(130))
    try:
        return bench.main()
    except BenchError as e:
        bench.error(str(e))
        return 1


if __name__ == "__main__":
    sys.exit(main())
