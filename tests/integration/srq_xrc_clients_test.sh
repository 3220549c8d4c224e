#!/usr/bin/env bash
# Debian's unmodified shared-receive-queue and XRC clients against a uroce
# engine (issue 3, "How it is checked"): ibv_srq_pingpong (16 RC QPs on one
# SRQ, with the data check), ibv_xsrq_pingpong (a server with two clients, all
# three in one XRC domain through /tmp/xrc_domain), and perftest over an SRQ
# and over XRC. Every run is bounded in time and uses a port of its own.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start_engine uroce0
failures=0
check() {  # NAME COMMAND...: run, fail the test on non-zero exit
  local name=$1
  shift
  if "$@"; then
    echo "ok   $name"
  else
    echo "FAIL $name"
    failures=$((failures + 1))
  fi
}

port=18800

# ibv_srq_pingpong ARGS...: server and client; the client prints its result.
srq_pingpong() {
  local label=$1
  shift
  port=$((port + 1))
  run_pair --label "$label" --forbid 'invalid data|[Ff]ailed|[Cc]ouldn.t|[Ee]rror' 60 \
    ibv_srq_pingpong -p "$port" "$@" -- ibv_srq_pingpong -p "$port" "$@" localhost || return 1
  local side
  for side in "$RUN_PAIR_SERVER_LOG" "$RUN_PAIR_CLIENT_LOG"; do
    grep -qE '[0-9]+ iters in [0-9.]+ seconds' "$side" || { echo "no result line in $side"; return 1; }
    # 16 QPs on each side (the program's default), each connected.
    [[ $(grep -c 'remote address:' "$side") -eq 16 ]] || { echo "not 16 QPs in $side"; return 1; }
  done
}

# xsrq_pingpong CLIENTS ARGS...: a server for CLIENTS clients and as many
# client processes, all running at once; each must exit 0 and print `success`.
xsrq_pingpong() {
  local label=$1 clients=$2
  shift 2
  port=$((port + 1))
  local limit=60 i rc ok=1
  local -a pids=() logs=()
  logs[0]="$UROCE_LOG_DIR/$label.server.log"
  timeout -k 5 "$limit" "$UROCE_BIN" run -- ibv_xsrq_pingpong -p "$port" -c "$clients" "$@" \
    </dev/null >"${logs[0]}" 2>&1 &
  pids[0]=$!
  sleep 0.5
  for ((i = 1; i <= clients; i++)); do
    logs[i]="$UROCE_LOG_DIR/$label.client$i.log"
    timeout -k 5 "$limit" "$UROCE_BIN" run -- ibv_xsrq_pingpong -p "$port" "$@" localhost \
      </dev/null >"${logs[i]}" 2>&1 &
    pids[i]=$!
  done
  for ((i = 0; i <= clients; i++)); do
    rc=0
    wait "${pids[i]}" || rc=$?
    if ((rc != 0)); then
      echo "$label: process $i (${logs[i]}): $(_uroce_describe_rc "$rc" "$limit")"
      ok=0
    elif ! grep -qx 'success' "${logs[i]}"; then
      echo "$label: process $i printed no 'success'"
      ok=0
    elif grep -qE '[Ff]ailed|[Cc]ouldn.t|[Ee]rror' "${logs[i]}"; then
      echo "$label: process $i reported an error"
      ok=0
    fi
  done
  if ((!ok)); then
    for ((i = 0; i <= clients; i++)); do
      echo "---- ${logs[i]} ----"
      tail -n 40 "${logs[i]}"
    done
    dump_engine_logs
    return 1
  fi
}

# perf LABEL PROGRAM ARGS...: perftest server and client; the client prints a
# results line (bytes, iterations, numbers).
perf() {
  local label=$1 prog=$2
  shift 2
  port=$((port + 1))
  run_pair --label "$label" --forbid 'Couldn.t|[Ff]ailed|[Ee]rror|Unable' 60 \
    "$prog" -d uroce0 -x 0 -p "$port" "$@" -- "$prog" -d uroce0 -x 0 -p "$port" "$@" localhost ||
    return 1
  local line
  line=$(grep -E '^ *[0-9]+ +[0-9]+ +[0-9.]+' "$RUN_PAIR_CLIENT_LOG" | tail -1 | tr -s ' \t' ' ')
  if [[ -z "$line" ]]; then
    echo "$label: no results line"
    tail -n 20 "$RUN_PAIR_CLIENT_LOG" "$RUN_PAIR_SERVER_LOG"
    return 1
  fi
  echo "     $label:$line"
}

check "srq_pingpong -c" srq_pingpong srq-c -g 0 -c
check "srq_pingpong -e -c" srq_pingpong srq-e -g 0 -e -c
check "srq_pingpong 8 KiB mtu 1024 -c" srq_pingpong srq-big -g 0 -s 8192 -m 1024 -n 200 -c
check "xsrq_pingpong, 2 clients" xsrq_pingpong xsrq 2 -g 0
check "xsrq_pingpong, 2 clients, events" xsrq_pingpong xsrq-e 2 -g 0 -e
check "xsrq_pingpong, 3 clients, 100 tests" xsrq_pingpong xsrq-3 3 -g 0 -n 100
check "ib_send_bw --use-srq" perf send_bw_srq ib_send_bw --use-srq
check "ib_send_bw --use-srq small" perf send_bw_srq_small ib_send_bw --use-srq -s 8 -n 5000
check "ib_send_bw -c XRC" perf send_bw_xrc ib_send_bw -c XRC
check "ib_write_bw -c XRC" perf write_bw_xrc ib_write_bw -c XRC
check "ib_read_bw -c XRC" perf read_bw_xrc ib_read_bw -c XRC
check "ib_send_lat -c XRC" perf send_lat_xrc ib_send_lat -c XRC
# More QPs on one SRQ / more XRC connections, other transports on an SRQ,
# atomics through an XRC target.
check "ib_send_bw --use-srq -q 4" perf send_bw_srq_q4 ib_send_bw --use-srq -q 4
check "ib_send_bw -c UC --use-srq" perf send_bw_uc_srq ib_send_bw -c UC --use-srq
# UD: every receive posted before the first datagram (-r as deep as -n): a
# datagram that finds none is dropped, and perftest's server waits for all.
check "ib_send_bw -c UD --use-srq" perf send_bw_ud_srq ib_send_bw -c UD --use-srq -r 1000 -n 1000
check "ib_send_bw -c XRC -q 4" perf send_bw_xrc_q4 ib_send_bw -c XRC -q 4
check "ib_atomic_bw -c XRC" perf atomic_bw_xrc ib_atomic_bw -c XRC

echo "failures: $failures"
((failures == 0))
