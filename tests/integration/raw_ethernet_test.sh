#!/usr/bin/env bash
# Raw packet QPs and flow steering through Debian's unmodified perftest raw
# Ethernet tools (raw_ethernet_bw, raw_ethernet_lat, raw_ethernet_burst_lat)
# between two processes on one engine: each side's flow rule takes the frames
# to its MAC (and IPs and ports when given) through the device's internal
# switch. Then the kernel's rule for raw QPs: without CAP_NET_RAW creating one
# is EPERM (perftest and the RawPacketNoCap GoogleTest case, capability dropped).
#
#   raw_ethernet_test.sh PATH/TO/verbs_semantics
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

binary=${1:?usage: $0 PATH/TO/verbs_semantics}
start_engine uroce0
failures=0
port=18800
mac_s=02:00:00:00:00:02 mac_c=02:00:00:00:00:01
lines='^ *[0-9]+ +[0-9]+ +[0-9.]+'

# raw LABEL PROGRAM [ARGS...]: server and client with each other's MACs.
raw() {
  local label=$1 prog=$2
  shift 2
  port=$((port + 1))
  if run_pair --label "$label" --forbid 'Couldn.t|[Ff]ailed|[Ee]rror|Unable' 60 \
       "$prog" -d uroce0 -p "$port" --server -B $mac_s -E $mac_c "$@" -- \
       "$prog" -d uroce0 -p "$port" --client -B $mac_c -E $mac_s "$@" &&
     grep -qE "$lines" "$RUN_PAIR_CLIENT_LOG"; then
    echo "ok   $label: $(grep -E "$lines" "$RUN_PAIR_CLIENT_LOG" | tail -1 | tr -s ' \t' ' ')"
  else
    echo "FAIL $label"
    failures=$((failures + 1))
  fi
}

# A frame that finds no receive posted is dropped (as on a NIC), and
# perftest's server then waits forever: every server posts a receive for each
# frame of the run up front (-r >= -n), so a shared, slow CPU loses nothing.
raw bw raw_ethernet_bw -n 2000 -r 2000
raw bw_small raw_ethernet_bw -s 64 -n 4000 -r 4000
raw lat raw_ethernet_lat -n 1000
# Packet pacing (IBV_QP_RATE_LIMIT, --rate_limit_type=PP) is what burst_lat
# needs on Ethernet (its SW limiter refuses latency tests, HW is IB only);
# -Q 1: perftest signals no send otherwise. At 50 MB/s a burst of 16 frames
# fits the pacing credit (device/params.h kPaceBurstNs), so the server's
# answers never lag behind its exit.
raw burst_lat raw_ethernet_burst_lat -n 1000 -r 1000 --rate_limit_type=PP --rate_limit=50 \
  --rate_units=M --burst_size=16 -Q 1
# Paced to 5 MB/s, the sender stays below it.
if raw bw_paced raw_ethernet_bw -s 64 -n 2000 -r 2000 --rate_limit_type=PP --rate_limit=5 --rate_units=M; then
  avg=$(grep -E "$lines" "$RUN_PAIR_CLIENT_LOG" | tail -1 | awk '{print $4}')
  if ! awk -v a="$avg" 'BEGIN { exit !(a <= 5 * 1.25) }'; then
    echo "FAIL bw_paced: $avg MB/s is above the 5 MB/s rate limit"
    failures=$((failures + 1))
  fi
fi
# IPs and ports: perftest's -J/-K name the server's, -j/-k the client's, on
# both sides; each side's rule matches the frames addressed to it.
ip4="-J 2.2.2.2 -j 1.1.1.1 -K 5678 -k 1234"
# shellcheck disable=SC2086
raw bw_udp raw_ethernet_bw -n 2000 -r 2000 $ip4
# shellcheck disable=SC2086
raw lat_tcp raw_ethernet_lat -n 1000 $ip4 --tcp
# shellcheck disable=SC2086
raw lat_ipv6 raw_ethernet_lat -n 1000 --raw_ipv6 -J 2001:db8::2 -j 2001:db8::1 -K 5678 -k 1234

# The packet pool stays bounded. A UD sender on the engine's loopback
# outran its receiver (64 frames sent per poll, 32 received), the loopback's
# queue grew for the whole run and every frame in it held a buffer: 4,700
# buffers after this run (20 MB), 74,440 after a bench. The senders wait for
# the loopback now (back-pressure at 1024 frames), and the buffers are reused.
# Two seconds of datagrams (-D), not a count: a UD datagram that finds no
# receive posted is dropped (rx_ud_no_recv, as mlx5 drops it), and perftest's
# server waits for every one of -n, so one time slice in which the server
# did not repost its 512 receives hung the run (seen once in CI: 624 of
# 1,000,000 dropped). A duration run ends on time on both sides.
if run_pair --label ud_pool --forbid '[Ff]ailed|[Cc]ouldn.t|[Ee]rror' 120 \
     ib_send_bw -d uroce0 -c UD -s 64 -D 2 -p $((port + 1)) -- \
     ib_send_bw -d uroce0 -c UD -s 64 -D 2 -p $((port + 1)) localhost; then
  stats=$("$UROCE_BIN" stats --name uroce0)
  buffers=$(awk '$1 == "packet_buffers" { print $2 }' <<<"$stats")
  if [[ -n $buffers ]] && ((buffers <= 2048)); then
    echo "ok   ud_pool: packet_buffers $buffers after raw_ethernet_bw and 2 s of UD datagrams ($(awk '$1 == "rx_packets" { print $2 }' <<<"$stats") frames received in all)"
  else
    echo "FAIL ud_pool: packet_buffers ${buffers:-?} (at most 2048)"
    failures=$((failures + 1))
  fi
else
  echo "FAIL ud_pool: ib_send_bw -c UD"
  failures=$((failures + 1))
fi
port=$((port + 1))

# Without CAP_NET_RAW (root with the capability dropped): EPERM.
no_net_raw() { setpriv --inh-caps=-all --bounding-set=-net_raw -- "$@"; }
log="$UROCE_LOG_DIR/no_net_raw.log"
if no_net_raw timeout -k 5 30 "$UROCE_BIN" run -- "$binary" --gtest_filter='RawPacketNoCap.*' \
     >"$log" 2>&1 && grep -q '\[  PASSED  \] 1 test' "$log" && ! grep -q SKIPPED "$log"; then
  echo "ok   no CAP_NET_RAW: ibv_create_qp(IBV_QPT_RAW_PACKET) is EPERM"
else
  echo "FAIL no CAP_NET_RAW (RawPacketNoCap)"
  tail -20 "$log"
  failures=$((failures + 1))
fi
log="$UROCE_LOG_DIR/no_net_raw_perftest.log"
if ! no_net_raw timeout -k 5 30 "$UROCE_BIN" run -- raw_ethernet_bw -d uroce0 --client \
     -B $mac_c -E $mac_s -n 10 >"$log" 2>&1 && grep -qE 'Operation not permitted|Couldn.t create QP|Failed to create QP' "$log"; then
  echo "ok   no CAP_NET_RAW: raw_ethernet_bw cannot create its QP"
else
  echo "FAIL no CAP_NET_RAW: raw_ethernet_bw"
  tail -20 "$log"
  failures=$((failures + 1))
fi

echo "failures: $failures"
((failures == 0))
