#!/usr/bin/env bash
# Debian's unmodified perftest binaries (which load libmlx5, libefa and
# librdmacm beside our libibverbs) against a uroce engine: bandwidth and
# latency tests over RC, small and large messages.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start_engine uroce0
failures=0
port=18700
perf() {  # LABEL PROGRAM ARGS...
  local label=$1 prog=$2
  shift 2
  port=$((port + 1))
  if run_pair --label "$label" --listen "$port" --forbid 'Couldn.t|[Ff]ailed|[Ee]rror|Unable' 60 \
       "$prog" -d uroce0 -x 0 -p "$port" "$@" -- "$prog" -d uroce0 -x 0 -p "$port" "$@" localhost &&
     grep -qE '^ *[0-9]+ +[0-9]+ +[0-9.]+' "$RUN_PAIR_CLIENT_LOG"; then
    echo "ok   $label: $(grep -E '^ *[0-9]+ +[0-9]+ +[0-9.]+' "$RUN_PAIR_CLIENT_LOG" | tail -1 | tr -s ' ')"
  else
    echo "FAIL $label"
    cat "$RUN_PAIR_CLIENT_LOG" "$RUN_PAIR_SERVER_LOG" | tail -20
    failures=$((failures + 1))
  fi
}

perf send_bw ib_send_bw
perf send_bw_small ib_send_bw -s 8 -n 5000
perf send_bw_large ib_send_bw -s 1048576 -n 50
perf write_bw ib_write_bw
perf write_bw_small ib_write_bw -s 8 -n 5000
perf write_bw_large ib_write_bw -s 1048576 -n 50
perf read_bw ib_read_bw
perf read_bw_large ib_read_bw -s 1048576 -n 50
perf atomic_bw ib_atomic_bw
perf atomic_bw_faa ib_atomic_bw -A FETCH_AND_ADD
perf send_lat ib_send_lat
perf send_lat_large ib_send_lat -s 65536 -n 200
perf write_lat ib_write_lat
perf write_lat_large ib_write_lat -s 65536 -n 200
perf read_lat ib_read_lat
perf read_lat_large ib_read_lat -s 65536 -n 200
perf send_bw_post_list ib_send_bw -l 8 -n 4000
perf write_bw_old_api ib_write_bw --use_old_post_send
perf send_bw_inline ib_send_bw -s 64 -I 64 -n 5000
perf send_bw_events ib_send_bw -e -n 2000

echo "failures: $failures"
((failures == 0))
