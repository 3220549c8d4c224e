#!/usr/bin/env bash
# What one message costs the engine: ib_send_bw -s 64 through an engine of
# its own (private runtime directory), profiled two ways.
#
#   tools/bench/profile_engine.sh [BUILD_DIR] [OUT_DIR]
#
# 1. perf (software clock; works in VMs without hardware counters): the
#    engine's CPU time, context switches and system calls over a 2-second
#    window of traffic, divided by the messages the engine moved in that
#    window (its tx_packets counter less its tx_acks: the SENDs, whatever
#    number of ACKs answered them),
#    and where the time went (perf report by symbol, user and kernel).
# 2. callgrind: the engine's user-space instructions per message over a whole
#    run of N messages (startup and connection setup included; they are a
#    small part), by function, exclusive and inclusive.
#
# Output: a summary on stdout; perf.data, callgrind.out and the reports in
# OUT_DIR (default: a new /tmp/uroce-profile.XXXXXX). Needs perf (Debian
# linux-perf) and valgrind; skips whichever is missing. Every process runs
# under `timeout`; the engines are stopped on exit.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$(cd "${1:-${UROCE_BUILD_DIR:-$here/../../build}}" && pwd)"
out="${2:-$(mktemp -d /tmp/uroce-profile.XXXXXX)}"
mkdir -p "$out"
uroce="$build/bin/uroce"
messages=${UROCE_PROFILE_MESSAGES:-200000}
work="$(mktemp -d /tmp/uroce-prof.XXXXXX)"
export UROCE_RUNTIME_DIR="$work/run"
mkdir -p "$UROCE_RUNTIME_DIR"
valgrind_pid=""
cleanup() {
  set +e
  for w in "${watchdogs[@]}" "${pairs[@]}"; do kill "$w" 2>/dev/null; done
  timeout -k 5 30 "$uroce" stop --all >/dev/null 2>&1
  if [[ -n "$valgrind_pid" ]]; then
    kill -TERM "$valgrind_pid" 2>/dev/null
    wait "$valgrind_pid" 2>/dev/null
  fi
  cp "$UROCE_RUNTIME_DIR"/*.log "$out/" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

port=$((26000 + $$ % 1000))
# send_bw_pair N: an ib_send_bw -s 64 server and client in the background;
# sets client_pid. They are bounded by a watchdog rather than `timeout`: on
# the VM this was written on, perf's cpu-clock sampling made coreutils
# timeout's POSIX timers fire seconds early (SIGALRM, SI_TIMER), which killed
# the perftest server mid-run.
send_bw_pair() {
  port=$((port + 1))
  "$uroce" run -- ib_send_bw -d uroce0 -x 0 -F -s 64 -n "$1" -p "$port" \
    >"$out/server.$port.log" 2>&1 &
  server_pid=$!
  pairs+=("$server_pid")
  sleep 0.5
  "$uroce" run -- ib_send_bw -d uroce0 -x 0 -F -s 64 -n "$1" -p "$port" 127.0.0.1 \
    >"$out/client.$port.log" 2>&1 &
  client_pid=$!
  pairs+=("$client_pid")
  ( sleep 900; kill -TERM "$server_pid" "$client_pid" ) </dev/null >/dev/null 2>&1 &
  watchdogs+=($!)
}
watchdogs=()
pairs=()  # every perftest process started, to be stopped on exit
# The SENDs the engine has sent: every frame but the ACKs.
sends_sent() { "$uroce" stats --name uroce0 | awk '$1 == "tx_packets" {t = $2} $1 == "tx_acks" {a = $2} END {print t - a}'; }

echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"

if command -v perf >/dev/null; then
  echo "== perf: ib_send_bw -s 64, 2-second window"
  "$uroce" start --name uroce0 >/dev/null
  engine=$(cat "$UROCE_RUNTIME_DIR/uroce0.pid")
  send_bw_pair 100000000  # more than the windows need at any rate: killed after them
  sleep 1.5
  a=$(sends_sent)
  perf record -q -e cpu-clock -F 4999 -g -p "$engine" -o "$out/perf.data" -- sleep 2 2>/dev/null &
  wait $!
  b=$(sends_sent)
  perf stat -x, -e task-clock,context-switches,raw_syscalls:sys_enter -p "$engine" \
    -o "$out/perf-stat.csv" -- sleep 2 &
  wait $!
  c=$(sends_sent)
  kill -TERM "$client_pid" "$server_pid" 2>/dev/null || true
  wait "$client_pid" "$server_pid" 2>/dev/null || true
  "$uroce" stop --name uroce0 >/dev/null
  samples=$(perf script -i "$out/perf.data" -F time 2>/dev/null | wc -l)
  task_ms=$(awk -F, '$3 == "task-clock" {print $1}' "$out/perf-stat.csv")
  cs=$(awk -F, '$3 == "context-switches" {print $1}' "$out/perf-stat.csv")
  sc=$(awk -F, '$3 ~ /sys_enter/ {print $1}' "$out/perf-stat.csv")
  awk -v m1="$((b - a))" -v s="$samples" -v m2="$((c - b))" -v t="$task_ms" -v cs="$cs" -v sc="$sc" 'BEGIN {
    printf "perf record window: %d messages (%.0f/s); %d samples at 4999 Hz: engine on a core %.0f%% of the time, %.2f us per message\n", m1, m1 / 2, s, s / 4999 / 2 * 100, s / 4999 * 1e6 / m1
    printf "perf stat window:   %d messages (%.0f/s); engine CPU %.0f ms of 2000, %.2f us per message\n", m2, m2 / 2, t, t * 1000 / m2
    printf "system calls: %.2f per message; context switches: %d in 2 s\n", sc / m2, cs }'
  set +o pipefail  # head closes the pipes early: not a failure
  perf report -i "$out/perf.data" --no-children --sort dso -g none --stdio 2>/dev/null |
    grep '%' | head -6 | sed 's/^/  time by object: /'
  perf report -i "$out/perf.data" --no-children --sort sym -g none --stdio 2>/dev/null >"$out/perf-report.txt"
  grep '%' "$out/perf-report.txt" | head -25 | sed 's/^/  /'
  perf report -i "$out/perf.data" --children --sort sym -g none --stdio 2>/dev/null >"$out/perf-report-children.txt"
  echo "  inclusive (children), selected:"
  grep -E 'process_vm_readv|process_vm_writev|sched_yield|epoll_wait|compute_icrc|crc32_z|requester_run|responder_receive|completer_receive|ptrace_may_access|security_ptrace' \
    "$out/perf-report-children.txt" | grep '%' | head -14 | sed 's/^/  /' || true
  set -o pipefail
else
  echo "== perf not installed (Debian: linux-perf): skipped"
fi

if command -v valgrind >/dev/null; then
  n=$messages
  echo "== callgrind: ib_send_bw -s 64 -n $n, whole engine run"
  timeout -k 5 900 valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.out" \
    "$build/bin/uroced" --name uroce0 --runtime-dir "$UROCE_RUNTIME_DIR" >"$out/callgrind.log" 2>&1 &
  valgrind_pid=$!
  for _ in $(seq 100); do
    [[ -S "$UROCE_RUNTIME_DIR/uroce0.sock" ]] && break
    sleep 0.2
  done
  send_bw_pair "$n"
  wait "$client_pid" || echo "client failed: see $out/client.$port.log"
  sleep 1
  packets=$(sends_sent)
  kill -TERM "$valgrind_pid"
  wait "$valgrind_pid" || true
  valgrind_pid=""
  callgrind_annotate "$out/callgrind.out" >"$out/callgrind-exclusive.txt" 2>/dev/null
  callgrind_annotate --inclusive=yes "$out/callgrind.out" >"$out/callgrind-inclusive.txt" 2>/dev/null
  total=$(sed -n 's/^ *\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' "$out/callgrind-exclusive.txt" | tr -d ,)
  msgs=$packets
  awk -v t="$total" -v m="$msgs" 'BEGIN { printf "instructions: %d for %d messages: %.0f per message\n", t, m, t / m }'
  per_msg() {  # FILE COUNT: "instructions per message  function" for the top lines
    grep -E '^ *[0-9,]+ \( *[0-9.]+%\)  ' "$1" | grep -v 'PROGRAM TOTALS' |
      sed -E 's/^ *([0-9,]+) \( *[0-9.]+%\)  (.*)$/\1 \2/; s/ \[[^]]*\]$//; s/\(anonymous namespace\):://g; s/\(.*$//; s/ [^ :]*:/ /' |
      grep -vE ' (0x[0-9a-f]+|main|__libc_start_main.*|)$' |
      awk -v m="$msgs" '!seen[$2]++ { n = $1; gsub(",", "", n); printf "  %7.0f  %s\n", n / m, $2 }' |
      head -"$2"
  }
  set +o pipefail
  echo "  exclusive, instructions per message:"
  per_msg "$out/callgrind-exclusive.txt" 20
  echo "  inclusive, instructions per message:"
  per_msg "$out/callgrind-inclusive.txt" 30
  set -o pipefail
else
  echo "== valgrind not installed: skipped"
fi
echo "files in $out"
