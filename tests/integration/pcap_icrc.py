#!/usr/bin/env python3
"""Checks every RoCEv2 frame of a pcap file: ICRC (IBA A17.3.3, through zlib,
independently of net/icrc.cc) and IPv4 header checksum, which tshark does not
verify by default. Prints "roce N bad_icrc B bad_ip_checksum C"; exits 1 if
any is bad or there is no RoCEv2 frame.

    pcap_icrc.py FILE.pcap
"""
import struct
import sys
import zlib


def frames(path):
    with open(path, "rb") as f:
        data = f.read()
    endian = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    off = 24
    while off + 16 <= len(data):
        incl = struct.unpack(endian + "I", data[off + 8:off + 12])[0]
        yield data[off + 16:off + 16 + incl]
        off += 16 + incl


def roce_frames(path):
    """(frame, L3 offset, IP header length, UDP offset) of each RoCEv2 frame
    (UDP to 4791 over IPv4 or IPv6, with or without an 802.1Q tag)."""
    for fr in frames(path):
        l3, etype = 14, struct.unpack("!H", fr[12:14])[0]
        if etype == 0x8100:
            l3, etype = 18, struct.unpack("!H", fr[16:18])[0]
        if etype == 0x0800 and fr[l3 + 9] == 17:
            ip_len = (fr[l3] & 0x0F) * 4
        elif etype == 0x86DD and fr[l3 + 6] == 17:
            ip_len = 40
        else:
            continue
        udp = l3 + ip_len
        if struct.unpack("!H", fr[udp + 2:udp + 4])[0] == 4791:
            yield fr, l3, ip_len, udp


def ip_checksum_ok(hdr):
    s = sum(struct.unpack("!10H", hdr))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s == 0xFFFF


def main(path):
    roce = bad_icrc = bad_sum = 0
    for fr, l3, ip_len, _ in roce_frames(path):
        roce += 1
        m = bytearray(fr[l3:-4])
        if ip_len == 20:
            bad_sum += not ip_checksum_ok(bytes(m[:20]))
            m[1] = m[8] = m[10] = m[11] = 0xFF  # TOS, TTL, header checksum
        else:
            m[0] |= 0x0F  # traffic class, flow label
            m[1] = m[2] = m[3] = m[7] = 0xFF  # ... and hop limit
        m[ip_len + 6] = m[ip_len + 7] = 0xFF  # UDP checksum
        m[ip_len + 12] = 0xFF  # BTH FECN, BECN, Resv6
        icrc = zlib.crc32(b"\xff" * 8 + bytes(m))
        bad_icrc += icrc != struct.unpack("<I", fr[-4:])[0]
    print(f"roce {roce} bad_icrc {bad_icrc} bad_ip_checksum {bad_sum}")
    return 0 if roce and not bad_icrc and not bad_sum else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
