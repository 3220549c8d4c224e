#!/usr/bin/env python3
"""Reads uroce's DC transport in a pcap file (docs/mlx5-dc.md), on its own,
without net/: every request with an opcode 0xC0-0xDF carries RC's opcode in
its low five bits and a 20-byte DCETH after the BTH (the DCT's access key,
the connect flag and the DCI's QPN, the connection's number and first PSN,
the DCI's epoch); each DCI's first packet of a connection carries connect;
the DCTs answer with RC responses to the DCIs. Prints one line per DCI
and a total; exits 1 if a DC frame breaks the format or there is none.

    pcap_dc.py FILE.pcap [KEY]     (KEY: every request must carry it, hex)
"""
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pcap_icrc import roce_frames  # noqa: E402

RC_REQUESTS = {0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x13, 0x14,
               0x16, 0x17, 0x1d}
RC_RESPONSES = {0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12}


def main(path, key=None):
    dcis = {}  # DCI QPN -> [requests, connects, responses, set of (epoch, number)]
    bad = 0
    for fr, _, _, udp in roce_frames(path):
        bth = udp + 8
        opcode = fr[bth]
        dest = int.from_bytes(fr[bth + 5:bth + 8], "big")
        psn = int.from_bytes(fr[bth + 9:bth + 12], "big")
        if opcode & 0xe0 == 0xc0:
            dc_key, flags_dci, connection, epoch = struct.unpack("!QIII", fr[bth + 12:bth + 32])
            dci, connect = flags_dci & 0xffffff, bool(flags_dci & 0x80000000)
            number, first_psn = connection >> 24, connection & 0xffffff
            if opcode & 0x1f not in RC_REQUESTS or flags_dci & 0x7f000000:
                print(f"bad DC frame: opcode {opcode:#x}, flags {flags_dci:#x}")
                bad += 1
                continue
            if key is not None and dc_key != key:
                print(f"bad DC frame: key {dc_key:#x}, not {key:#x}")
                bad += 1
            if connect and (psn - first_psn) & 0xffffff > 0x7fffff:
                print(f"bad DC frame: PSN {psn:#x} before its connection's first {first_psn:#x}")
                bad += 1
            d = dcis.setdefault(dci, [0, 0, 0, set()])
            d[0] += 1
            d[1] += connect
            d[3].add((epoch, number))
        elif opcode & 0xe0 == 0 and opcode & 0x1f in RC_RESPONSES and dest in dcis:
            dcis[dest][2] += 1
    for dci, (requests, connects, responses, conns) in sorted(dcis.items()):
        print(f"dci {dci:#x}: requests {requests} (connect {connects}) in {len(conns)} connections, "
              f"responses {responses}")
        if not connects or not responses:
            print(f"bad: DCI {dci:#x} {'never connected' if not connects else 'was never answered'}")
            bad += 1
    print(f"dc dcis {len(dcis)} bad {bad}")
    return 0 if dcis and not bad else 1


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], int(sys.argv[2], 16) if len(sys.argv) == 3 else None))
