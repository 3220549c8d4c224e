#!/usr/bin/env bash
# Process death across two engines (issue 14): kill -9 in the middle of
# traffic, with the two ends of Debian's perftest (ib_write_bw, ib_read_bw,
# ib_atomic_bw) on two engines in two network namespaces joined by a veth
# pair (make_two_hosts in lib.sh). perftest's server runs on host B, its
# client (the requester) on host A; one of them is killed with SIGKILL while
# data moves:
#   - the passive target of the WRITEs, READs and atomics dies: its engine
#     drops what arrives for the QP that is gone, as a NIC does, so the
#     requester retries, then gets RETRY_EXC_ERR (status 12) within the
#     retry time (timeout 14, 7 retries: about half a second; 15 s allowed
#     on a loaded machine) and fails;
#   - the requester dies: the target has no work outstanding and notices
#     nothing on its QP; perftest's server ends when its TCP peer is gone.
# After each kill both engines get back to their baseline: the same object
# counts and clients (uroce stats --json), the same open descriptors, and
# resident memory within kRssSlackKiB. All along, a bystander pair on the
# same two engines (rc_sequence_checker -D: every message exactly once, in
# order, data checked) streams from A to B and must end without an error.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
set +m

for tool in ib_write_bw ib_read_bw ib_atomic_bw jq; do
  command -v "$tool" >/dev/null || { echo "kill9_two_hosts: $tool is missing: skipped"; exit 77; }
done
checker="$UROCE_BUILD_DIR/bin/rc_sequence_checker"
[[ -x $checker ]] || { echo "kill9_two_hosts: $checker is not built"; exit 1; }

kRssSlackKiB=$((8192 + UROCE_ASAN_QUARANTINE_KIB))  # allocator caches: the heap does not shrink to the byte
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

two_hosts_or_skip uk9 234
in_a() { ip netns exec "$ns_a" "$@"; }
in_b() { ip netns exec "$ns_b" "$@"; }
in_a "$UROCE_BIN" start --name k9A --port "net_af_packet0,iface=$veth_a" --ip "$eng_a" >/dev/null
in_b "$UROCE_BIN" start --name k9B --port "net_af_packet0,iface=$veth_b" --ip "$eng_b" >/dev/null
declare -A engine_pid=([k9A]=$(cat "$UROCE_RUNTIME_DIR/k9A.pid") [k9B]=$(cat "$UROCE_RUNTIME_DIR/k9B.pid"))

report() {  # ENGINE JQ_FILTER: one line
  uroce stats --name "$1" --json | jq -c ".engines[0].report | $2"
}
objects() { report "$1" '[.objects, (.clients | length)]'; }
fds() { ls "/proc/${engine_pid[$1]}/fd" | wc -l; }
rss() { awk '/^VmRSS:/ { print $2 }' "/proc/${engine_pid[$1]}/status"; }

# tool_pid PID NAME: the process NAME at the bottom of PID's tree (the
# shell, ip netns exec and uroce run between them may fork), waited for up
# to 10 s. The engine sees that pid, and it is the one to kill.
tool_pid() {
  local p i c
  for ((i = 0; i < 100; i++)); do
    p=$1
    while c=$(cat "/proc/$p/task/$p/children" 2>/dev/null) && [[ -n ${c// /} ]]; do
      p=${c%% *}
    done
    [[ $(cat "/proc/$p/comm" 2>/dev/null) == "${2:0:15}" ]] && { echo "$p"; return 0; }
    sleep 0.1
  done
  return 1
}

# pair TOOL SECONDS: perftest's server on B, its client on A; sets server
# and client (the pids of their wrappers, which end with the tool's status)
# and server_tool and client_tool (the tools' own pids).
port=$((19300 + $$ % 500))
pair() {
  local tool=$1 seconds=$2
  port=$((port + 1))
  log="$UROCE_LOG_DIR/$tool-$port"
  in_b "$UROCE_BIN" run -- "$tool" -d k9B -x 0 -D "$seconds" -p "$port" >"$log.server.log" 2>&1 &
  server=$!
  sleep 0.5
  in_a "$UROCE_BIN" run -- "$tool" -d k9A -x 0 -D "$seconds" -p "$port" "$kern_b" >"$log.client.log" 2>&1 &
  client=$!
  add_cleanup "kill -9 $server $client 2>/dev/null || true"
  server_tool=$(tool_pid "$server" "$tool") || server_tool=  # a warm-up run may be over
  client_tool=$(tool_pid "$client" "$tool") || client_tool=
  add_cleanup "kill -9 $server_tool $client_tool 2>/dev/null || true"
}

# wait_for_traffic PID: the QPs of PID on host A send packets.
wait_for_traffic() {
  local pid=$1 i before= now
  for ((i = 0; i < 300; i++)); do
    now=$(report k9A "[.qps[] | select(.pid == $pid) | .tx_packets] | add // 0")
    if [[ -n $before && $now -gt $before && $now -gt 0 ]]; then
      return 0
    fi
    before=$now
    sleep 0.1
  done
  return 1
}

# back_to_baseline LABEL: both engines' objects and fds as their baselines
# within 10 s, RSS within the slack.
back_to_baseline() {
  local label=$1 e i now_objects now_fds now_rss line=""
  for e in k9A k9B; do
    for ((i = 0; i < 100; i++)); do
      now_objects=$(objects "$e")
      now_fds=$(fds "$e")
      [[ $now_objects == "${base_objects[$e]}" && $now_fds == "${base_fds[$e]}" ]] && break
      sleep 0.1
    done
    [[ $now_objects == "${base_objects[$e]}" ]] ||
      fail "$label: $e objects $now_objects, baseline ${base_objects[$e]}"
    [[ $now_fds == "${base_fds[$e]}" ]] ||
      { ls -l "/proc/${engine_pid[$e]}/fd" >&2; fail "$label: $e has $now_fds fds, baseline ${base_fds[$e]}"; }
    now_rss=$(rss "$e")
    ((now_rss <= base_rss[$e] + kRssSlackKiB)) || fail "$label: $e RSS $now_rss KiB, baseline ${base_rss[$e]} KiB"
    line+=" $e: $now_fds fds, RSS $now_rss KiB (baseline ${base_rss[$e]});"
  done
  echo "ok: $label: both engines at their baseline:$line"
}

# A first full run of each tool warms both engines up (heap, packet pools).
for tool in ib_write_bw ib_read_bw ib_atomic_bw; do
  pair "$tool" 1
  wait_gone "$client" 60 && ((rc == 0)) || fail "warm-up $tool: client $(tail -n 5 "$log.client.log")"
  wait_gone "$server" 15 || fail "warm-up $tool: the server did not end"
done
for e in k9A k9B; do
  [[ $(report "$e" '[.objects[]] | all(. == 0)') == true ]] || fail "$e: objects left after clean runs: $(objects "$e")"
done

# The bystander: streams from A to B until its client gets SIGUSR1 (-D 150
# bounds it whatever happens). Its objects are made at its start, so the
# baseline includes them and stays fixed while it runs.
bystander_port=$((port + 400))
in_b "$UROCE_BIN" run -- "$checker" -d k9B -g 0 -p "$bystander_port" -D 150 -t 240 \
  >"$UROCE_LOG_DIR/bystander.server.log" 2>&1 &
bystander_server=$!
sleep 0.5
in_a "$UROCE_BIN" run -- "$checker" -d k9A -g 0 -p "$bystander_port" -D 150 -t 240 "$kern_b" \
  >"$UROCE_LOG_DIR/bystander.client.log" 2>&1 &
bystander_client=$!
add_cleanup "kill -9 $bystander_server $bystander_client 2>/dev/null || true"
bystander_client_tool=$(tool_pid "$bystander_client" rc_sequence_checker) || fail "no bystander client process"
add_cleanup "kill -9 $bystander_client_tool 2>/dev/null || true"
wait_for_traffic "$bystander_client_tool" || fail "the bystander pair passes no traffic"

declare -A base_objects base_fds base_rss
for e in k9A k9B; do
  base_objects[$e]=$(objects "$e")
  base_fds[$e]=$(fds "$e")
  base_rss[$e]=$(rss "$e")
  echo "baseline $e (with the bystander): objects ${base_objects[$e]}, ${base_fds[$e]} fds, RSS ${base_rss[$e]} KiB"
done

for tool in ib_write_bw ib_read_bw ib_atomic_bw; do
  # The passive target (on B) dies: the requester (on A) retries, then
  # fails with RETRY_EXC_ERR (status 12).
  pair "$tool" 60
  [[ -n $server_tool && -n $client_tool ]] || fail "$tool: no server or client process"
  wait_for_traffic "$client_tool" || fail "$tool: no traffic"
  kill -9 "$server_tool"
  killed_at=$SECONDS
  wait_gone "$client" 15 || fail "$tool: the requester still runs 15 s after its target died"
  ((rc != 0)) || fail "$tool: the requester passed although its target died"
  grep -qE 'status 12|RETRY_EXC' "$log.client.log" ||
    { cat "$log.client.log" >&2; fail "$tool: the requester did not get RETRY_EXC_ERR"; }
  echo "ok: $tool: target on B killed, requester on A failed with RETRY_EXC_ERR after $((SECONDS - killed_at)) s"
  wait "$server" 2>/dev/null || true
  back_to_baseline "$tool, target killed"

  # The requester (on A) dies in the middle of its WRITEs, READs or atomics.
  pair "$tool" 60
  [[ -n $server_tool && -n $client_tool ]] || fail "$tool: no server or client process"
  wait_for_traffic "$client_tool" || fail "$tool: no traffic"
  kill -9 "$client_tool"
  wait "$client" 2>/dev/null || true
  wait_gone "$server" 15 || { kill -9 "$server_tool" "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; }
  echo "ok: $tool: requester on A killed"
  back_to_baseline "$tool, requester killed"
done

# The bystander noticed nothing: it is still streaming, then ends clean.
for who in bystander_client bystander_server; do
  kill -0 "${!who}" 2>/dev/null ||
    { cat "$UROCE_LOG_DIR"/bystander.*.log >&2; fail "the bystander ended before the kills were done"; }
done
kill -USR1 "$bystander_client_tool"
wait_gone "$bystander_client" 60 || fail "the bystander client still runs"
((rc == 0)) || { cat "$UROCE_LOG_DIR"/bystander.*.log >&2; fail "the bystander client failed (exit $rc)"; }
wait_gone "$bystander_server" 30 || fail "the bystander server still runs"
((rc == 0)) || { cat "$UROCE_LOG_DIR"/bystander.*.log >&2; fail "the bystander server failed (exit $rc)"; }
echo "ok: bystander: $(cat "$UROCE_LOG_DIR/bystander.server.log")"
for e in k9A k9B; do
  for ((i = 0; i < 100; i++)); do
    [[ $(report "$e" '[.objects[]] | all(. == 0)') == true ]] && break
    sleep 0.1
  done
  [[ $(report "$e" '[.objects[]] | all(. == 0)') == true ]] || fail "$e: objects left at the end: $(objects "$e")"
done
echo "kill9_two_hosts: passed"
