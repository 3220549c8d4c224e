#!/usr/bin/env bash
# Debian's unmodified ucx_perftest across two engines in mlx5 mode: two
# network namespaces joined by a veth pair (as two_hosts_test.sh), an engine
# in each on a DPDK net_af_packet port, both named uroce0 as two machines'
# first ConnectX would be (ucx_perftest's server takes the device the client
# names). UCT's active messages, put, get and atomics over rc_mlx5 and
# dc_mlx5 (DC in uroce's wire format between the engines, docs/mlx5-dc.md)
# and active messages over ud_mlx5, the server in one namespace, the client
# in the other; the wire must have carried the frames.
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=tests/integration/ucx_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/ucx_lib.sh"

need_commands ucx_perftest ss ip
two_hosts_or_skip uctx 234
dir_a="$UROCE_TEST_DIR/hostA" dir_b="$UROCE_TEST_DIR/hostB"
mkdir -p "$dir_a" "$dir_b"
add_cleanup "$UROCE_BIN --runtime-dir $dir_a stop --all >&2; $UROCE_BIN --runtime-dir $dir_b stop --all >&2"
ip netns exec "$ns_a" "$UROCE_BIN" --runtime-dir "$dir_a" start --name uroce0 --mlx5 \
  --port "net_af_packet0,iface=$veth_a" --ip "$eng_a"
ip netns exec "$ns_b" "$UROCE_BIN" --runtime-dir "$dir_b" start --name uroce0 --mlx5 \
  --port "net_af_packet0,iface=$veth_b" --ip "$eng_b"

wire_rx() {
  "$UROCE_BIN" --runtime-dir "$1" stats | awk '$1 == "rx_packets" {print $2}'
}

failures=0 port=16300
across() {  # LABEL UCX_PERFTEST_ARGS...
  local label=$1 crc=0 src=0 i
  shift
  port=$((port + 1))
  local slog="$UROCE_LOG_DIR/$label.server.log" clog="$UROCE_LOG_DIR/$label.client.log"
  timeout -k 5 60 ip netns exec "$ns_b" "$UROCE_BIN" --runtime-dir "$dir_b" run -- ucx_perftest -p "$port" \
    </dev/null >"$slog" 2>&1 &
  local spid=$!
  for ((i = 0; i < 200; i++)); do
    [[ -n "$(ip netns exec "$ns_b" ss -Hltn "sport = :$port")" ]] && break
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.1
  done
  local before
  before=$(wire_rx "$dir_b")
  timeout -k 5 60 ip netns exec "$ns_a" "$UROCE_BIN" --runtime-dir "$dir_a" run -- \
    ucx_perftest "$kern_b" -p "$port" "$@" </dev/null >"$clog" 2>&1 || crc=$?
  ((crc == 0)) || kill "$spid" 2>/dev/null
  wait "$spid" || src=$?
  local frames=$(($(wire_rx "$dir_b") - before))
  if ((crc == 0 && src == 0 && frames > 0)) && grep -q '^Final:' "$clog"; then
    echo "ok: $label across two engines: $(grep '^Final:' "$clog" | tr -s ' '), hostB received $frames frames" >&2
  else
    echo "FAIL: $label across two engines: client exit $crc, server exit $src, hostB received $frames frames" >&2
    tail -n 20 "$slog" "$clog" >&2
    failures=$((failures + 1))
  fi
}

for tl in rc_mlx5 dc_mlx5; do
  for args in "am_lat -n 100" "am_bw -D bcopy -s 1024 -n 500" "put_bw -D zcopy -s 65536 -n 100" \
    "get -D zcopy -s 65536 -n 100" "fadd -n 200" "cswap -n 200"; do
    # shellcheck disable=SC2086  # one word per argument
    across "${tl}_${args%% *}" -d uroce0:1 -x "$tl" -w 5 -t $args
  done
done
across ud_mlx5_am_lat -d uroce0:1 -x ud_mlx5 -w 5 -t am_lat -n 100

if ((failures > 0)); then
  for d in "$dir_a" "$dir_b"; do tail -n 20 "$d"/*.log >&2; done
  exit 1
fi
echo "ucx_two_hosts: all passed"
