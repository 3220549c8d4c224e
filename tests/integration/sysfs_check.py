#!/usr/bin/env python3
"""Reads every file of /sys/class/infiniband/DEV (inside `uroce run`) and
holds it against what the device reports through verbs (ibv_devinfo -v),
and holds ibstat's and ibstatus's views (they read sysfs) against the same.

  sysfs_check.py DEV IFACE|- [--counters STATS_FILE]

IFACE is the interface the GIDs belong to ("-": none, a DPDK port with
addresses of its own). With --counters, the hw_counters are compared with
the engine's counters as `uroce stats` printed them to STATS_FILE (an idle
engine: the same numbers). Prints ok/FAIL lines; exit 1 on any FAIL.
"""
import ipaddress
import os
import re
import subprocess
import sys

SYS = "/sys/class/infiniband"
failures = 0


def ok(msg):
    print("ok   " + msg)


def bad(msg):
    global failures
    failures += 1
    print("FAIL " + msg)


def same(what, got, want):
    if got == want:
        ok(f"{what}: {got!r}")
    else:
        bad(f"{what}: sysfs {got!r}, expected {want!r}")


def read(path):
    with open(path) as f:
        return f.read()


def sysfs_gid(text):
    """ibv_devinfo's GID (an IPv6 address) as sysfs prints it (%pI6)."""
    raw = ipaddress.IPv6Address(text).packed
    return ":".join(f"{raw[i]:02x}{raw[i + 1]:02x}" for i in range(0, 16, 2))


def devinfo(dev):
    out = subprocess.run(["ibv_devinfo", "-v", "-d", dev], check=True, capture_output=True, text=True).stdout
    info = {"gids": {}}
    for line in out.splitlines():
        m = re.match(r"\s*GID\[\s*(\d+)\]:\s+(\S+), (.+)$", line)
        if m:
            info["gids"][int(m.group(1))] = (m.group(2), m.group(3))
            continue
        m = re.match(r"\s*(\w+):\s+(.*)$", line)
        if m and m.group(1) not in info:
            info[m.group(1)] = m.group(2).strip()
    return info


# rate_show (drivers/infiniband/core/sysfs.c): deci-Gb/s per lane.
SPEEDS = {"2.5": (" SDR", 25), "5.0": (" DDR", 50), "10.0": (" QDR", 100), "14.0": (" FDR", 140),
          "25.0": (" EDR", 250), "50.0": (" HDR", 500), "100.0": (" NDR", 1000)}


def expected_rate(width, speed):
    lanes = int(re.match(r"(\d+)X", width).group(1))
    name, rate = SPEEDS[re.match(r"([\d.]+) Gbps", speed).group(1)]
    rate *= lanes
    return f"{rate // 10}{'.5' if rate % 10 else ''} Gb/sec ({lanes}X{name})", rate // 10


def main():
    dev, iface = sys.argv[1], sys.argv[2]
    stats_file = sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--counters" else None
    base = f"{SYS}/{dev}"
    port = f"{base}/ports/1"
    d = devinfo(dev)

    # The device's files (core/sysfs.c: node_guid_show etc.).
    same("node_guid", read(f"{base}/node_guid"), d["node_guid"] + "\n")
    same("sys_image_guid", read(f"{base}/sys_image_guid"), d["sys_image_guid"] + "\n")
    same("fw_ver", read(f"{base}/fw_ver"), d["fw_ver"] + "\n")
    same("hw_rev", read(f"{base}/hw_rev"), d["hw_ver"] + "\n")
    same("node_type", read(f"{base}/node_type"), "1: CA\n")
    same("board_id", read(f"{base}/board_id"), d["board_id"] + "\n")
    for name in ("node_desc", "hca_type"):
        if read(f"{base}/{name}").strip():
            ok(f"{name}: {read(f'{base}/{name}').strip()!r}")
        else:
            bad(f"{name} is empty")

    # The port's (core/sysfs.c: state_show, phys_state_show, rate_show, ...).
    m = re.match(r"PORT_(\w+) \((\d+)\)", d["state"])
    same("ports/1/state", read(f"{port}/state"), f"{m.group(2)}: {m.group(1)}\n")
    m = re.match(r"(\w+) \((\d+)\)", d["phys_state"])
    phys = {"LINK_UP": "LinkUp", "DISABLED": "Disabled", "POLLING": "Polling", "SLEEP": "Sleep"}[m.group(1)]
    same("ports/1/phys_state", read(f"{port}/phys_state"), f"{m.group(2)}: {phys}\n")
    rate, gbps = expected_rate(d["active_width"], d["active_speed"])
    same("ports/1/rate", read(f"{port}/rate"), rate + "\n")
    same("ports/1/link_layer", read(f"{port}/link_layer"), d["link_layer"] + "\n")
    same("ports/1/lid", read(f"{port}/lid"), f"0x{int(d['port_lid']):x}\n")
    same("ports/1/sm_lid", read(f"{port}/sm_lid"), f"0x{int(d['sm_lid']):x}\n")
    same("ports/1/lid_mask_count", read(f"{port}/lid_mask_count"), f"{int(d['port_lmc'], 16)}\n")
    same("ports/1/cap_mask", read(f"{port}/cap_mask"), f"0x{int(d['port_cap_flags'], 16):08x}\n")
    same("ports/1/pkeys/0", read(f"{port}/pkeys/0"), "0xffff\n")

    # Every GID entry: the address; its type and interface where valid, no
    # such file where empty (the kernel answers EINVAL there).
    n = int(d["gid_tbl_len"])
    same("gids/ entries", len(os.listdir(f"{port}/gids")), n)
    for i in range(n):
        gid = read(f"{port}/gids/{i}")
        types, ndevs = f"{port}/gid_attrs/types/{i}", f"{port}/gid_attrs/ndevs/{i}"
        if i in d["gids"]:
            addr, kind = d["gids"][i]
            same(f"gids/{i}", gid, sysfs_gid(addr) + "\n")
            same(f"gid_attrs/types/{i}", read(types), kind + "\n")
            if iface == "-":
                same(f"gid_attrs/ndevs/{i} exists", os.path.exists(ndevs), False)
            else:
                same(f"gid_attrs/ndevs/{i}", read(ndevs), iface + "\n")
        elif gid != "0000:0000:0000:0000:0000:0000:0000:0000\n" or os.path.exists(types) or os.path.exists(ndevs):
            bad(f"gids/{i}: {gid.strip()!r}, types/ndevs {os.path.exists(types)}/{os.path.exists(ndevs)} for an empty entry")

    # The interface the device is on, where programs look for it.
    if iface != "-":
        same("parent", read(f"{base}/parent"), iface + "\n")
        nic = os.path.realpath(f"/sys/class/net/{iface}/device") if os.path.exists(f"/sys/class/net/{iface}/device") else None
        if nic:
            same("device", os.path.realpath(f"{base}/device"), nic)
            same(f"/sys/class/net/{iface}/device/infiniband", os.listdir(f"/sys/class/net/{iface}/device/infiniband").count(dev), 1)
        else:
            same("device/net", os.listdir(f"{base}/device/net"), [iface])
        # UCX's discovery of rdma_cm interfaces (test/gtest/common/test_helpers.cc
        # get_all_rdmacm_net_devices): ndevs/0 and a node GUID not zero.
        found = read(f"{port}/gid_attrs/ndevs/0").strip() if not read(f"{base}/node_guid").startswith("0000:0000:0000:0000") else None
        same("UCX's rdma_cm interface discovery finds", found, iface)
    else:
        same("parent or device without an interface", [e for e in ("parent", "device") if os.path.exists(f"{base}/{e}")], [])

    # hw_counters: rxe's names; with --counters, the engine's values.
    counters = {c: read(f"{port}/hw_counters/{c}") for c in sorted(os.listdir(f"{port}/hw_counters"))}
    for name, text in counters.items():
        if not re.fullmatch(r"\d+\n", text):
            bad(f"hw_counters/{name}: {text!r} is not a count")
    if stats_file:
        engine = dict(re.findall(r"^\s+(\w+) (\d+)", read(stats_file), re.M))
        for name, field in (("sent_pkts", "tx_packets"), ("rcvd_pkts", "rx_packets"),
                            ("duplicate_request", "rx_duplicate"), ("send_rnr_err", "rnr_nak_sent"),
                            ("completer_retry_err", "retransmits")):
            same(f"hw_counters/{name} (uroce stats {field})", counters[name], engine[field] + "\n")
        if int(counters["sent_pkts"]) == 0:
            bad("hw_counters/sent_pkts is 0 after traffic")

    # ibstat and ibstatus (infiniband-diags) read the same files.
    st = subprocess.run(["ibstat", dev], capture_output=True, text=True).stdout
    for label, want in (("Firmware version", d["fw_ver"]), ("Hardware version", d["hw_ver"]),
                        ("Node GUID", "0x" + d["node_guid"].replace(":", "")),
                        ("State", m_state(d["state"])), ("Physical state", phys), ("Rate", str(gbps)),
                        ("Link layer", d["link_layer"])):
        got = re.search(rf"^\s*{label}: (.*)$", st, re.M)
        same(f"ibstat {label}", got.group(1).strip() if got else None, want)
    st = subprocess.run(["ibstatus", dev], capture_output=True, text=True).stdout
    got = re.search(r"default gid:\s+(\S+)", st)
    same("ibstatus default gid", got.group(1) if got else None, sysfs_gid(d["gids"][0][0]) if 0 in d["gids"] else None)
    got = re.search(r"rate:\s+(.*)$", st, re.M)
    same("ibstatus rate", got.group(1).strip() if got else None, rate)
    print(f"sysfs_check {dev}: {'all agree' if not failures else f'{failures} differ'}")
    sys.exit(1 if failures else 0)


def m_state(state):
    return re.match(r"PORT_(\w+)", state).group(1).capitalize()


if __name__ == "__main__":
    main()
