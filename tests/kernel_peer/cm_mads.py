#!/usr/bin/env python3
"""Holds the CM MADs uroce sends next to the ones the kernel sends.

    cm_mads.py PCAPS UROCE_ADDRS KERNEL_ADDRS [LABEL_REGEX]

(PCAPS one capture or several, comma-separated, read in that order: the
guest booted again; each ADDRS one address or several, comma-separated:
IPv4 and IPv6)

Reads the CM MADs (REQ, REP, RTU, DREQ, DREP, REJ, MRA, SIDR REQ/REP) of a
capture with tshark, those between the markers of the cases whose labels
match LABEL_REGEX (all when none is given), and groups them by message type
and sender. A marker is a UDP datagram to port 9 whose payload reads
"uroce-mark LABEL start" or "uroce-mark LABEL end" (kernel_peer_test.sh
sends them into the capture: the pcap's clock is the emulator's, not the
host's). Messages are compared case by case: what uroce sent in a case
(rping, ucmatose, ...) with what the kernel sent in the same case the other
way round; a case whose messages of a type the capture holds from one side
only (a marker or a frame the emulator's capture lost under load) is named
and not compared. For every message type and case both sides sent, each
field must take the same values on both sides but for those that name a connection or a host:
addresses, IDs, QPNs, PSNs, GUIDs, ports, the transaction ID. The flow label
of a REQ is checked instead as Linux's cma computes it for RoCEv2
(cma_get_roce_udp_flow_label: source port * 31 + destination port, 20 bits).
Prints a line per message type and exits 1 if any differs."""

import json
import re
import subprocess
import sys

# Fields that name a connection, a host or a transaction: allowed to differ.
VARIABLE_SUFFIXES = (
    ".transactionid", ".localcaguid", ".localqpn", ".startpsn", ".remotecommid",
    ".serviceid", ".serviceid.dport", ".serviceid.prefix", ".serviceid.protocol",
    ".prim_locallid", ".prim_remotelid", ".prim_localgid", ".prim_remotegid",
    ".prim_localgid_ipv4", ".prim_remotegid_ipv4", ".prim_flowlabel", ".prim_reserved0",
    ".prim_pktrate", ".ip_cm", ".ip_cm.sport", ".ip_cm.sip4", ".ip_cm.dip4", ".ip_cm.sip6",
    ".ip_cm.dip6", ".private", ".ip_cm.private", ".localqkey", ".qpn", ".qkey",
    ".requestid", ".localeecn", ".localcommid", ".remoteqpneecn",
)
# The raw bytes tshark also prints, the BTH (QP1's transport header, not the
# CM's), and the per-connection ID that names each message's own field tree
# (infiniband.cm.req is the local communication ID).
RAW = {"infiniband.mad", "infiniband.mad.data", "infiniband.bth"}

NAMES = {0x10: "REQ", 0x11: "MRA", 0x12: "REJ", 0x13: "REP", 0x14: "RTU", 0x15: "DREQ",
         0x16: "DREP", 0x17: "SIDR_REQ", 0x18: "SIDR_REP"}


def flatten(obj, out):
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, (dict, list)):
                flatten(v, out)
            else:
                out.setdefault(k, v)
    elif isinstance(obj, list):
        for x in obj:
            flatten(x, out)


def variable(name):
    if name in RAW or name.count(".") == 2:  # infiniband.cm.req etc.: the comm ID
        return True
    return name.endswith(VARIABLE_SUFFIXES)


def primary_path(f):
    """A REQ's primary flow label and packet rate, read from its bytes
    (IBA table 99: the flow label's 20 bits, 6 reserved, the rate's 6, at
    byte 88 of the message; tshark 4.0 splits that word wrongly)."""
    raw = bytes.fromhex(f["infiniband.mad.data"].replace(":", ""))
    word = int.from_bytes(raw[88:92], "big")
    return word >> 12, word & 0x3F


def flow_label_ok(f):
    """A REQ's primary flow label as Linux's cma sets it over RoCEv2."""
    try:
        sport = int(f["infiniband.cm.req.ip_cm.sport"], 16)
        dport = int(f["infiniband.cm.req.serviceid.dport"], 16)
        label, _ = primary_path(f)
    except (KeyError, ValueError):
        return "no flow label fields"
    want = (sport * 31 + dport) & 0xFFFFF
    return "ok" if label == want else f"flow label {label:#x}, Linux's cma gives {want:#x}"


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    uroce, kernel = set(sys.argv[2].split(",")), set(sys.argv[3].split(","))
    wanted = re.compile(sys.argv[4]) if len(sys.argv) > 4 else None
    packets = []
    for pcap in sys.argv[1].split(","):
        out = subprocess.run(["tshark", "-r", pcap, "-Y", "infiniband.mad.mgmtclass == 0x07 || udp.dstport == 9",
                              "-T", "json"], capture_output=True, text=True, check=True).stdout
        packets += json.loads(out or "[]")
    seen = {}  # (type, case, side) -> list of field dicts
    inside = wanted is None
    case = "(all)"  # LABEL without its direction: "ip.rping" of "ip.rping.kernel-server"
    for p in packets:
        layers = p["_source"]["layers"]
        if "infiniband" not in layers:  # a marker
            text = bytes.fromhex(layers.get("data", {}).get("data.data", "").replace(":", "")).decode(errors="replace")
            words = text.split()
            if wanted and len(words) == 3 and words[0] == "uroce-mark":
                inside = words[2] == "start" and bool(wanted.search(words[1]))
                case = words[1].rsplit(".", 1)[0]
            continue
        if not inside:
            continue
        src = layers.get("ip", {}).get("ip.src") or layers.get("ipv6", {}).get("ipv6.src")
        side = "uroce" if src in uroce else "kernel" if src in kernel else None
        if not side:
            continue
        fields = {}
        flatten(layers.get("infiniband", {}), fields)
        attr = int(fields.get("infiniband.mad.attributeid", "0"), 16)
        seen.setdefault((NAMES.get(attr, hex(attr)), case, side), []).append(fields)

    # Each side's values of every field (a set: a case may hold several connections).
    def values(msgs):
        vals = {}
        for m in msgs:
            for key, v in m.items():
                if not variable(key):
                    vals.setdefault(key, set()).add(v)
            if "infiniband.cm.req.ip_cm.sport" in m:
                vals.setdefault("primary packet rate", set()).add(primary_path(m)[1])
        return vals

    failures = compared_types = 0
    for name in NAMES.values():
        cases = sorted({c for (n, c, _) in seen if n == name})
        both, one_sided, diffs = [], [], []
        counts = [0, 0]
        for c in cases:
            u, k = seen.get((name, c, "uroce"), []), seen.get((name, c, "kernel"), [])
            if not u or not k:
                one_sided.append(f"{c} ({'uroce' if u else 'the kernel'} only, {len(u or k)})")
                continue
            both.append(c)
            counts[0] += len(u)
            counts[1] += len(k)
            uv, kv = values(u), values(k)
            for key in sorted(set(uv) | set(kv)):
                if uv.get(key) != kv.get(key):
                    diffs.append(f"{c}: {key}: uroce {sorted(uv.get(key, {'(none)'}))}, "
                                 f"kernel {sorted(kv.get(key, {'(none)'}))}")
            if name == "REQ":
                for side, msgs in (("uroce", u), ("kernel", k)):
                    for m in msgs:
                        r = flow_label_ok(m)
                        if r != "ok":
                            diffs.append(f"{c}: {side}'s REQ: {r}")
                            break
        if not both:
            if one_sided:
                print(f"-    {name}: not sent by both sides in any case: {', '.join(one_sided)}")
            continue
        compared_types += 1
        if diffs:
            failures += 1
            print(f"FAIL {name} ({counts[0]} from uroce, {counts[1]} from the kernel in {', '.join(both)}):")
            for d in diffs:
                print(f"       {d}")
        else:
            print(f"ok   {name}: the same fields ({counts[0]} from uroce, {counts[1]} from the kernel in "
                  f"{len(both)} cases)")
        if one_sided:
            print(f"       not compared: {', '.join(one_sided)}")
    if not compared_types:
        print("FAIL no message type was sent by both sides: nothing compared")
        sys.exit(1)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
