#!/usr/bin/env bash
# A hostile client (hostile_client.cc: garbage in its rings, doorbells and
# queue headers, keys of another client) beside a well-behaved one
# (ibv_rc_pingpong with its data checked, all of it while the hostile one
# runs) on one engine: the hostile one gets errors and QP_FATAL, the engine
# counts it (uroce stats: bad_wqes) and stays up, and the ping-pong completes.
#
#   hostile_test.sh HOSTILE_CLIENT_BINARY
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
hostile=$1

start_engine uroce0 >/dev/null
# The hostile client's cases take a second or two, then it scribbles on its
# rings until the well-behaved client has run all its iterations (the stop
# file; 120 s at most, however loaded the machine).
stop_file=$UROCE_LOG_DIR/hostile.stop
"$hostile" uroce0 120 "$stop_file" >"$UROCE_LOG_DIR/hostile.log" 2>&1 &
hostile_pid=$!
add_cleanup "kill $hostile_pid 2>/dev/null || true"
sleep 1
# 20,000 round trips: seconds on an idle machine, and within the limit on a
# 2-core one shared with compilers (50,000 outran 60 s at load 11).
run_pair --label pingpong --forbid 'invalid data|[Ff]ailed|[Cc]ouldn.t' 100 \
  ibv_rc_pingpong -g 0 -c -n 20000 -p 18790 -- ibv_rc_pingpong -g 0 -c -n 20000 -p 18790 localhost ||
  { cat "$UROCE_LOG_DIR/hostile.log"; echo "FAIL: ibv_rc_pingpong beside the hostile client"; exit 1; }
grep -qE 'iters in [0-9.]+ seconds' "$UROCE_LOG_DIR/pingpong.client.log" ||
  { echo "FAIL: ibv_rc_pingpong printed no result"; exit 1; }
kill -0 "$hostile_pid" 2>/dev/null ||
  { cat "$UROCE_LOG_DIR/hostile.log"; echo "FAIL: the hostile client was done before the ping-pong"; exit 1; }
touch "$stop_file"
rc=0
timeout -k 5 60 tail --pid="$hostile_pid" -f /dev/null || true
wait "$hostile_pid" || rc=$?
cat "$UROCE_LOG_DIR/hostile.log"
((rc == 0)) || { echo "FAIL: hostile_client exit $rc"; dump_engine_logs; exit 1; }

# The engine is still up and counted what it saw.
bad=$(uroce stats | awk '/bad_wqes/ && !found { for (i = 1; i <= NF; ++i) if ($i ~ /^[0-9]+$/) { print $i; found = 1; break } }')
[[ ${bad:-0} -gt 0 ]] || { uroce stats; echo "FAIL: bad_wqes not counted"; exit 1; }
uroce status >/dev/null || { echo "FAIL: the engine is gone"; exit 1; }
echo "hostile_client: passed (bad_wqes $bad); beside it: $(grep -E "iters in" "$UROCE_LOG_DIR/pingpong.client.log")"
