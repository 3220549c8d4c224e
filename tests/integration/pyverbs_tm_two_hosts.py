#!/usr/bin/python3
"""rdma-core's pyverbs test_tag_matching across two engines.

    pyverbs_tm_two_hosts.py TESTS_DIR CLIENT_DEV SERVER_DEV

TESTS_DIR is a copy of rdma-core's tests package (as pyverbs_test.sh makes
it). The four TMTest cases run unmodified, with their client player (plain
RC QP) on CLIENT_DEV and their server player (RC QP on a TM-SRQ) on
SERVER_DEV. Only the connection differs from rdma-core's: its RCResources
address their own GID, as both players share one device there; here each
addresses its peer's.
"""
import os
import sys
import unittest

tests_dir, client_dev, server_dev = sys.argv[1:4]
sys.path[:0] = [tests_dir, os.path.dirname(tests_dir)]
sys.argv[1:] = ['--dev', server_dev, '--gid', '0']
from args_parser import parser  # noqa: E402  (rdma-core's, found through sys.path)

parser.parse_args()

from pyverbs.addr import AHAttr, GlobalRoute  # noqa: E402
import tests.base as base  # noqa: E402
from tests.test_tag_matching import TMResources, TMTest  # noqa: E402


class PeerTMResources(TMResources):
    peer_gid = None

    def to_rts(self):
        # RCResources.to_rts with the peer's GID as the destination.
        attr = self.create_qp_attr()
        attr.path_mtu = base.PATH_MTU
        attr.max_dest_rd_atomic = base.MAX_DEST_RD_ATOMIC
        base.set_rnr_attributes(attr)
        attr.max_rd_atomic = base.MAX_RD_ATOMIC
        gr = GlobalRoute(dgid=self.peer_gid, sgid_index=self.gid_index)
        attr.ah_attr = AHAttr(port_num=self.ib_port, is_global=1, gr=gr, dlid=self.port_attr.lid)
        for i in range(self.qp_count):
            attr.dest_qp_num = self.rqps_num[i]
            attr.rq_psn = self.psns[i]
            attr.sq_psn = self.rpsns[i]
            self.qps[i].to_rts(attr)


class TwoHostsTMTest(TMTest):
    def create_players(self, resource):
        self.client = PeerTMResources(**dict(self.dev_info, dev_name=client_dev), with_srq=False)
        self.server = PeerTMResources(**self.dev_info)
        self.client.peer_gid = self.server.ctx.query_gid(self.server.ib_port, self.server.gid_index)
        self.server.peer_gid = self.client.ctx.query_gid(self.client.ib_port, self.client.gid_index)
        self.client.pre_run(self.server.psns, self.server.qps_num)
        self.server.pre_run(self.client.psns, self.client.qps_num)


names = ['test_tm_traffic', 'test_tm_unexpected_tag', 'test_tm_no_tag', 'test_tm_rndv']
suite = unittest.TestSuite(TwoHostsTMTest(n) for n in names)
result = unittest.TextTestRunner(verbosity=2).run(suite)
sys.exit(0 if result.wasSuccessful() and not result.skipped else 1)
