#!/usr/bin/env bash
# The device in sysfs (issue 30; emulator/sysfs_tree.h, tools/sysfs_view.h):
# inside `uroce run`, /sys/class/infiniband/<dev> has the files the kernel
# makes for a RoCE device, every value the one verbs report
# (sysfs_check.py: ibv_devinfo -v, ibstat, ibstatus, UCX's rdma_cm interface
# discovery), for
#  - an engine with its loopback port (GIDs of lo), its hw_counters equal to
#    `uroce stats` after traffic;
#  - an engine bound to an interface (--netdev, a veth in a namespace),
#    before and after an address is added, and the files changing under a
#    program that is already running (a GID, the port state);
#  - an engine with a DPDK port and addresses of its own (no interface);
# and the host's /sys never changes.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
for tool in ibstat ibstatus ibv_devinfo ibv_rc_pingpong; do
  if ! command -v $tool >/dev/null; then
    echo "FAIL: $tool is not installed (tools/install-deps.sh installs it)"
    exit 1
  fi
done
check="$(dirname "${BASH_SOURCE[0]}")/sysfs_check.py"
failures=0
host_view_before=$(ls -la /sys/class/infiniband 2>&1 || true)

# sysfs_check LABEL DEV IFACE [--counters FILE] [PREFIX...]: in a uroce run.
sysfs_check() {
  local label=$1 dev=$2 iface=$3 log="$UROCE_LOG_DIR/sysfs.$1.log"
  shift 3
  local counters=()
  if [[ ${1:-} == --counters ]]; then counters=(--counters "$2"); shift 2; fi
  if "$@" "$UROCE_BIN" run -- /usr/bin/python3 "$check" "$dev" "$iface" "${counters[@]}" >"$log" 2>&1; then
    ok "$label: $(tail -1 "$log") ($(grep -c '^ok' "$log") values)"
  else
    bad "$label:"
    grep -v '^ok' "$log"
  fi
}

# 1. The loopback port.
start_engine sysfs0
sysfs_check "loopback" sysfs0 lo
uroce_run ibv_rc_pingpong -d sysfs0 -g 0 -p 18730 -n 200 -c >"$UROCE_LOG_DIR/pingpong.server.log" 2>&1 &
server=$!
_uroce_wait_listen 18730 "$server" || true
uroce_run ibv_rc_pingpong -d sysfs0 -g 0 -p 18730 -n 200 -c localhost >"$UROCE_LOG_DIR/pingpong.client.log" 2>&1 || bad "ibv_rc_pingpong failed"
wait "$server" || bad "ibv_rc_pingpong server failed"
sleep 0.3  # the engine goes idle and writes its counters
"$UROCE_BIN" stats --name sysfs0 >"$UROCE_LOG_DIR/stats.sysfs0" 2>&1
sysfs_check "loopback, after traffic" sysfs0 lo --counters "$UROCE_LOG_DIR/stats.sysfs0"

# The files follow the engine under a program already running: the port
# taken down and up again.
port_state_log="$UROCE_LOG_DIR/sysfs.port_state.log"
uroce_run bash -c 'f=/sys/class/infiniband/sysfs0/ports/1/state; cat $f; touch "$1.ready";
  for i in $(seq 100); do [[ $(cat $f) == "1: DOWN" ]] && break; sleep 0.05; done; cat $f' _ "$port_state_log" \
  >"$port_state_log" 2>&1 &
reader=$!
for _ in $(seq 100); do [[ -e $port_state_log.ready ]] && break; sleep 0.05; done
"$UROCE_BIN" port --name sysfs0 down >/dev/null
wait "$reader" || true
"$UROCE_BIN" port --name sysfs0 up >/dev/null
if [[ $(tr '\n' '|' <"$port_state_log") == "4: ACTIVE|1: DOWN|" ]]; then
  ok "ports/1/state follows the port under a running program: $(tr '\n' ' ' <"$port_state_log")"
else
  bad "ports/1/state under a running program: $(tr '\n' '|' <"$port_state_log")"
fi
"$UROCE_BIN" stop --name sysfs0 >/dev/null

# 2. Bound to an interface, and 3. a DPDK port: two namespaces on a veth.
two_hosts_or_skip sfs 236
on_a() { ip netns exec "$ns_a" "$@"; }
on_b() { ip netns exec "$ns_b" "$@"; }
on_a "$UROCE_BIN" start --name bound0 --netdev "$veth_a" >/dev/null
sysfs_check "--netdev $veth_a" bound0 "$veth_a" on_a
# An address added while a program runs: its GID file appears under it.
added=${net%.0}.77
gid_log="$UROCE_LOG_DIR/sysfs.gid_added.log"
hex=$(printf '%02x%02x:%02x%02x' ${added//./ })
on_a "$UROCE_BIN" run -- bash -c 'touch "$2.ready"; for i in $(seq 100); do
    grep -lx "0000:0000:0000:0000:0000:ffff:$1" /sys/class/infiniband/bound0/ports/1/gids/* && exit 0; sleep 0.05; done; exit 1' \
  _ "$hex" "$gid_log" >"$gid_log" 2>&1 &
reader=$!
for _ in $(seq 100); do [[ -e $gid_log.ready ]] && break; sleep 0.05; done
ip -n "$ns_a" addr add "$added/24" dev "$veth_a"
if wait "$reader"; then
  ok "an address added ($added) appears to a running program: $(head -1 "$gid_log")"
else
  bad "the GID of $added did not appear under a running program"
fi
sysfs_check "--netdev $veth_a, after an address was added" bound0 "$veth_a" on_a
on_a "$UROCE_BIN" stop --name bound0 >/dev/null

on_b "$UROCE_BIN" start --name dpdk0 --port "net_af_packet0,iface=$veth_b" --ip "$eng_b" >/dev/null
sysfs_check "DPDK port, --ip $eng_b" dpdk0 - on_b
on_b "$UROCE_BIN" stop --name dpdk0 >/dev/null

# 4. Outside `uroce run`, nothing changed.
host_view_after=$(ls -la /sys/class/infiniband 2>&1 || true)
if [[ $host_view_after == "$host_view_before" ]] && ! [[ -e /sys/class/infiniband/sysfs0 ]]; then
  ok "the host's /sys/class/infiniband is as it was"
else
  bad "the host's /sys/class/infiniband changed: $host_view_after"
fi
if compgen -G "$UROCE_RUNTIME_DIR/*.sysfs" >/dev/null; then
  bad "a stopped engine left its tree: $(echo "$UROCE_RUNTIME_DIR"/*.sysfs)"
fi

if ((failures)); then
  echo "sysfs: $failures failed"
  exit 1
fi
echo "sysfs: all passed"
