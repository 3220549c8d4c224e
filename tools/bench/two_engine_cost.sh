#!/usr/bin/env bash
# What a message costs two engines on a veth pair: ib_write_bw between two
# engines in two network namespaces (net_af_packet ports), and the CPU time
# each engine used (its utime + stime from /proc, the kernel's work in its
# system calls included: af_packet transmit, the veth, the peer's receive)
# per 1000 messages, beside the bandwidth. CPU time per message does not
# depend on where the scheduler put whom, as the bandwidth on a 2-CPU VM
# does, so two builds compare run by run (docs/PERFORMANCE.md, issue 28).
#
#   tools/bench/two_engine_cost.sh [BUILD_DIR] [RUNS] [SIZE] [MESSAGES]
#
# Defaults: the build next to this script, 3 runs, 64 KiB, 20000 messages.
# UROCE_COST_ENGINE_FLAGS_A / _B: extra uroced flags (e.g. --cpu 0).
# UROCE_COST_BATCH=1: both engines SCHED_BATCH, whose wake-ups preempt
# nobody: sharing one CPU, each then runs until it idles, so its CPU time is
# its work rather than time spent spinning beside the other (the receiving
# engine's figure compares builds best; the bandwidth is not the default's).
# UROCE_COST_STATS=1: each engine's non-zero counters at the end.
# Needs root (ip netns). Every namespace and engine is removed on exit.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$(cd "${1:-${UROCE_BUILD_DIR:-$here/../../build}}" && pwd)"
runs=${2:-3}
size=${3:-65536}
messages=${4:-20000}
uroce="$build/bin/uroce"
tag=$$
ns_a="ucost-a-$tag" ns_b="ucost-b-$tag"
work="$(mktemp -d /tmp/uroce-cost.XXXXXX)"

cleanup() {
  for side in a b; do
    ns="ucost-$side-$tag"
    ip netns exec "$ns" env UROCE_RUNTIME_DIR="$work/$side" timeout 10 "$uroce" stop --name "host$side" \
      >/dev/null 2>&1 || true
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

ip netns add "$ns_a"
ip netns add "$ns_b"
ip link add "uca$tag" netns "$ns_a" mtu 9000 type veth peer name "ucb$tag" netns "$ns_b" mtu 9000
for side in a b; do
  ns="ucost-$side-$tag" dev="uc$side$tag" n=$([ $side = a ] && echo 1 || echo 2)
  ip netns exec "$ns" sysctl -qw "net.ipv6.conf.$dev.disable_ipv6=1"
  ip -n "$ns" link set lo up
  ip -n "$ns" link set "$dev" up
  ip -n "$ns" addr add "10.231.$((tag % 200)).$n/24" dev "$dev"
  flags_var="UROCE_COST_ENGINE_FLAGS_${side^^}"
  # shellcheck disable=SC2086
  ip netns exec "$ns" env UROCE_RUNTIME_DIR="$work/$side" timeout 30 "$uroce" start --name "host$side" \
    --port "net_af_packet0,iface=$dev" --ip "10.231.$((tag % 200)).1$n" ${!flags_var:-} >/dev/null
done
pid_a=$(cut -d' ' -f1 "$work/a/hosta.pid")
pid_b=$(cut -d' ' -f1 "$work/b/hostb.pid")
if [[ ${UROCE_COST_BATCH:-} ]]; then
  for t in /proc/"$pid_a"/task/* /proc/"$pid_b"/task/*; do chrt -b -p 0 "${t##*/}" >/dev/null; done
fi
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

echo "build $build: ib_write_bw $size B x $messages, $runs runs"
for run in $(seq "$runs"); do
  a0=$(ticks "$pid_a") b0=$(ticks "$pid_b")
  ip netns exec "$ns_b" env UROCE_RUNTIME_DIR="$work/b" timeout 120 "$uroce" run -- \
    ib_write_bw -d hostb -m 4096 -s "$size" -n "$messages" -F >"$work/server.log" 2>&1 &
  server=$!
  sleep 1
  bw=$(ip netns exec "$ns_a" env UROCE_RUNTIME_DIR="$work/a" timeout 120 "$uroce" run -- \
    ib_write_bw -d hosta -m 4096 -s "$size" -n "$messages" -F "10.231.$((tag % 200)).2" 2>&1 |
    awk 'f {print $4; exit} /#bytes/ {f = 1}')
  wait "$server" || true
  a1=$(ticks "$pid_a") b1=$(ticks "$pid_b")
  awk -v bw="$bw" -v a=$((a1 - a0)) -v b=$((b1 - b0)) -v hz="$hz" -v n="$messages" -v r="$run" 'BEGIN {
    printf "run %d: %s MB/s; engine A %.1f ms, engine B %.1f ms of CPU per 1000 messages\n",
           r, bw, a * 1000 / hz * 1000 / n, b * 1000 / hz * 1000 / n }'
done
if [[ ${UROCE_COST_STATS:-} ]]; then
  for side in a b; do
    echo "== host$side"
    ip netns exec "ucost-$side-$tag" env UROCE_RUNTIME_DIR="$work/$side" "$uroce" stats --name "host$side" |
      awk '$2 != 0 && $2 ~ /^[0-9]+$/'
  done
fi
