#!/usr/bin/env python3
"""Writes the wqe target's seed corpus (tests/fuzz/corpus/wqe/): a valid work
request of each kind, in the record format of tests/fuzz/wqe_fuzz.cc, and a
few hostile ones (torn indices, overwritten queue headers).

    tests/fuzz/make_wqe_seeds.py [OUT_DIR]
"""
import os
import struct
import sys

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "wqe")
os.makedirs(out, exist_ok=True)

SIGNALED, INLINE = 2, 8
# abi::AddressVector to ::ffff:127.0.0.1 (the device itself), global, port 1.
AV = bytes(10) + b"\xff\xff" + bytes([127, 0, 0, 1]) + struct.pack("<IBBBBBB6s", 0, 0, 64, 0, 0, 1, 1, bytes(6))


def send(op, n=1, length=100, remote=4096, flags=SIGNALED, inline=b"", remote_qpn=0):
    """abi::SendWqe (128 bytes) and its SGEs; fuzz bit 7 aims them at the buffer."""
    w = struct.pack("<QIIIIIIQQQIIII32s24s", 7, op, flags, 0, 0 if inline else n, len(inline), 0,
                    remote, 0, 0, remote_qpn, 0, 0, 0, AV, bytes(24))
    if inline:
        return w + inline
    return w + b"".join(struct.pack("<QII", 8192 * (i + 1), length, 0) for i in range(n))


def recv(n=1, length=4096):
    """abi::RecvWqe and its SGEs."""
    return struct.pack("<QII", 9, n, 0) + b"".join(struct.pack("<QII", 16384 * (i + 1), length, 0) for i in range(n))


def rec(qp, flags, index, body):
    return bytes([qp, flags, index, len(body)]) + body


POST = 0x80 | 4 | 8  # aimed, written at the producer, producer + 1
# QPs of the target: 0/1 RC, 2/3 RC on the SRQ, 4/5 UC, 6/7 UD.
SEEDS = {
    "rc_send": rec(1, POST | 1, 0, recv()) + rec(0, POST, 0, send(2)),
    "rc_send_2sge": rec(1, POST | 1, 0, recv(2)) + rec(0, POST, 0, send(2, n=2)),
    "rc_write": rec(0, POST, 0, send(0, length=3000)),
    "rc_write_imm": rec(1, POST | 1, 0, recv()) + rec(0, POST, 0, send(1)),
    "rc_read": rec(0, POST, 0, send(4, length=2500)),
    "rc_cmp_swap": rec(0, POST, 0, send(5, length=8, remote=64)),
    "rc_fetch_add": rec(0, POST, 0, send(6, length=8, remote=128)),
    # IBV_WR_ATOMIC_WRITE 15: its 8 bytes in compare_add, no SGE.
    "rc_atomic_write": rec(0, POST, 0, send(15, n=0, remote=192)),
    "rc_inline": rec(1, POST | 1, 0, recv()) + rec(0, POST, 0, send(2, flags=SIGNALED | INLINE, inline=b"x" * 32)),
    # Memory-window work requests (IBV_WR_LOCAL_INV 7, BIND_MW 8, SEND_WITH_INV
    # 9): the bind reads its abi::MwBind where UD's address vector is.
    "rc_bind_mw": rec(0, POST, 0, send(8, n=0)),
    "rc_local_inv": rec(0, POST, 0, send(7, n=0)),
    "rc_send_inv": rec(1, POST | 1, 0, recv()) + rec(0, POST, 0, send(9)),
    "uc_bind_then_write": rec(4, POST, 0, send(8, n=0)) + rec(4, POST, 1, send(0)),
    "srq_send": rec(3, POST | 2, 0, recv()) + rec(2, POST, 0, send(2)),
    "uc_send": rec(5, POST | 1, 0, recv()) + rec(4, POST, 0, send(2)),
    "uc_write": rec(4, POST, 0, send(0)),
    "ud_send": rec(7, POST | 1, 0, recv()) + rec(6, POST, 0, send(2, remote_qpn=7)),
    "torn_sq": rec(0, POST, 0, send(2)) + rec(0, 0x10, 200, b""),
    "torn_rq": rec(1, 0x11, 77, b"") + rec(0, POST, 0, send(2)),
    "header_rq": rec(1, 0x21, 0, b"\xff" * 64) + rec(0, POST, 0, send(2)),
    "header_cq": rec(0, 0x23, 0, b"\x7f" * 80) + rec(1, POST | 1, 0, recv()) + rec(0, POST, 0, send(2)),
    "timers": rec(0, POST | 0x40, 0, send(2)) + rec(0, 0x40, 0, b""),
}
for name, data in SEEDS.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
