#!/usr/bin/env bash
# Process death (issue 14): kill -9 in the middle of traffic.
#
# Clients: Debian's perftest (ib_write_bw, ib_read_bw, ib_atomic_bw) between
# two processes of one engine; one side is killed with SIGKILL while data
# moves, as the requester (perftest's client) or as the passive target of
# the WRITEs, READs and atomics (its server). Then:
#   - a killed target: the requester gets the completion status two NICs
#     give when the responder's QP is gone (retries, then RETRY_EXC_ERR,
#     status 12) within perftest's retry time, and fails;
#   - the engine gets back to its baseline, taken after a first full run:
#     the same object counts (uroce stats --json: PDs, MRs, CQs, QPs, SRQs,
#     completion channels, clients), the same open descriptors
#     (/proc/PID/fd), and resident memory within kRssSlackKiB of it.
# Then kill -9 of the engine itself: a client waiting for async events
# (ibverbs-utils' ibv_asyncwatch) gets IBV_EVENT_DEVICE_FATAL, the clients
# in traffic end without crashing or hanging, and `uroce start` starts a new
# engine on the same name at once, which passes traffic.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
set +m

for tool in ib_write_bw ib_read_bw ib_atomic_bw ibv_asyncwatch jq; do
  command -v "$tool" >/dev/null || { echo "kill9_test: $tool is missing: skipped"; exit 77; }
done

kRssSlackKiB=$((8192 + UROCE_ASAN_QUARANTINE_KIB))  # allocator caches: the heap does not shrink to the byte
fail() {
  echo "FAIL: $*" >&2
  dump_engine_logs
  exit 1
}

start_engine uroce0 >/dev/null
engine=$(cat "$UROCE_RUNTIME_DIR/uroce0.pid")

# Object counts and clients of the engine, as one line.
report() { uroce stats --json | jq -c ".engines[0].report | $1"; }
objects() { report '[.objects, (.clients | length)]'; }
fds() { ls "/proc/$engine/fd" | wc -l; }
rss() { awk '/^VmRSS:/ { print $2 }' "/proc/$engine/status"; }

# pair TOOL PORT SECONDS: a perftest server and client with traffic for
# SECONDS; sets server and client (their pids: uroce run execs the tool).
port=18900
pair() {
  local tool=$1 seconds=$2
  port=$((port + 1))
  "$UROCE_BIN" run -- "$tool" -x 0 -D "$seconds" -p "$port" >"$UROCE_LOG_DIR/$tool-$port.server.log" 2>&1 &
  server=$!
  sleep 0.3
  "$UROCE_BIN" run -- "$tool" -x 0 -D "$seconds" -p "$port" localhost >"$UROCE_LOG_DIR/$tool-$port.client.log" 2>&1 &
  client=$!
  add_cleanup "kill -9 $server $client 2>/dev/null || true"
}

# Waits until both QPs of the pair pass traffic (their packet counters move).
wait_for_traffic() {
  local i before now
  for ((i = 0; i < 100; i++)); do
    now=$(report '[.qps[] | .tx_packets] | add // 0')
    if [[ -n ${before:-} && $now -gt $before && $(report '.qps | length') -ge 2 ]]; then
      return 0
    fi
    before=$now
    sleep 0.1
  done
  return 1
}

# back_to_baseline LABEL: objects and fds as the baseline within 5 s, RSS
# within the slack.
back_to_baseline() {
  local label=$1 i now_objects now_fds
  for ((i = 0; i < 50; i++)); do
    now_objects=$(objects)
    now_fds=$(fds)
    [[ $now_objects == "$base_objects" && $now_fds == "$base_fds" ]] && break
    sleep 0.1
  done
  [[ $now_objects == "$base_objects" ]] || fail "$label: objects $now_objects, baseline $base_objects"
  [[ $now_fds == "$base_fds" ]] || { ls -l "/proc/$engine/fd" >&2; fail "$label: $now_fds fds, baseline $base_fds"; }
  local now_rss
  now_rss=$(rss)
  ((now_rss <= base_rss + kRssSlackKiB)) || fail "$label: RSS $now_rss KiB, baseline $base_rss KiB"
  echo "ok: $label: objects $now_objects, $now_fds fds, RSS $now_rss KiB (baseline $base_rss KiB)"
}

# A first full run of each tool warms the engine up (heap, packet pool).
for tool in ib_write_bw ib_read_bw ib_atomic_bw; do
  pair "$tool" 1
  wait_gone "$client" 30 && ((rc == 0)) || fail "warm-up $tool: client $(cat "$UROCE_LOG_DIR/$tool-$port.client.log")"
  wait_gone "$server" 10 || fail "warm-up $tool: the server did not end"
done
base_objects=$(objects)
base_fds=$(fds)
base_rss=$(rss)
[[ $(report '[.objects[]] | all(. == 0)') == true ]] ||
  fail "objects left after clean runs: $base_objects"
echo "baseline: objects $base_objects, $base_fds fds, RSS $base_rss KiB"

for tool in ib_write_bw ib_read_bw ib_atomic_bw; do
  # The passive target dies: the requester's operations are retried, then
  # fail with RETRY_EXC_ERR (status 12), as between two NICs.
  pair "$tool" 30
  wait_for_traffic || fail "$tool: no traffic"
  kill -9 "$server"
  killed_at=$SECONDS
  wait_gone "$client" 10 || fail "$tool: the requester still runs 10 s after its target died"
  ((rc != 0)) || fail "$tool: the requester passed although its target died"
  grep -qE 'status 12|RETRY_EXC' "$UROCE_LOG_DIR/$tool-$port.client.log" ||
    { cat "$UROCE_LOG_DIR/$tool-$port.client.log" >&2; fail "$tool: the requester did not get RETRY_EXC_ERR"; }
  echo "ok: $tool: target killed, requester failed with RETRY_EXC_ERR after $((SECONDS - killed_at)) s"
  wait "$server" 2>/dev/null || true
  back_to_baseline "$tool, target killed"

  # The requester dies: the target notices nothing on its QP (it has no
  # work outstanding); perftest's server ends when its TCP peer is gone.
  pair "$tool" 30
  wait_for_traffic || fail "$tool: no traffic"
  kill -9 "$client"
  wait "$client" 2>/dev/null || true
  wait_gone "$server" 10 || kill -9 "$server" 2>/dev/null || true
  back_to_baseline "$tool, requester killed"
done

# ---- kill -9 of the engine ----
"$UROCE_BIN" run -- ibv_asyncwatch -d uroce0 >"$UROCE_LOG_DIR/asyncwatch.log" 2>&1 &
watcher=$!
add_cleanup "kill -9 $watcher 2>/dev/null || true"
pair ib_write_bw 30
wait_for_traffic || fail "ib_write_bw before the engine's kill: no traffic"
kill -9 "$engine"
for ((i = 0; i < 50; i++)); do
  grep -q DEVICE_FATAL "$UROCE_LOG_DIR/asyncwatch.log" && break
  sleep 0.1
done
grep -q DEVICE_FATAL "$UROCE_LOG_DIR/asyncwatch.log" ||
  { cat "$UROCE_LOG_DIR/asyncwatch.log" >&2; fail "no IBV_EVENT_DEVICE_FATAL within 5 s of the engine's death"; }
echo "ok: ibv_asyncwatch got IBV_EVENT_DEVICE_FATAL"
for who in client server; do
  pid=${!who}
  wait_gone "$pid" 10 || fail "the perftest $who still runs 10 s after the engine died"
  ((rc < 128)) || fail "the perftest $who died of signal $((rc - 128)) after the engine died"
done
echo "ok: the perftest client and server ended (no crash) after the engine died"
kill -9 "$watcher" 2>/dev/null || true

started_at=$(date +%s%N)
start_engine uroce0 >/dev/null || fail "no new engine on the name of the killed one"
echo "ok: a new uroce0 on the killed one's name answered in $((($(date +%s%N) - started_at) / 1000000)) ms"
run_pair --label after 30 ibv_rc_pingpong -g 0 -n 100 -p 18990 -- ibv_rc_pingpong -g 0 -n 100 -p 18990 localhost ||
  fail "ibv_rc_pingpong on the new engine"
echo "kill9: passed"
