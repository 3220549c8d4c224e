#!/usr/bin/python3
"""Prints a device's GID table as ibv_query_gid_table gives it (pyverbs):
one line per GID, "INDEX ADDRESS NDEV_IFINDEX", IPv4-mapped GIDs as
a.b.c.d. Usage: gid_table.py DEVICE"""
import ipaddress
import sys

import pyverbs.device as d

ctx = d.Context(name=sys.argv[1])
for e in ctx.query_gid_table(16):
    gid = ipaddress.IPv6Address(e.gid_str())
    print(e.gid_index, gid.ipv4_mapped or gid, e.ndev_ifindex)
    # ibv_query_gid_ex of one index says the same.
    one = ctx.query_gid_ex(1, e.gid_index)
    assert one.gid_str() == e.gid_str() and one.ndev_ifindex == e.ndev_ifindex, (one.gid_str(), e.gid_str())
