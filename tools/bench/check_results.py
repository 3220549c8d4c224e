#!/usr/bin/env python3
"""Checks that a `uroce bench` results.json has every expected key.

    check_results.py RESULTS.JSON

Exit 0 when it does, 1 (with the missing keys listed) when it does not. The
figures themselves are not judged: the bench fails on errors, not numbers.
"""
import json
import sys

PERFTEST = ("ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_write_lat", "ib_send_lat", "ib_read_lat",
            "ib_atomic_bw")
BW_KEYS = ("size", "iters", "bw_bytes_per_s", "bw_peak_bytes_per_s", "msgs_per_s")
LAT_KEYS = ("size", "iters", "t_typical_us", "t_min_us", "t_max_us", "t_avg_us", "kind")


def main():
    with open(sys.argv[1]) as f:
        r = json.load(f)
    missing = []

    def need(obj, path, keys):
        if not isinstance(obj, dict):
            missing.append("%s (not an object)" % path)
            return
        for k in keys:
            if k not in obj or obj[k] is None:
                missing.append("%s.%s" % (path, k))

    need(r, "", ("mode", "machine", "baselines", "perftest", "idle_engine", "scale", "targets", "table",
                 "errors"))
    need(r.get("machine"), "machine", ("nproc", "kernel", "cpu_model", "date", "load_average_start"))
    b = r.get("baselines") or {}
    need(b, "baselines", ("memcpy", "shm_pingpong", "tcp_loopback"))
    need(b.get("memcpy"), "baselines.memcpy", ("bytes_per_s", "buffer_bytes", "llc_bytes"))
    need(b.get("shm_pingpong"), "baselines.shm_pingpong", ("rtt_median_us", "rtt_p99_us"))
    tcp = b.get("tcp_loopback") or {}
    need(tcp, "baselines.tcp_loopback", ("pingpong", "stream"))
    for i, x in enumerate(tcp.get("pingpong") or [None]):
        need(x, "baselines.tcp_loopback.pingpong[%d]" % i, ("size", "rtt_median_us"))
    for i, x in enumerate(tcp.get("stream") or [None]):
        need(x, "baselines.tcp_loopback.stream[%d]" % i, ("size", "bytes_per_s", "msgs_per_s"))
    pt = r.get("perftest") or {}
    for prog in PERFTEST:
        runs = pt.get(prog)
        if not runs:
            missing.append("perftest.%s (no runs)" % prog)
            continue
        for i, x in enumerate(runs):
            need(x, "perftest.%s[%d]" % (prog, i), LAT_KEYS if prog.endswith("_lat") else BW_KEYS)
    tm = r.get("tag_matching") or {}
    need(tm, "tag_matching", ("send_bw_srq_64b", "read_bw_1m", "eager_64b", "rndv_1m"))
    for key in ("send_bw_srq_64b", "read_bw_1m", "eager_64b", "rndv_1m"):
        if isinstance(tm.get(key), dict):
            need(tm[key], "tag_matching.%s" % key, ("size", "bw_bytes_per_s", "msgs_per_s"))
    rw = r.get("raw_ethernet") or {}
    if "skipped" not in rw:  # raw packet QPs need CAP_NET_RAW: the bench skips them when not root
        need(rw, "raw_ethernet", ("send_bw_ud_64b", "raw_bw_64b"))
        for key in ("send_bw_ud_64b", "raw_bw_64b"):
            if isinstance(rw.get(key), dict):
                need(rw[key], "raw_ethernet.%s" % key, ("size", "bw_bytes_per_s", "msgs_per_s", "seconds"))
        if isinstance(rw.get("raw_bw_64b"), dict):
            need(rw["raw_bw_64b"], "raw_ethernet.raw_bw_64b", ("frame_bytes", "receiver"))
    th = r.get("two_hosts") or {}
    if th.get("ib_write_bw"):  # a two-host run (as root): raw frames across it too
        raws = th.get("raw_ethernet_bw") or [None]
        need(raws[0], "two_hosts.raw_ethernet_bw[0]", ("frame_bytes", "msgs_per_s", "receiver"))
        if not any(x.get("frame_bytes") == 1500 for x in th.get("raw_frames") or []):
            missing.append("two_hosts.raw_frames (no 1500-byte rate)")
    need(r.get("idle_engine"), "idle_engine", ("seconds", "cpu_percent_of_one_core", "rss_kib"))
    need(r.get("scale"), "scale", ("processes", "qps_per_process", "pairs_ok", "engine_kib_per_qp"))
    targets = {t.get("key"): t for t in r.get("targets") or []}
    for key in ("write_bw_64k_vs_memcpy", "send_bw_64b_msg_rate", "send_lat_2b_median", "write_lat_2b_median",
                "two_hosts_write_bw_64k", "two_hosts_write_bw_64k_vs_raw", "idle_engine_cpu", "scale_16x64",
                "tm_eager_64b_vs_send_srq", "tm_rndv_1m_vs_read_bw", "raw_bw_64b_vs_send_ud",
                "two_hosts_raw_bw_1500_vs_raw"):
        if key not in targets:
            missing.append("targets[%s]" % key)
        else:
            need(targets[key], "targets[%s]" % key, ("target", "bound", "unit"))
            for k in ("measured", "met"):
                if k not in targets[key]:
                    missing.append("targets[%s].%s" % (key, k))
    measured = ["write_bw_64k_vs_memcpy", "send_bw_64b_msg_rate", "send_lat_2b_median", "write_lat_2b_median",
                "tm_eager_64b_vs_send_srq", "tm_rndv_1m_vs_read_bw"]
    if "skipped" not in rw:
        measured.append("raw_bw_64b_vs_send_ud")
    for key in measured:
        if key in targets and targets[key].get("measured") is None:
            missing.append("targets[%s].measured (null)" % key)
    if not r.get("table"):
        missing.append("table (empty)")
    if r.get("errors"):
        missing.append("errors (not empty: %s)" % r["errors"])
    if missing:
        print("results.json is missing:\n  " + "\n  ".join(missing))
        return 1
    print("results.json: every expected key present (%d perftest programs, %d table rows)" %
          (len(PERFTEST), len(r["table"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
