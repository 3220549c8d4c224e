#!/usr/bin/env python3
"""rdma_write.py: exercise 2 of the lab (docs/lab/README.md). The C
exercise again, with pyverbs (Debian's python3-pyverbs): one process, two RC
QPs connected to each other through the port's loopback, one RDMA WRITE of
4096 bytes from `src` into `dst`, every byte checked.

Fill in the three TODOs. As given, it runs and fails its check. The solution
is rdma_write_solution.py.

    uroce run -- python3 rdma_write.py
"""
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ, cqe_status_to_str
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, SendWR

SIZE = 4096

ctx = Context(name='uroce0')
port = ctx.query_port(1)
gid = ctx.query_gid(1, 0)  # RoCE: the port's address is GID index 0
pd = PD(ctx)
cq = CQ(ctx, 16)

src = MR(pd, SIZE, 0)  # only our own device reads src
# TODO 1: what may the peer do to dst? Add the access flag it needs.
dst = MR(pd, SIZE, e.IBV_ACCESS_LOCAL_WRITE)
data = bytes((i * 7 + 1) % 256 for i in range(SIZE))
src.write(data, SIZE)
dst.write(bytes(SIZE), SIZE)

# Two RC QPs, created in INIT (the QPAttr), then moved to RTR and RTS
# towards each other.
init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                  cap=QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1))
attr = QPAttr(port_num=1)
attr.qp_access_flags = e.IBV_ACCESS_REMOTE_WRITE
a = QP(pd, init, attr)
b = QP(pd, init, attr)


def connect(qp, peer, my_psn, peer_psn):
    attr = QPAttr(port_num=1)
    attr.path_mtu = port.active_mtu
    attr.dest_qp_num = peer.qp_num
    attr.rq_psn = peer_psn  # the first PSN this QP expects from its peer
    attr.sq_psn = my_psn  # the first PSN this QP sends
    attr.max_dest_rd_atomic = 1
    attr.max_rd_atomic = 1
    attr.min_rnr_timer = 12
    attr.timeout = 14
    attr.retry_cnt = 7
    attr.rnr_retry = 7
    attr.ah_attr = AHAttr(port_num=1, is_global=1,
                          gr=GlobalRoute(dgid=gid, sgid_index=0, hop_limit=64))
    qp.to_rts(attr)


connect(a, b, 100, 200)
connect(b, a, 200, 100)
print(f'QP a: QPN {a.qp_num:#08x} sends from PSN 100; QP b: QPN {b.qp_num:#08x}')

wr = SendWR(wr_id=1, num_sge=1, sg=[SGE(src.buf, SIZE, src.lkey)],
            send_flags=e.IBV_SEND_SIGNALED)
# TODO 2: make it an RDMA WRITE into dst: set wr.opcode (a SendWR is a SEND
# unless told otherwise), and name the remote buffer with
# wr.set_wr_rdma(RKEY, ADDRESS).
a.post_send(wr)

wcs = []
# TODO 3: poll the CQ until it gives one completion: cq.poll(1) returns
# (number polled, list of completions); wcs must end up holding the one
# completion. Give up after 5 seconds (time.time()).
if not wcs:
    sys.exit('rdma_write: no completion polled')
if wcs[0].status != e.IBV_WC_SUCCESS:
    sys.exit(f'rdma_write: completion status: {cqe_status_to_str(wcs[0].status)}')
if dst.read(SIZE, 0) != data:
    sys.exit('rdma_write: dst differs from src')
print(f'RDMA WRITE of {SIZE} bytes: data checked, ok')
