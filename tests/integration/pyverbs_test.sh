#!/usr/bin/env bash
# rdma-core's own conformance suite (pyverbs, Debian's python3-pyverbs) run
# against a uroce engine, as rdma-core's Documentation/testing.md runs it
# against a device: tests of features the device reports as absent skip.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

src=/usr/share/doc/rdma-core/tests
if [[ ! -f $src/run_tests.py ]] || ! /usr/bin/python3 -c 'import pyverbs' 2>/dev/null; then
  echo "SKIP: python3-pyverbs is not installed"
  exit 77
fi
tests="$UROCE_LOG_DIR/pyverbs/tests"
mkdir -p "$tests"
cp -r "$src/." "$tests/"
find "$tests" -name '*.gz' -exec gunzip -f {} +

start_engine uroce0
log="$UROCE_LOG_DIR/pyverbs.log"
rc=0
(cd "$UROCE_LOG_DIR/pyverbs" &&
  timeout 300 "$UROCE_BIN" run -- /usr/bin/python3 tests/run_tests.py --dev uroce0 -v) >"$log" 2>&1 || rc=$?
tail -n 4 "$log"
if ((rc != 0)) || ! grep -qE '^OK( |$)' "$log"; then
  grep -E '^(FAIL|ERROR):' "$log" || true
  echo "pyverbs: failed (exit $rc)"
  exit 1
fi
# Capabilities uroce has (issue 13: on-demand paging, completion timestamps,
# the real-time clock, memory windows, parent domains, device memory; issue
# 10: tag matching; issue 11: raw
# packet QPs and flow steering, test_flow and test_qp's raw cases; ATOMIC
# WRITE, test_qpex's rc_atomic_write player): their
# tests must run, not skip as on a device without them.
if grep -E "skipped '(ODP is not supported|ODP is unavailable|ODP implicit is not supported|Create Extended CQ is not supported|Query device real time is not supported|Tag matching is not supported|Create MW is not supported|Reg MR with MW access is not supported|Create memory window of type|Memory Window allocation is not supported|Create player with rc_bind_mw is not supported|Create player with rc_atomic_write is not supported|Flow creation is not supported|Must be run by root on Ethernet link layer|To Create RAW QP must be done by root|Parent Domain is not supported|Extended CQ with Parent Domain is not supported|Device memory is not supported)" "$log"; then
  echo "pyverbs: tests of capabilities uroce advertises skipped for a missing capability"
  exit 1
fi
# Tests that must run and pass, not skip (unittest -v: the test's name line,
# maybe its docstring's first line and a warning or two, then "ok" at the
# end of a line before the next test's name line).
require_pass() {  # FILE TEST...
  local file=$1 t
  shift
  for t in "$@"; do
    if ! awk -v t="$t" 'index($0, t " (") == 1 { inside = 1 }
                        inside && index($0, t " (") != 1 && /^test_[A-Za-z0-9_]+ \(/ { inside = 0 }
                        inside && /(^| )ok$/ { found = 1; inside = 0 }
                        END { exit !found }' "$log"; then
      echo "pyverbs: $file $t did not pass:"
      grep -A1 "^$t (" "$log" || echo "  (not run)"
      exit 1
    fi
  done
}
# Tag matching (issue 10): uroce advertises IBV_TM_CAP_RC with rendezvous
# offload, so rdma-core's four test_tag_matching tests must run and pass.
require_pass test_tag_matching test_tm_traffic test_tm_unexpected_tag test_tm_no_tag test_tm_rndv
# Parent domains (issue 13): QPs, CQs and SRQs on a parent domain with and
# without the application's allocators (test_huge_page_traffic skips on a
# host without huge pages, as on any device).
require_pass test_parent_domain test_without_allocators_rc_traffic test_default_allocators_rc_traffic \
  test_mem_align_rc_traffic test_mem_align_ud_traffic test_mem_align_srq_excq_rc_traffic
# Device memory (issue 13): max_dm_size is reported, so DMTest and
# DeviceMemoryAPITest run, and SharedDMTest imports the memory through a
# context imported from a duplicate of ctx.cmd_fd (ibv_import_device).
require_pass test_device test_create_dm test_destroy_dm test_create_dm_bad_flow test_destroy_dm_bad_flow \
  test_dm_write test_dm_write_bad_flow test_dm_read test_multi_process_alloc_dm test_import_dm
require_pass test_mr test_create_dm_mr test_dm_bad_access test_dm_bad_registration
# Receive WQs and RSS (issue 11): test_rss_traffic (8 WQs behind an RSS QP)
# and test_cqex's test_create_cq_ex (IBV_WC_EX_WITH_CVLAN, since uroce
# advertises CVLAN stripping) must run and pass. (rdma-core has no test_wq.py.)
require_pass test_rss_traffic test_rss_traffic
require_pass test_cqex test_create_cq_ex
# Raw packet QPs and flow steering (issue 11): test_flow's five traffic tests
# and test_qp's raw packet cases run and pass as root.
require_pass test_flow test_eth_spec_flow_traffic test_ipv4_spec_flow_traffic test_ipv6_spec_flow_traffic \
  test_udp_spec_flow_traffic test_tcp_spec_flow_traffic
require_pass test_qp test_create_raw_qp_no_attr test_create_raw_qp_with_attr test_create_raw_qp_ex_no_attr \
  test_create_raw_qp_ex_with_attr test_query_raw_qp
# ATOMIC WRITE (IBA 1.5 annex A19, as rxe has it): uroce reports
# IB_UVERBS_DEVICE_ATOMIC_WRITE and takes IBV_QP_EX_WITH_ATOMIC_WRITE, so
# test_qpex's ATOMIC WRITE traffic (8 bytes into an MR with remote write
# access, 100 each way) must run and pass.
require_pass test_qpex test_qp_ex_rc_atomic_write
# Their traffic shows in the tag-matching counters of `uroce stats`, and the
# RSS test's in the receive WQs' (its WQs are gone by now, their own lines too).
stats=$("$UROCE_BIN" stats --name uroce0)
if ! grep -qE "^ *wq_rx_frames [1-9]" <<<"$stats"; then
  echo "pyverbs: uroce stats counted no frame placed in a receive WQ:"
  grep -E '^ *wq_' <<<"$stats"
  exit 1
fi
for c in tm_matched tm_unexpected tm_no_tag tm_rndv_reads; do
  if ! grep -qE "^ *$c [1-9]" <<<"$stats"; then
    echo "pyverbs: uroce stats counted no $c:"
    grep -E '^ *tm_' <<<"$stats"
    exit 1
  fi
done
# rdma_cm (issue 12): uroce run shows the engine's interface (lo) under
# /sys/class/infiniband/uroce0/device/net/ (tools/sysfs_view.h), so
# RDMACMBaseTest finds an address (127.0.0.1) instead of skipping with
# "Device uroce0 doesn't have net interface": all ten must run and pass.
require_pass test_rdmacm test_rdmacm_sync_traffic test_rdmacm_async_traffic test_rdmacm_async_reject_traffic \
  test_rdmacm_async_multicast_traffic test_rdmacm_async_ex_multicast_traffic \
  test_rdmacm_async_ex_leave_multicast_traffic test_rdmacm_async_traffic_external_qp \
  test_rdmacm_async_udp_traffic test_rdmacm_async_read test_rdmacm_async_write
if grep -q "doesn't have net interface" "$log"; then
  echo "pyverbs: a test found no network interface of uroce0"
  exit 1
fi
ran=$(grep -oE '^Ran [0-9]+' "$log" | awk '{print $2}')
skipped=$(grep -oE 'skipped=[0-9]+' "$log" | cut -d= -f2)
echo "pyverbs: $((ran - ${skipped:-0})) passed, 0 failed, ${skipped:-0} skipped"
