#!/usr/bin/env bash
# libfabric's verbs provider on uroce: Debian's unmodified libfabric-bin under
# `uroce run`. fi_info -p verbs lists the device (MSG, RDM through ofi_rxm,
# DGRAM), and fi_pingpong passes over verbs MSG endpoints and over
# "verbs;ofi_rxm" RDM endpoints, with its data check (-c), on one engine
# (loopback) and across two engines bound (--netdev) to the two ends of a
# veth pair in two network namespaces. libfabric finds the device as on a real host: through
# librdmacm, binding each address of the host's interfaces
# (prov/verbs/src/verbs_info.c, vrb_getifaddrs); a server offers its peer
# the device's address from that list.
#
#   libfabric_test.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
if ! command -v fi_info >/dev/null || ! command -v fi_pingpong >/dev/null; then
  echo "SKIP: libfabric-bin (fi_info, fi_pingpong) not installed"
  exit 77
fi

failures=0

# fi_pingpong's result line: bytes #sent #ack total time MB/sec usec/xfer
# (the size as it prints it: 64, 4k, 1m). ITERS sent and acknowledged.
check_size() {  # LOG
  grep -qE "^$size_shown +$ITERS +=$ITERS " "$1"
}

# fi_pingpong's control channel is TCP (port -B/-P) to SERVER_ADDR; the data
# goes over the device, ITERS round trips of SIZE bytes with their data
# checked (-c). LABEL CTRL_PORT SERVER_ADDR SIZE -- FI_PINGPONG_ARGS...;
# SERVER_PREFIX and CLIENT_PREFIX (arrays) put a side in a namespace with
# its own engine.
SERVER_PREFIX=() CLIENT_PREFIX=()
pingpong() {
  local label=$1 port=$2 addr=$3 size=$4
  shift 5
  local slog="$UROCE_LOG_DIR/$label.server.log" clog="$UROCE_LOG_DIR/$label.client.log"
  local src=0 crc=0 size_shown=$size
  ((size >= 1024)) && size_shown=$((size / 1024))k
  ((size >= 1048576)) && size_shown=$((size / 1048576))m
  "${SERVER_PREFIX[@]}" timeout -k 5 60 "$UROCE_BIN" run -- fi_pingpong "$@" -S "$size" -I "$ITERS" -c -B "$port" </dev/null >"$slog" 2>&1 &
  local spid=$!
  local i
  for ((i = 0; i < 50; i++)); do  # until the server's control port listens (up to 5 s)
    "${SERVER_PREFIX[@]}" ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
    sleep 0.1
  done
  "${CLIENT_PREFIX[@]}" timeout -k 5 60 "$UROCE_BIN" run -- fi_pingpong "$@" -S "$size" -I "$ITERS" -c -P "$port" "$addr" </dev/null >"$clog" 2>&1 || crc=$?
  ((crc == 0)) || kill "$spid" 2>/dev/null || true
  wait "$spid" || src=$?
  if ((crc == 0 && src == 0)) && check_size "$slog" && check_size "$clog" &&
     ! grep -qiE 'error|fail|corrupt' "$slog" "$clog"; then
    ok "$label: $(awk 'NR > 1 {printf "%s B, %s round trips, %s us each", $1, $2, $7}' "$clog")"
  else
    bad "$label (client $crc, server $src)"
    tail -n 20 "$slog" "$clog"
  fi
}

# Sizes: inline (64 B), one MTU (4 KiB), and 1 MiB: many packets, and over
# rxm's eager limit (16 KiB), a rendezvous through RDMA READ for RDM.
ITERS=20

# ---- one engine, loopback ----
start_engine uroce0
if timeout 30 "$UROCE_BIN" run -- fi_info -p verbs >"$UROCE_LOG_DIR/fi_info.log" 2>&1 &&
   grep -q 'domain: uroce0$' "$UROCE_LOG_DIR/fi_info.log" &&
   grep -A4 'domain: uroce0$' "$UROCE_LOG_DIR/fi_info.log" | grep -q 'type: FI_EP_MSG' &&
   grep -A4 'provider: verbs;ofi_rxm' "$UROCE_LOG_DIR/fi_info.log" | grep -q 'type: FI_EP_RDM' &&
   grep -A4 'domain: uroce0-dgram$' "$UROCE_LOG_DIR/fi_info.log" | grep -q 'type: FI_EP_DGRAM'; then
  ok "fi_info -p verbs: uroce0 (MSG, RDM over ofi_rxm, DGRAM)"
else
  cat "$UROCE_LOG_DIR/fi_info.log"
  bad "fi_info -p verbs"
fi
# Its device attributes, as libfabric read them from ibv_query_device/port.
v="$UROCE_LOG_DIR/fi_info_v.log"
if timeout 30 "$UROCE_BIN" run -- fi_info -p verbs -t FI_EP_MSG -v >"$v" 2>&1 &&
   grep -q 'src_addr: fi_sockaddr_in://127.0.0.1:0' "$v" && grep -q 'name: uroce0' "$v" &&
   grep -q 'mtu: 4096' "$v" && grep -q 'state: FI_LINK_UP' "$v" && grep -q 'network_type: Ethernet' "$v"; then
  ok "fi_info -v: uroce0 at 127.0.0.1, Ethernet, MTU 4096, link up"
else
  grep -E 'src_addr|name:|mtu:|network_type|state:' "$v" || tail -n 20 "$v"
  bad "fi_info -v"
fi

port=47600
for size in 64 4096 1048576; do
  pingpong "msg_loopback_$size" $((++port)) 127.0.0.1 "$size" -- -p verbs -e msg
  pingpong "rdm_loopback_$size" $((++port)) 127.0.0.1 "$size" -- -p "verbs;ofi_rxm" -e rdm
done
stop_all_engines

# ---- two engines, two network namespaces ----
# Each engine is bound to its namespace's veth end (--netdev, as rxe to its
# netdev): the device's address is the kernel's own there, so libfabric's
# scan of the host's interfaces finds the device on the veth, as it finds
# rxe's address on rxe's netdev, and fi_pingpong's control channel (TCP)
# and its data (RoCE) go to the same address.
two_hosts_or_skip lfab 236
run_a="$UROCE_RUNTIME_DIR/a" run_b="$UROCE_RUNTIME_DIR/b"
mkdir -p "$run_a" "$run_b"
chmod 700 "$run_a" "$run_b"
add_cleanup "UROCE_RUNTIME_DIR=$run_a '$UROCE_BIN' stop --all >/dev/null 2>&1 || true"
add_cleanup "UROCE_RUNTIME_DIR=$run_b '$UROCE_BIN' stop --all >/dev/null 2>&1 || true"
UROCE_RUNTIME_DIR=$run_a ip netns exec "$ns_a" "$UROCE_BIN" start --name hostA --netdev "$veth_a"
UROCE_RUNTIME_DIR=$run_b ip netns exec "$ns_b" "$UROCE_BIN" start --name hostB --netdev "$veth_b"

# libfabric offers the device's address (the veth's), not the loopback.
v="$UROCE_LOG_DIR/fi_info_a.log"
if UROCE_RUNTIME_DIR=$run_a timeout 30 ip netns exec "$ns_a" "$UROCE_BIN" run -- fi_info -p verbs -t FI_EP_MSG -v \
     >"$v" 2>&1 && grep -q 'name: hostA' "$v" && grep -q "src_addr: fi_sockaddr_in://$kern_a:0" "$v"; then
  ok "fi_info on host A: hostA at $kern_a ($veth_a)"
else
  grep -E 'src_addr|name:' "$v" || tail -n 20 "$v"
  bad "fi_info on host A"
fi

SERVER_PREFIX=(env "UROCE_RUNTIME_DIR=$run_b" ip netns exec "$ns_b")
CLIENT_PREFIX=(env "UROCE_RUNTIME_DIR=$run_a" ip netns exec "$ns_a")
for size in 64 1048576; do
  pingpong "msg_two_hosts_$size" $((++port)) "$kern_b" "$size" -- -p verbs -e msg
  pingpong "rdm_two_hosts_$size" $((++port)) "$kern_b" "$size" -- -p "verbs;ofi_rxm" -e rdm
done

if ((failures)); then
  echo "libfabric: $failures failed"
  exit 1
fi
echo "libfabric: all passed"
