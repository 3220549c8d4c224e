#!/usr/bin/env python3
"""Checks the UDP source port of the RoCEv2 frames between two QPs in a pcap
file: frames to QPN B (sent by A) must leave from PORT, frames to QPN A (sent
by B) from B's own port (0xC000 and up, not PORT); at least one of each.
Prints "to_b N to_a M"; exits 1 otherwise.

    pcap_udp_sport.py FILE.pcap QPN_A QPN_B PORT
"""
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pcap_icrc import roce_frames as frames_of  # noqa: E402


def roce_frames(path):
    """(UDP source port, BTH destination QP) of each RoCEv2 frame."""
    for fr, _, _, udp in frames_of(path):
        sport = struct.unpack("!H", fr[udp:udp + 2])[0]
        bth = udp + 8
        yield sport, int.from_bytes(fr[bth + 5:bth + 8], "big")


def main(path, qpn_a, qpn_b, port):
    to_b = to_a = bad = 0
    for sport, dqp in roce_frames(path):
        if dqp == qpn_b:
            to_b += 1
            bad += sport != port
        elif dqp == qpn_a:
            to_a += 1
            bad += sport == port or sport < 0xC000
    print(f"to_b {to_b} to_a {to_a} bad {bad}")
    return 0 if to_b and to_a and not bad else 1


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))
