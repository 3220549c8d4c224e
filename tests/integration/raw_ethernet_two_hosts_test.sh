#!/usr/bin/env bash
# Raw packet QPs across two engines (two network namespaces joined by a veth
# pair, each engine on a DPDK net_af_packet port): Debian's unmodified
# raw_ethernet_bw, raw_ethernet_lat and raw_ethernet_burst_lat, frames leaving one engine's port and
# steered by the other's rules; RoCE between the same engines still works.
#
#   raw_ethernet_two_hosts_test.sh PATH/TO/verbs_semantics
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
verbs_bin=${1:?usage: $0 PATH/TO/verbs_semantics}

two_hosts_or_skip rawe 232
in_a() { ip netns exec "$ns_a" "$@"; }
in_b() { ip netns exec "$ns_b" "$@"; }
in_a "$UROCE_BIN" start --name hostA --port "net_af_packet0,iface=$veth_a" --ip "$eng_a"
in_b "$UROCE_BIN" start --name hostB --port "net_af_packet0,iface=$veth_b" --ip "$eng_b"

failures=0
port=19300
mac_b=02:00:00:00:0b:02 mac_a=02:00:00:00:0a:01
lines='^ *[0-9]+ +[0-9]+ +[0-9.]+'
pair() {  # LABEL PROGRAM ARGS... : server on B, client on A
  local label=$1 prog=$2
  shift 2
  port=$((port + 1))
  if run_pair --label "$label" --delay 1 --forbid '[Ff]ailed|[Cc]ouldn.t|[Ee]rror|Unable' 60 \
       ip netns exec "$ns_b" "$prog" -d hostB -p "$port" --server -B $mac_b -E $mac_a "$@" -- \
       ip netns exec "$ns_a" "$prog" -d hostA -p "$port" --client -B $mac_a -E $mac_b "$@" &&
     grep -qE "$lines" "$RUN_PAIR_CLIENT_LOG"; then
    echo "ok   $label: $(grep -E "$lines" "$RUN_PAIR_CLIENT_LOG" | tail -1 | tr -s ' \t' ' ')"
  else
    echo "FAIL $label"
    failures=$((failures + 1))
  fi
}

# Every server posts a receive for each frame of its run (-r >= -n): a frame
# that finds none is dropped, as on a NIC. The senders are paced (packet
# pacing, 100 MB/s) so that a busy host does not overflow the af_packet
# rings between the engines: a lost frame leaves perftest's server waiting.
pace="--rate_limit_type=PP --rate_limit=100 --rate_units=M"
# shellcheck disable=SC2086
pair bw raw_ethernet_bw -n 2000 -r 2000 $pace
# shellcheck disable=SC2086
pair bw_udp raw_ethernet_bw -n 2000 -r 2000 -J 2.2.2.2 -j 1.1.1.1 -K 5678 -k 1234 $pace
pair lat raw_ethernet_lat -n 1000
# Bursts (perftest's default 1000 frames, in bursts of 16 at 50 MB/s, packet
# pacing as on one engine): B's engine must not lose one. A burst that came
# while B's engine was off its CPU waits in its port's RX ring (16 MiB of
# frames, net/dpdk_port.cc), and B's port counts what the ring could not
# hold (rx_missed). -t 1000: perftest's burst server skips the answer to a
# frame while -t of its own sends are not yet polled complete (its
# run_iter_lat_burst_server), and on a host shared by two engines and two
# busy-polling programs its engine is off the CPU often enough for that:
# the client then waits for that answer forever.
# shellcheck disable=SC2086
pair burst_lat raw_ethernet_burst_lat -n 1000 -r 1000 -t 1000 --burst_size=16 -Q 1 \
  --rate_limit_type=PP --rate_limit=50 --rate_units=M
# RoCE between the same two engines, beside the raw traffic.
port=$((port + 1))
if run_pair --label rc --listen "$ns_b:$port" --forbid '[Ff]ailed|[Cc]ouldn.t|[Ee]rror' 60 \
     ip netns exec "$ns_b" ibv_rc_pingpong -d hostB -g 0 -p "$port" -n 200 -- \
     ip netns exec "$ns_a" ibv_rc_pingpong -d hostA -g 0 -p "$port" -n 200 "$kern_b"; then
  echo "ok   rc_pingpong beside raw traffic"
else
  echo "FAIL rc_pingpong"
  failures=$((failures + 1))
fi

# A SNIFFER rule on A sees the RoCE frames A's engine sends out of its port.
log="$UROCE_LOG_DIR/sniffer.log"
if ip netns exec "$ns_a" env UROCE_RAW_WIRE_DEVICE=hostA UROCE_RAW_WIRE_PEER="$eng_b" \
     timeout -k 5 60 "$UROCE_BIN" run -- "$verbs_bin" --gtest_filter='RawPacketWire.*' >"$log" 2>&1 &&
   grep -q '\[  PASSED  \] 1 test' "$log" && ! grep -q SKIPPED "$log"; then
  echo "ok   sniffer: the engine's own RoCE frames on the wire"
else
  echo "FAIL sniffer"
  tail -20 "$log"
  failures=$((failures + 1))
fi

# No frame was lost at either port, and the packet pools stayed small: frame
# buffers are recycled (a pool is capped at packet_buffers_max).
for side in a b; do
  ns_var=ns_$side
  name=hostA
  [[ $side == b ]] && name=hostB
  stats=$(ip netns exec "${!ns_var}" "$UROCE_BIN" stats --name "$name")
  missed=$(awk '$1 == "rx_missed" { print $2 }' <<<"$stats")
  buffers=$(awk '$1 == "packet_buffers" { print $2 }' <<<"$stats")
  if [[ $missed == 0 && -n $buffers ]] && ((buffers <= 2048)); then
    echo "ok   $name: rx_missed 0, packet_buffers $buffers"
  else
    echo "FAIL $name: rx_missed ${missed:-?}, packet_buffers ${buffers:-?} (at most 2048)"
    failures=$((failures + 1))
  fi
done

# A port whose RX ring is too small for the sender (64 frames, the engine
# off its CPU now and then): the ring drops frames, as a NIC out of RX
# descriptors does, and B's port counts every one (rx_missed, the af_packet
# socket's tp_drops): what A's port sent was received or counted.
ip netns exec "$ns_b" "$UROCE_BIN" stop --name hostB >/dev/null
in_b "$UROCE_BIN" start --name hostB --port "net_af_packet0,iface=$veth_b,framecnt=64" --ip "$eng_b"
sent_before=$(ip netns exec "$ns_a" "$UROCE_BIN" stats --name hostA | awk '$1 == "tx_frames" { print $2 }')
port=$((port + 1))
run_pair --label small_ring --delay 1 60 \
  ip netns exec "$ns_b" raw_ethernet_bw -d hostB -p "$port" --server -B $mac_b -E $mac_a -F -s 1504 -D 2 -- \
  ip netns exec "$ns_a" raw_ethernet_bw -d hostA -p "$port" --client -B $mac_a -E $mac_b -F -s 1504 -D 2 || true
stats_a=$(ip netns exec "$ns_a" "$UROCE_BIN" stats --name hostA)
stats_b=$(ip netns exec "$ns_b" "$UROCE_BIN" stats --name hostB)
sent=$(($(awk '$1 == "tx_frames" { print $2 }' <<<"$stats_a") - ${sent_before:-0}))
got=$(awk '$1 == "rx_frames" { print $2 }' <<<"$stats_b")
missed=$(awk '$1 == "rx_missed" { print $2 }' <<<"$stats_b")
if [[ -n $sent && -n $got && -n $missed ]] && ((missed > 0 && got + missed >= sent)); then
  echo "ok   small RX ring: A's port sent $sent frames, B's received $got and counted $missed missed"
else
  echo "FAIL small RX ring: A's port sent ${sent:-?} frames, B's received ${got:-?}, rx_missed ${missed:-?}"
  failures=$((failures + 1))
fi

echo "failures: $failures"
((failures == 0))
