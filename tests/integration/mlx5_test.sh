#!/usr/bin/env bash
# mlx5 mode (uroced --mlx5) and the drop-in libmlx5.so.1 (verbs_provider/mlx5/):
#   1. verbs_mlx5's Mlx5Mode.* against an engine started with --mlx5: the
#      device answers as a ConnectX-5, the direct verbs that work on uroce's
#      objects work, the others fail as libmlx5 fails without the feature;
#   2. rdma-core's own mlx5 tests (pyverbs, Debian's python3-pyverbs) against
#      that engine: every one passes or skips, and those listed below must
#      pass (they skip on a device that is not mlx5);
#   3. UCX sees an mlx5 device without DevX (its dv memory domain opens),
#      offers rc_mlx5, dc_mlx5 and ud_mlx5 on it, and ucx_perftest runs over
#      them (UCT's active messages, put, get, atomics on rc_mlx5 and
#      dc_mlx5; active messages on ud_mlx5; UCP's tag matching and streams
#      over them and by UCX's defaults);
#   4. NotMlx5.* against an engine without --mlx5: every direct verb refuses
#      the device, as rdma-core's libmlx5 refuses another vendor's.
#
#   mlx5_test.sh PATH/TO/verbs_mlx5
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=tests/integration/ucx_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/ucx_lib.sh"

binary=${1:?usage: $0 PATH/TO/verbs_mlx5}
if [[ ! -x "$binary" ]]; then
  echo "mlx5_test: $binary is not built" >&2
  exit 1
fi
if [[ ! -e "$(dirname "$UROCE_BIN")/../provider/libmlx5.so.1" ]]; then
  echo "mlx5_test: the drop-in libmlx5.so.1 is not built" >&2
  exit 1
fi

failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

start_engine uroce0 --mlx5
timeout 120 "$UROCE_BIN" run -- "$binary" --gtest_filter='Mlx5Mode.*:Mlx5Mkey.*:-Mlx5Mode.UdpSourcePort*' ||
  fail "Mlx5Mode.* (verbs_mlx5)"

# mlx5dv_modify_qp_udp_sport, seen on the wire: the loopback port captured
# while the test runs; the frames of the modified QP leave from its port.
cap="$UROCE_LOG_DIR/udp_sport.pcap"
"$UROCE_BIN" capture --name uroce0 -w "$cap" --count 1000 --seconds 60 >/dev/null &
cap_pid=$!
sleep 0.3
out=$(timeout 60 "$UROCE_BIN" run -- "$binary" --gtest_filter='Mlx5Mode.UdpSourcePort*') ||
  fail "Mlx5Mode.UdpSourcePort* (verbs_mlx5)"
kill -TERM "$cap_pid" 2>/dev/null || true
wait "$cap_pid" || true
if [[ $out =~ udp\ sport:\ qpn\ ([0-9]+)\ port\ 55555,\ qpn\ ([0-9]+) ]]; then
  python3 "$(dirname "$0")/pcap_udp_sport.py" "$cap" "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" 55555 ||
    fail "the modified QP's frames do not leave from UDP port 55555"
else
  fail "Mlx5Mode.UdpSourcePort* named no QPs"
fi

# uroce's DC transport (Mlx5Dc.*: DCIs and DCTs through mlx5dv_create_qp,
# ibv_wr_* and mlx5-format queues), the loopback port captured: pcap_dc.py
# reads the DC frames by docs/mlx5-dc.md on its own, pcap_icrc.py checks
# their ICRC.
cap="$UROCE_LOG_DIR/dc.pcap"
"$UROCE_BIN" capture --name uroce0 -w "$cap" --count 20000 --seconds 60 >/dev/null &
cap_pid=$!
sleep 0.3
timeout 120 "$UROCE_BIN" run -- "$binary" --gtest_filter='Mlx5Dc.*:-Mlx5Dc.WrongKey*' || fail "Mlx5Dc.* (verbs_mlx5)"
kill -TERM "$cap_pid" 2>/dev/null || true
wait "$cap_pid" || true
# Its requests are never answered (pcap_dc.py would say so): not captured.
timeout 60 "$UROCE_BIN" run -- "$binary" --gtest_filter='Mlx5Dc.WrongKey*' || fail "Mlx5Dc.WrongKey* (verbs_mlx5)"
# DC under the fault injector on the loopback port (loss, duplication,
# reordering, corruption), 20 times in a row: every message once, in order,
# at the DCT it was sent to (the tests check each), through retransmissions.
retransmits() { "$UROCE_BIN" stats --name uroce0 | awk '$1 == "retransmits" {print $2}'; }
before=$(retransmits)
"$UROCE_BIN" fault --name uroce0 --port loopback drop=0.02 duplicate=0.01 reorder=0.05 corrupt=0.005 seed=29 >/dev/null
timeout 240 "$UROCE_BIN" run -- "$binary" --gtest_repeat=20 \
  --gtest_filter='Mlx5Dc.EveryOperation*:Mlx5Dc.DciMoves*:Mlx5Dc.DciInMlx5*:Mlx5Dc.DciReset*' >"$UROCE_LOG_DIR/dc_faults.log" 2>&1 ||
  { tail -n 30 "$UROCE_LOG_DIR/dc_faults.log"; fail "Mlx5Dc.* under injected faults"; }
"$UROCE_BIN" fault --name uroce0 --port loopback off >/dev/null
after=$(retransmits)
echo "DC under faults: $(grep -c '^\[  PASSED  \]' "$UROCE_LOG_DIR/dc_faults.log") passes of 20, $((after - before)) retransmissions"
((after > before)) || fail "the injected faults never made a DCI retransmit"
python3 "$(dirname "$0")/pcap_dc.py" "$cap" | tail -n 4 || fail "the DC frames of the capture break docs/mlx5-dc.md"
python3 "$(dirname "$0")/pcap_icrc.py" "$cap" || fail "a frame of the DC capture has a bad ICRC"

# rdma-core's mlx5 tests. Each must pass or skip; these must pass (the
# reason each other one skips is in docs/mlx5.md).
src=/usr/share/doc/rdma-core/tests
if [[ -f $src/run_tests.py ]] && /usr/bin/python3 -c 'import pyverbs' 2>/dev/null; then
  tests="$UROCE_LOG_DIR/pyverbs_mlx5/tests"
  mkdir -p "$tests"
  cp -r "$src/." "$tests/"
  find "$tests" -name '*.gz' -exec gunzip -f {} +
  log="$UROCE_LOG_DIR/pyverbs_mlx5.log"
  rc=0
  (cd "$UROCE_LOG_DIR/pyverbs_mlx5" &&
    timeout 300 "$UROCE_BIN" run -- /usr/bin/python3 tests/run_tests.py --dev uroce0 -v -k test_mlx5) >"$log" 2>&1 || rc=$?
  tail -n 3 "$log"
  if ((rc != 0)) || ! grep -qE '^OK( |$)' "$log"; then
    grep -E '^(FAIL|ERROR):' -A12 "$log" || true
    fail "pyverbs mlx5 tests (exit $rc)"
  fi
  for t in test_dv_query_port test_dv_cq_traffic test_dv_cq_padding test_dv_cq_cqe_size_128 \
    test_dv_cq_cqe_size_64 test_dv_cq_cqe_size_with_bad_size test_dv_cq_padding_not_aligned_cqe_size \
    test_dv_cq_cqe_size_environment_var test_prefer_obj_on_huge test_obj_on_huge \
    test_timestamp_free_running_rc_traffic test_timestamp_real_time_rc_traffic \
    test_timestamp_free_running_send_raw_traffic test_timestamp_free_running_recv_raw_traffic \
    test_timestamp_real_time_raw_traffic test_query_rt_values test_dma_memcpy_data \
    test_dma_memcpy_different_pd_bad_flow test_dma_memcpy_protection_bad_flow \
    test_dma_memcpy_large_data_bad_flow test_mixed_raw_wqe_traffic test_rc_modify_udp_sport \
    test_dc_send test_dc_rdma_write test_scatter_to_cqe_control_by_qp \
    test_dc_rdma_write_stream test_dc_send_stream_bad_flow test_dc_send_stream_bad_flow_qp \
    test_mkey_list test_mkey_interleaved test_mkey_list_new_api test_mkey_interleaved_new_api \
    test_mkey_list_bad_flow test_mkey_remote_invalidate test_alloc_uar test_odp_dc_traffic; do
    # unittest -v: the test's name line, maybe its docstring, then "ok"
    # at the end of a line before the next test's name line.
    if ! awk -v t="$t" 'index($0, t " (") == 1 { inside = 1 }
                        inside && index($0, t " (") != 1 && /^test_[A-Za-z0-9_]+ \(/ { inside = 0 }
                        inside && /(^| )ok$/ { found = 1; inside = 0 }
                        END { exit !found }' "$log"; then
      fail "pyverbs $t did not pass"
      grep -A2 "^$t (" "$log" >&2 || echo "  (not run)" >&2
    fi
  done
else
  echo "note: python3-pyverbs is not installed: rdma-core's mlx5 tests not run"
fi

# UCX opens its mlx5 (dv) memory domain on the device, without DevX.
if command -v ucx_info >/dev/null 2>&1; then
  log="$UROCE_LOG_DIR/ucx_info_mlx5.log"
  timeout 60 "$UROCE_BIN" run -- env UCX_LOG_LEVEL=debug ucx_info -d >"$log" 2>&1 || true
  grep -q "uroce0: vendor_id 0x15b3 device_id 4119" "$log" || fail "UCX did not read the ConnectX-5 PCI ids"
  grep -q "uroce0: md open by 'uct_ib_mlx5_md_ops' is successful" "$log" ||
    fail "UCX did not open its mlx5 (dv) memory domain on uroce0"
  grep -q "uroce0: DEVX is not supported" "$log" || fail "UCX did not find DevX refused"
  grep -qE "Transport: rc_mlx5" "$log" || fail "UCX does not offer rc_mlx5 on uroce0"
  grep -qE "Transport: ud_mlx5" "$log" || fail "UCX does not offer ud_mlx5 on uroce0"
  grep -qE "Transport: dc_mlx5" "$log" || fail "UCX does not offer dc_mlx5 on uroce0 (its probe DCT failed)"
  # UCX's rc_mlx5 itself, unmodified: its QPs' send queues, its SRQ and its
  # CQs in mlx5's formats, written and read by UCX as on a ConnectX. Few
  # iterations: the two processes poll their CQs in memory, never calling
  # into the library, and on a machine of two CPUs (one the engine's) they
  # take turns by scheduler time slices, 4 ms a message in a ping-pong.
  for args in "am_lat -n 50" "am_bw -D bcopy -s 1024 -n 500" "am_bw -D zcopy -s 8192 -n 500" \
    "put_lat -n 50" "put_bw -D zcopy -s 65536 -n 200" "get -D zcopy -s 65536 -n 200" \
    "fadd -n 200" "cswap -n 200"; do
    # shellcheck disable=SC2086  # one word per argument
    perftest_pair "rc_mlx5_${args%% *}" -- -d uroce0:1 -x rc_mlx5 -w 5 -t $args ||
      fail "ucx_perftest -x rc_mlx5 -t $args"
  done
  # UCX's ud_mlx5: a UD QP's send queue with datagram segments made from
  # the AHs' mlx5_wqe_av, its own receive queue in mlx5's format, UCX's
  # reliability protocol on top (UCT has active messages only on UD).
  for args in "am_lat -n 50" "am_bw -D bcopy -s 1024 -n 500"; do
    # shellcheck disable=SC2086
    perftest_pair "ud_mlx5_${args%% *}" -- -d uroce0:1 -x ud_mlx5 -w 5 -t $args ||
      fail "ucx_perftest -x ud_mlx5 -t $args"
  done
  # UCX's dc_mlx5: its DCIs' send queues with datagram segments naming a
  # DCT by number and key (uroce's DC transport, docs/mlx5-dc.md), its DCT
  # receiving through its SRQ, all in mlx5's formats.
  for args in "am_lat -n 50" "am_bw -D bcopy -s 1024 -n 500" "put_bw -D zcopy -s 65536 -n 200" \
    "get -D zcopy -s 65536 -n 200" "fadd -n 200" "cswap -n 200"; do
    # shellcheck disable=SC2086
    perftest_pair "dc_mlx5_${args%% *}" -- -d uroce0:1 -x dc_mlx5 -w 5 -t $args ||
      fail "ucx_perftest -x dc_mlx5 -t $args"
  done
  # UCP over them, no verbs transport: tag matching on rc_mlx5 (wired up
  # through ud_mlx5), tag matching and streams on ud_mlx5 alone, and UCX's
  # defaults (which on one host take shared memory for the data).
  ucp_lane() {  # LABEL TLS TEST LANE
    if perftest_pair "$1" --env "UCX_TLS=$2" --env UCX_LOG_LEVEL=info -- -w 5 -n 50 -t "$3"; then
      grep -q "ep_cfg\[0\]: $4" "$PERFTEST_CLIENT_LOG" ||
        fail "UCP's lane with UCX_TLS=$2 is not $4: $(grep -o 'ep_cfg.*' "$PERFTEST_CLIENT_LOG" | head -3)"
    else
      fail "ucx_perftest -t $3 with UCX_TLS=$2"
    fi
  }
  ucp_lane ucp_tag_rc_mlx5 rc_mlx5,ud_mlx5 tag_lat "tag(rc_mlx5/uroce0:1)"
  ucp_lane ucp_tag_ud_mlx5 ud_mlx5 tag_lat "tag(ud_mlx5/uroce0:1)"
  ucp_lane ucp_stream_ud_mlx5 ud_mlx5 stream_lat "stream(ud_mlx5/uroce0:1)"
  ucp_lane ucp_tag_dc_mlx5 dc_mlx5 tag_lat "tag(dc_mlx5/uroce0:1)"
  ucp_lane ucp_stream_dc_mlx5 dc_mlx5 stream_lat "stream(dc_mlx5/uroce0:1)"
  ucp_lane ucp_tag_mlx5_all rc_mlx5,dc_mlx5,ud_mlx5 tag_lat "tag(rc_mlx5/uroce0:1)"
  perftest_pair ucp_tag_defaults -- -w 5 -n 50 -t tag_lat || fail "ucx_perftest -t tag_lat with UCX's defaults"
else
  echo "note: ucx-utils is not installed: UCX's view not checked"
fi
stop_all_engines

start_engine uroce0
timeout 60 "$UROCE_BIN" run -- "$binary" --gtest_filter='NotMlx5.*' || fail "NotMlx5.* (verbs_mlx5)"
stop_all_engines

if ((failures)); then
  echo "mlx5_test: $failures failure(s)"
  exit 1
fi
echo "mlx5_test: passed"
