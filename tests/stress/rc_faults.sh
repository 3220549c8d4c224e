#!/usr/bin/env bash
# RC under injected faults (issue 9 point 6): Debian's perftest and
# ibverbs-utils clients, each run many times in a row, with the engine's fault
# injector on the loopback port of one engine and on the wire ports of two
# engines in network namespaces (the set-up of tests/integration/two_hosts_test.sh,
# under names of its own). Every run is bounded in time; the summary gives
# N/M passed per tool and port.
#
#   rc_faults.sh [--runs N] [--port loopback|wire|both] [--tools LIST] [--timeout S]
#                [--faults 'drop=.. duplicate=..']
#
# LIST is comma-separated from: read_bw write_bw send_bw atomic_bw rc_pingpong
# srq_pingpong tag_pingpong (default: all). perftest 4.5 has no data check of
# its own: its runs pass on completion statuses only; the ping-pongs run with
# -c, which checks every byte received, and uroce-tag-pingpong (tag matching:
# the device's own rendezvous READs and FINs beside the user's SENDs, both
# ways) always checks them. Exit status 0 only if every run passed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../integration/lib.sh"

runs=10 ports=both tools=read_bw,write_bw,send_bw,atomic_bw,rc_pingpong,srq_pingpong,tag_pingpong limit=60
faults="drop=0.02 duplicate=0.01 reorder=0.05 corrupt=0.005"
while (($#)); do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --port) ports=$2; shift 2 ;;
    --tools) tools=$2; shift 2 ;;
    --timeout) limit=$2; shift 2 ;;
    --faults) faults=$2; shift 2 ;;
    *) echo "usage: $0 [--runs N] [--port loopback|wire|both] [--tools LIST] [--timeout S] [--faults F]" >&2
       exit 2 ;;
  esac
done

# One run of each tool: the command line both sides share (device and address
# are added per port). The sizes are those issue 9 reported failing.
tool_args() {
  case $1 in
    read_bw) echo "ib_read_bw -x 0 -s 16384 -n 1000" ;;
    write_bw) echo "ib_write_bw -x 0 -s 16384 -n 1000" ;;
    send_bw) echo "ib_send_bw -x 0 -s 4096 -n 1000" ;;
    atomic_bw) echo "ib_atomic_bw -x 0 -n 1000" ;;
    rc_pingpong) echo "ibv_rc_pingpong -g 0 -c -s 16384 -n 300" ;;
    srq_pingpong) echo "ibv_srq_pingpong -g 0 -c -s 4096 -n 300" ;;
    tag_pingpong) echo "$UROCE_BUILD_DIR/bin/uroce-tag-pingpong -g 0 -s 65536 -n 8" ;;
    *) echo "unknown tool $1" >&2; return 1 ;;
  esac
}
iterations() {  # the "N iters in" line a ping-pong side prints when it has all N
  case $1 in
    rc_pingpong) echo 300 ;;
    srq_pingpong) echo 300 ;;
  esac
}

# The ping-pongs' ending without a closing handshake (closing_ack_ending in
# lib.sh) is accepted, and counted apart.
tail_ok() {  # TOOL DONE_LOG FAILED_LOG
  local n
  n=$(iterations "$1") || return 1
  [[ -n $n ]] || return 1
  closing_ack_ending "$n" "$2" "$3"
}

forbid='invalid data|[Ff]ailed|[Cc]ouldn.t|[Ee]rror|Unable'
port=$((21000 + $$ % 2000))
declare -A passed tailed total
summary=()

# run_tool PORT_LABEL TOOL DEVICE_SERVER DEVICE_CLIENT SERVER_PREFIX CLIENT_PREFIX SERVER_ADDR
run_tool() {
  local where=$1 tool=$2 dev_s=$3 dev_c=$4 pre_s=$5 pre_c=$6 addr=$7
  local -a args
  read -r -a args <<<"$(tool_args "$tool")"
  local prog=${args[0]} i key="$tool/$where" listen_at=""
  [[ $pre_s == "ip netns exec "* ]] && listen_at="${pre_s#ip netns exec }:"
  passed[$key]=0 tailed[$key]=0 total[$key]=0
  for ((i = 1; i <= runs; i++)); do
    port=$((port + 1))
    local label="${where}_${tool}_$i" t0=$SECONDS
    total[$key]=$((total[$key] + 1))
    # shellcheck disable=SC2086
    if run_pair --label "$label" --listen "$listen_at$port" --forbid "$forbid" "$limit" \
         $pre_s "$prog" -d "$dev_s" -p "$port" "${args[@]:1}" -- \
         $pre_c "$prog" -d "$dev_c" -p "$port" "${args[@]:1}" "$addr" 2>/dev/null; then
      passed[$key]=$((passed[$key] + 1))
      echo "ok   $label ($((SECONDS - t0)) s)"
    elif tail_ok "$tool" "$RUN_PAIR_SERVER_LOG" "$RUN_PAIR_CLIENT_LOG" ||
         tail_ok "$tool" "$RUN_PAIR_CLIENT_LOG" "$RUN_PAIR_SERVER_LOG"; then
      passed[$key]=$((passed[$key] + 1))
      tailed[$key]=$((tailed[$key] + 1))
      echo "ok   $label ($((SECONDS - t0)) s): all iterations checked; the last ACK was lost after the peer left"
    else
      echo "FAIL $label ($((SECONDS - t0)) s)"
      tail -n 4 "$RUN_PAIR_SERVER_LOG" | sed 's/^/     server: /'
      tail -n 4 "$RUN_PAIR_CLIENT_LOG" | sed 's/^/     client: /'
    fi
  done
  local line="$tool $where: ${passed[$key]}/${total[$key]} passed"
  ((tailed[$key] == 0)) || line+=" (${tailed[$key]} with the closing-ACK ending)"
  summary+=("$line")
}

engine_counters() {  # NAME...: the transport counters that tell what happened
  local n
  for n in "$@"; do
    echo "  $n: $(uroce stats --name "$n" | grep -E '^ *(retransmits|retry_exceeded|rnr_retry_exceeded|nak_sent|rx_duplicate|rx_out_of_seq|fault_[a-z_]*dropped|fault_[a-z_]*duplicated|fault_[a-z_]*reordered|fault_[a-z_]*corrupted) ' |
      awk '{printf "%s=%s ", $1, $2}')"
  done
}

IFS=, read -r -a tool_list <<<"$tools"

if [[ $ports == loopback || $ports == both ]]; then
  start_engine rcf0 >/dev/null
  # shellcheck disable=SC2086
  uroce fault --name rcf0 --port loopback $faults >/dev/null
  for t in "${tool_list[@]}"; do
    run_tool loopback "$t" rcf0 rcf0 "" "" localhost
  done
  echo "engine counters (loopback):"
  engine_counters rcf0
  uroce stop --name rcf0 >/dev/null
fi

if [[ $ports == wire || $ports == both ]]; then
  ns_rc=0
  make_two_hosts urcf 232 || ns_rc=$?
  if ((ns_rc == 77)); then
    echo "SKIP wire: cannot create network namespaces here"
    summary+=("wire: skipped (no network namespaces)")
  else
    ((ns_rc == 0)) || exit 1
    ip netns exec "$ns_a" "$UROCE_BIN" start --name rcfA --port "net_af_packet0,iface=$veth_a" --ip "$eng_a" >/dev/null
    ip netns exec "$ns_b" "$UROCE_BIN" start --name rcfB --port "net_af_packet0,iface=$veth_b" --ip "$eng_b" >/dev/null
    # shellcheck disable=SC2086
    uroce fault --name rcfA --port wire $faults >/dev/null
    # shellcheck disable=SC2086
    uroce fault --name rcfB --port wire $faults >/dev/null
    for t in "${tool_list[@]}"; do
      run_tool wire "$t" rcfB rcfA "ip netns exec $ns_b" "ip netns exec $ns_a" "$kern_b"
    done
    echo "engine counters (wire):"
    engine_counters rcfA rcfB
    uroce stop --name rcfA >/dev/null
    uroce stop --name rcfB >/dev/null
  fi
fi

echo "---- summary (faults: $faults) ----"
printf '%s\n' "${summary[@]}"
((${#total[@]} > 0)) || exit 77  # nothing could run here (ctest: skipped)
bad=0
for key in "${!total[@]}"; do
  ((passed[$key] == total[$key])) || bad=$((bad + 1))
done
echo "failing tool/port pairs: $bad"
((bad == 0))
