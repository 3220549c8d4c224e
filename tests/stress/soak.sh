#!/usr/bin/env bash
# The soak (issue 14): one engine with its fault injector on the loopback
# port, and on it, for the whole run, at once:
#   - churn: CHURNERS loops of verbs_churn processes (stress/verbs_churn.c),
#     each living 1-4 s, creating and destroying PDs, CQs, completion
#     channels, MRs, SRQs, XRC domains (private and file-shared), XRC SRQs
#     and QPs round after round, and ending clean, by exit(0) with objects
#     alive, or by SIGKILL to itself;
#   - traffic: PAIRS loops of rc_sequence_checker pairs, RC SENDs and
#     WRITE_WITH_IMMs through the faults, every message checked exactly once
#     and in order (rc_sequence_checker.c);
#   - floods on the control socket (stress/control_flood.cc): 50 sessions
#     at once, a session that never reads its replies, malformed messages,
#     clients that die at random points of their set-up.
# Checks: every process of every loop behaved, the engine stayed up, and
# once all clients are gone the engine holds no object and no session, its
# open descriptors are those of the baseline and its resident memory is
# within kRssSlackKiB of it, and every frame buffer is back in its pool
# (packet_buffers_in_use 0: none lost). The baseline is taken after a
# warm-up of the same load (heap and pools at their working size), so growth
# over the run is what a leak would show; most of what remains is the frame
# buffer pool (about 4.3 KiB a buffer), which keeps its high-water mark: the
# figures give it beside the RSS (docs/testing.md, "The soak").
#
#   soak.sh [--minutes M | --seconds S] [--churners N] [--pairs N] [--faults 'drop=.. ..']
#
# The suite runs --seconds 40 (after the warm-up); by hand: --minutes 10.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../integration/lib.sh"
set +m

seconds=60 churners=3 pairs=2 warmup=15
faults="drop=0.02 duplicate=0.01 reorder=0.05 corrupt=0.005 delay=100"
while (($#)); do
  case $1 in
    --minutes) seconds=$(($2 * 60)); shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --churners) churners=$2; shift 2 ;;
    --pairs) pairs=$2; shift 2 ;;
    --faults) faults=$2; shift 2 ;;
    *) echo "usage: $0 [--minutes M | --seconds S] [--churners N] [--pairs N] [--faults F]" >&2; exit 2 ;;
  esac
done
command -v jq >/dev/null || { echo "soak: jq is missing: skipped"; exit 77; }
bin=$UROCE_BUILD_DIR/bin
for b in verbs_churn control_flood rc_sequence_checker; do
  [[ -x $bin/$b ]] || { echo "soak: $bin/$b is not built"; exit 1; }
done

kRssSlackKiB=$((16384 + UROCE_ASAN_QUARANTINE_KIB))  # allocator caches and arenas of a busy engine; a leak of
                    # one object per round would pass it within the first minute
failures=$UROCE_LOG_DIR/failures
: >"$failures"
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

start_engine soak0 >/dev/null
engine=$(cat "$UROCE_RUNTIME_DIR/soak0.pid")
# shellcheck disable=SC2086
uroce fault --name soak0 --port loopback $faults >/dev/null
report() { uroce stats --name soak0 --json | jq -c ".engines[0].report | $1"; }
fds() { ls "/proc/$engine/fd" | wc -l; }
rss() { awk '/^VmRSS:/ { print $2 }' "/proc/$engine/status"; }
counter() { uroce stats --name soak0 | awk -v k="$1" '$1 == k && !n++ { print $2 }'; }  # reads it all: no SIGPIPE

# ---- the loops; each ends when the stop file appears ----
stop_file=$UROCE_LOG_DIR/stop
xrcd_dir=$UROCE_TEST_DIR/xrcd
mkdir -p "$xrcd_dir"

churn_loop() {  # ID
  local id=$1 n=0 rc log
  while [[ ! -e $stop_file ]]; do
    n=$((n + 1))
    log=$UROCE_LOG_DIR/churn.$id.log
    rc=0
    timeout -k 5 60 "$UROCE_BIN" run -- "$bin/verbs_churn" -d soak0 -t $((1 + RANDOM % 4)) -e random \
      -x "$xrcd_dir" >>"$log" 2>&1 || rc=$?
    # 137: the process ended itself with SIGKILL (-e kill), as asked
    if ((rc != 0 && rc != 137)) || grep -q '^FAIL' "$log"; then
      echo "churn $id, process $n: exit $rc: $(grep -m1 FAIL "$log")" >>"$failures"
      return
    fi
  done
}

traffic_loop() {  # ID
  local id=$1 n=0 port=$((24000 + $$ % 1000 + $1 * 200)) left run
  while [[ ! -e $stop_file ]]; do
    n=$((n + 1))
    port=$((port + 1))
    left=$((soak_end - SECONDS))
    run=$((left < 15 ? (left < 3 ? 3 : left) : 15))
    if ! run_pair --label "traffic$id.$n" --delay 0.5 --forbid 'FAIL' 120 \
         "$bin/rc_sequence_checker" -d soak0 -p "$port" -D "$run" -t 100 -T 17 -- \
         "$bin/rc_sequence_checker" -d soak0 -p "$port" -D "$run" -t 100 -T 17 localhost 2>>"$UROCE_LOG_DIR/traffic$id.err"; then
      echo "traffic $id, run $n: $(grep -h -m1 FAIL "$RUN_PAIR_SERVER_LOG" "$RUN_PAIR_CLIENT_LOG")" >>"$failures"
      return
    fi
    grep -h '^received' "$RUN_PAIR_SERVER_LOG" >>"$UROCE_LOG_DIR/traffic.received"
  done
}

flood_loop() {
  local n=0 mode rc
  while [[ ! -e $stop_file ]]; do
    n=$((n + 1))
    for mode in "burst 50" "flood" "junk 8" "die 20"; do
      rc=0
      # shellcheck disable=SC2086
      timeout -k 5 90 "$bin/control_flood" soak0 $mode >>"$UROCE_LOG_DIR/flood.log" 2>&1 || rc=$?
      if ((rc != 0)); then
        echo "flood $mode, cycle $n: exit $rc: $(grep -m1 FAIL "$UROCE_LOG_DIR/flood.log")" >>"$failures"
        return
      fi
    done
  done
}

# sampler: the engine's RSS, fds and objects every 2 s, for the figures
sampler() {
  while [[ ! -e $stop_file ]] && kill -0 "$engine" 2>/dev/null; do
    echo "$SECONDS $(rss) $(fds) $(counter packet_buffers) $(counter packet_buffers_in_use) $(report '[.objects.qps, .objects.mrs, (.clients | length)] | @tsv' 2>/dev/null)" \
      >>"$UROCE_LOG_DIR/samples"
    sleep 2
  done
}

# run_load SECONDS: every loop for SECONDS, then waits for them all.
run_load() {
  local pids=() i
  rm -f "$stop_file"
  soak_end=$((SECONDS + $1))
  # (stderr: bash's "Killed" notes on the churners that end by SIGKILL)
  for ((i = 1; i <= churners; i++)); do churn_loop "$i" 2>/dev/null & pids+=($!); done
  for ((i = 1; i <= pairs; i++)); do traffic_loop "$i" & pids+=($!); done
  flood_loop & pids+=($!)
  sampler & pids+=($!)
  add_cleanup "touch $stop_file; kill ${pids[*]} 2>/dev/null || true"
  while ((SECONDS < soak_end)) && [[ ! -s $failures ]]; do
    kill -0 "$engine" 2>/dev/null || fail "the engine died (exit or crash): $(tail -n 20 "$UROCE_RUNTIME_DIR"/soak0.log 2>/dev/null)"
    sleep 1
  done
  touch "$stop_file"
  # Each loop's current process is bounded (timeouts above): 150 s at most.
  for i in "${pids[@]}"; do
    timeout -k 5 150 tail --pid="$i" -f /dev/null || true
    wait "$i" 2>/dev/null || true
  done
  [[ ! -s $failures ]] || { cat "$failures" >&2; fail "a client misbehaved or was failed by the engine"; }
  kill -0 "$engine" 2>/dev/null || fail "the engine died"
}

# quiesce LABEL: every object and session of the engine gone within 30 s
# (but the session of the `uroce stats` asking).
quiesce() {
  local i
  for ((i = 0; i < 300; i++)); do
    [[ $(report '([.objects[]] | all(. == 0)) and ([.clients[] | select(.comm != "uroce")] | length == 0)') == true ]] &&
      return 0
    sleep 0.1
  done
  fail "$1: the engine still holds $(report '[.objects, .clients]')"
}

echo "soak: warm-up, ${warmup} s (faults on the loopback: $faults)"
run_load "$warmup"
quiesce "after the warm-up"
base_fds=$(fds) base_rss=$(rss) base_pool=$(counter packet_buffers)
: >"$UROCE_LOG_DIR/samples"
: >"$UROCE_LOG_DIR/traffic.received"
flooding_before=$(counter clients_flooding) junk_before=$(counter clients_junk)
echo "soak: baseline after the warm-up: $base_fds fds, RSS $base_rss KiB; now $seconds s with $churners churners, $pairs traffic pairs, floods"

started=$SECONDS
run_load "$seconds"
quiesce "at the end"
end_fds=$(fds) end_rss=$(rss) end_pool=$(counter packet_buffers) end_in_use=$(counter packet_buffers_in_use)

# ---- figures ----
processes=$(cat "$UROCE_LOG_DIR"/churn.*.log | grep -c '^verbs_churn\[' || true)
read -r rounds qps mrs srqs xrcds < <(cat "$UROCE_LOG_DIR"/churn.*.log | awk '
  /^verbs_churn\[/ { for (i = 1; i <= NF; ++i) {
      if ($(i) == "rounds:") r += $(i - 1)
      if ($(i) ~ /^QPs/) q += $(i - 1); if ($(i) ~ /^MRs/) m += $(i - 1)
      if ($(i) ~ /^SRQs/) s += $(i - 1); if ($(i) ~ /^XRCDs/) x += $(i - 1) } }
  END { print r + 0, q + 0, m + 0, s + 0, x + 0 }')
killed=$(grep -c ': kill after' "$UROCE_LOG_DIR"/churn.*.log | awk -F: '{ s += $NF } END { print s + 0 }')
messages=$(awk '{ s += $2 } END { print s + 0 }' "$UROCE_LOG_DIR/traffic.received")
checker_runs=$(wc -l <"$UROCE_LOG_DIR/traffic.received")
peak_rss=$(awk 'BEGIN { m = 0 } $2 > m { m = $2 } END { print m }' "$UROCE_LOG_DIR/samples")
peak_fds=$(awk 'BEGIN { m = 0 } $3 > m { m = $3 } END { print m }' "$UROCE_LOG_DIR/samples")
peak_in_use=$(awk 'BEGIN { m = 0 } $5 > m { m = $5 } END { print m }' "$UROCE_LOG_DIR/samples")
flooding=$(($(counter clients_flooding) - flooding_before))
junk=$(($(counter clients_junk) - junk_before))
bursts=$(grep -c '^burst:' "$UROCE_LOG_DIR/flood.log" || true)
echo "---- soak figures ($((SECONDS - started)) s, faults: $faults) ----"
echo "churn: $processes processes ($killed ended by SIGKILL), $rounds rounds: $qps QPs, $mrs MRs, $srqs SRQs, $xrcds XRC domains"
echo "traffic: $checker_runs checker runs, $messages RC messages each exactly once, in order, data checked"
echo "floods: $bursts bursts of 50 sessions, $flooding flooding and $junk junk sessions hung up on"
echo "engine: fds $base_fds -> $end_fds (peak $peak_fds), RSS $base_rss -> $end_rss KiB (peak $peak_rss KiB)"
echo "frame buffers: pool $base_pool -> $end_pool (its high-water mark), in use at the end $end_in_use, at most $peak_in_use during the run"
echo "retransmissions: $(counter retransmits), faults injected: $(uroce stats --name soak0 | awk '$1 ~ /^fault_/ && $2 > 0 { printf "%s=%s ", $1, $2 }')"

((processes > 0 && checker_runs > 0 && messages > 0)) || fail "the load did not run"
((flooding > 0 && junk > 0)) || fail "the floods were not counted (clients_flooding +$flooding, clients_junk +$junk)"
((end_fds == base_fds)) || { ls -l "/proc/$engine/fd" >&2; fail "engine fds $end_fds, baseline $base_fds"; }
((end_in_use == 0)) || fail "$end_in_use frame buffers out of the pool with no QP left (lost)"
((end_rss <= base_rss + kRssSlackKiB)) || fail "engine RSS $end_rss KiB, baseline $base_rss KiB (slack $kRssSlackKiB)"
echo "soak: passed"
