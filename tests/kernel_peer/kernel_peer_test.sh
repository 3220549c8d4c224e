#!/usr/bin/env bash
# The kernel as the peer: Linux's rdma_rxe (Debian 12's own kernel in a qemu
# VM, tests/kernel_peer/vm.sh) on one wire with a uroce engine, Debian's
# unmodified clients on both sides, each case both ways (the kernel serving
# a uroce client, and the reverse) and in both engine modes:
#   ip      uroced --port net_af_packet0,iface=TAP --ip ADDR (an address of
#           its own on the tap, beside the kernel's)
#   netdev  uroced --netdev TAP (the kernel's own address, as rxe takes it)
# Every case's outcome goes to $UROCE_LOG_DIR/matrix.txt (kept with
# UROCE_KEEP_FILES=1); both directions of the guest's NIC are captured to
# $UROCE_LOG_DIR/kernel_peer.pcap.
#
# With --afib, tests/integration/rdmacm_afib.c (built against the system's
# librdmacm) runs on both sides: its AF_IB expectations, read from cma.c,
# are checked against the kernel itself.
#
# The netdev mode runs the cases whose outcome depends on how the engine
# takes its address (the kernel's own: its neighbours, its GID table,
# rdma_cm's routes, IPv6, the consumers that resolve through rdma_cm); the
# rest of the datapath (more perftest tools, UC, SRQ, XRC) is the same code
# on the same wire as in the ip mode, and runs there. --full runs every case
# in both modes, and the read and atomic latencies.
#
#   kernel_peer_test.sh [--modes "ip netdev"] [--cases REGEX] [--full] [--matrix FILE] [--afib BINARY]
set -euo pipefail
modes="ip netdev" only="" matrix_out="" afib="" full=0
while (($#)); do
  case $1 in
    --modes) modes=$2; shift 2 ;;
    --cases) only=$2; shift 2 ;;
    --matrix) matrix_out=$2; shift 2 ;;
    --afib) afib=$(realpath "$2"); shift 2 ;;
    --full) full=1; shift ;;
    *) echo "usage: $0 [--modes \"ip netdev\"] [--cases REGEX] [--full] [--matrix FILE] [--afib BINARY]" >&2; exit 2 ;;
  esac
done
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../integration/lib.sh"
source "$here/vm.sh"

if ! ip netns add "uroce-probe-$$" 2>/dev/null; then
  echo "SKIP: cannot create network namespaces here (needs root)"
  exit 77
fi
ip netns del "uroce-probe-$$"
# Everything else this test needs is a package: its absence is a failure
# that says which (tools/install-deps.sh installs them).
kernel_peer_prepare || { echo "FAIL: the kernel peer cannot be prepared (above)"; exit 1; }

failures=0
ok() { echo "ok   $1"; }
bad() {
  echo "FAIL $1"
  failures=$((failures + 1))
}

ns="kp-$$" tap="kpt$$"
net=10.238.$(($$ % 200))
host_ip=$net.1 guest_ip=$net.2 eng_ip=$net.11
net6=fd00:238:$(printf '%x' $(($$ % 65536)))
host_ip6=$net6::1 guest_ip6=$net6::2 eng_ip6=$net6::11
add_cleanup "ip netns del $ns 2>/dev/null"
ip netns add "$ns"
ip -n "$ns" link set lo up
in_ns() { ip netns exec "$ns" "$@"; }
host_run() { in_ns timeout -k 5 "$1" "$UROCE_BIN" run -- "${@:2}"; }

kernel_peer_boot "$ns" "$tap" "$guest_ip/24" "$guest_ip6/64" || { echo "FAIL: the guest did not boot"; exit 1; }
ip -n "$ns" addr add "$host_ip/24" dev "$tap"
ip -n "$ns" addr add "$host_ip6/64" dev "$tap" nodad
ok "guest up at $SECONDS s: $(grep -m1 -o 'Linux version [^ ]*' "$KERNEL_PEER_CONSOLE" || echo Linux), rxe0 on eth0 $guest_ip"

# The index of the RoCE v2 GID of an address (IPv4 or IPv6) in `ibv_devinfo -v`.
gid_index() {  # DEVINFO_OUTPUT_FILE ADDR
  local gid=$2
  [[ $gid == *:* ]] || gid=::ffff:$gid
  sed -nE "s/^[[:space:]]*GID\[ *([0-9]+)\]:[[:space:]]+${gid//./\\.}, RoCE v2$/\1/p" "$1" | head -1
}
for try in 1 2 3 4 5; do  # the guest's IPv6 GID follows its address
  guest_run devinfo 60 ibv_devinfo -v -d rxe0 || true
  guest_gid=$(gid_index "$GUEST_OUT" "$guest_ip") guest_gid6=$(gid_index "$GUEST_OUT" "$guest_ip6")
  [[ -z $guest_gid || -z $guest_gid6 ]] || break
  sleep 1
done
[[ -n $guest_gid && -n $guest_gid6 ]] || { cat "$GUEST_OUT"; echo "FAIL: rxe0 has no RoCE v2 GID of $guest_ip and $guest_ip6"; exit 1; }

matrix="$UROCE_LOG_DIR/matrix.txt"
: >"$matrix"
port=19500

# Expands a command template for one side: {dev} {gid} {port} the side's own;
# {peer} the server's TCP address (perftest's and the ping-pongs' side
# channel), {server} the server's RoCE address (rdma_cm), {self} the side's;
# {gid6} and {server6} the same over IPv6; {dgid_check} UCX's ud_verbs GRH
# check, on for uroce and off for rxe (see ucx_dgid_check_on_rxe).
expand() {  # SIDE TEMPLATE
  local side=$1 t=$2 dev gid
  local self
  local gid6 dgid_check
  if [[ $side == guest ]]; then
    dev=rxe0 gid=$guest_gid gid6=$guest_gid6 self=$guest_ip dgid_check=n
  else
    dev=uroce0 gid=$host_gid gid6=$host_gid6 self=$host_roce dgid_check=y
  fi
  t=${t//\{dgid_check\}/$dgid_check}
  t=${t//\{dev\}/$dev}
  t=${t//\{gid6\}/$gid6}
  t=${t//\{server6\}/$server_roce6}
  t=${t//\{gid\}/$gid}
  t=${t//\{port\}/$port}
  t=${t//\{peer\}/$server_tcp}
  t=${t//\{server\}/$server_roce}
  t=${t//\{self\}/$self}
  # The guest sees the host's root but not its /tmp (a tmpfs of its own,
  # where a CI clone may live): it runs its copy in the job share.
  if [[ $side == guest ]]; then t=${t//\{afib\}//mnt/rdmacm_afib}; else t=${t//\{afib\}/$afib}; fi
  echo "$t"
}

# A marker in the capture of the guest's NIC (cm_mads.py reads them): a UDP
# datagram to the guest's discard port, "uroce-mark LABEL start|end".
# Sent twice: a datagram the host's tap or the emulator's capture loses
# under load would put a case's messages in no case (cm_mads.py then names
# the case as seen from one side only).
mark() {  # LABEL start|end
  in_ns bash -c "echo 'uroce-mark $1 $2' >/dev/udp/$guest_ip/9; echo 'uroce-mark $1 $2' >/dev/udp/$guest_ip/9" 2>/dev/null || true
}

# Waits until the guest's server is ready: its TCP port listens (tcp), an
# rdma_cm id listens on the port (cm), or a fixed time (delay). A server
# that has already exited (rxe lacks the feature: XRC) ends the wait at once
# instead of after 30 s: its job's exit status is in the job share.
guest_ready() {  # READY SERVER_LABEL
  local gone="/mnt/jobs/${_guest_jobs[$2]##*/}.rc" listening
  case $1 in
    tcp) listening="ss -Hltn 'sport = :$port' | grep -q ." ;;
    cm) listening="rdma resource show cm_id 2>/dev/null | grep -q 'LISTEN.*:$port\b'" ;;
    *) sleep "${1#delay:}"; return 0 ;;
  esac
  guest_run "$2.ready" 30 bash -c "for i in \$(seq 300); do $listening && exit 0; [ -e $gone ] && exit 1; sleep 0.1; done; exit 1"
}

# Whether the guest's network is up: it answers the host's ARP (its kernel,
# not a job of ours: the question is the NIC and the link).
guest_net_alive() {
  local try
  for try in 1 2 3; do
    ip -n "$ns" neigh del "$guest_ip" dev "$tap" 2>/dev/null || true
    in_ns bash -c "echo probe >/dev/udp/$guest_ip/9" 2>/dev/null || true
    sleep 2
    ip -n "$ns" neigh show "$guest_ip" dev "$tap" | grep -qE 'REACHABLE|STALE|DELAY|PROBE' && return 0
  done
  return 1
}
guest_reboots=0

# case_run MODE NAME LIMIT READY SERVER_TEMPLATE CLIENT_TEMPLATE [CHECK_ERE]
# Runs NAME both ways: the kernel serving a uroce client, then uroce serving
# a kernel client. Each side must exit 0, print nothing that looks like an
# error, and, when given, CHECK_ERE in the client's output.
# With KERNEL_LACKS=ERE and KERNEL_LACKS_WHY set, a run that fails with ERE
# in the kernel side's output is "n/a" (the kernel has no such feature);
# with RETRY_ON=ERE, a run whose client printed ERE is run again, up to
# three times (a race of the tool's own, see where it is set).
case_run() {
  local mode=$1 name=$2 limit=$3 ready=$4 stpl=$5 ctpl=$6 check=${7:-}
  [[ -z $only || $name =~ $only ]] || return 0
  [[ $mode != netdev || $full == 1 || $name =~ $netdev_cases ]] || return 0
  local dir server_side client_side attempt rebooted=0
  for dir in kernel-server uroce-server; do
   for attempt in 1 2 3; do
    port=$((port + 1))
    if [[ $dir == kernel-server ]]; then
      server_side=guest client_side=host server_tcp=$guest_ip server_roce=$guest_ip server_roce6=$guest_ip6
    else
      server_side=host client_side=guest server_tcp=$host_ip server_roce=$host_roce server_roce6=$host_roce6
    fi
    local label="$mode.$name.$dir" scmd ccmd
    scmd=$(expand "$server_side" "$stpl")
    ccmd=$(expand "$client_side" "$ctpl")
    local slog clog src=0 crc=0 spid="" t0=$SECONDS
    mark "$label" start
    # KERNEL_PEER_BREAK_NET=LABEL takes the guest's NIC down before that case
    # runs (once): how the recovery above is tested.
    if [[ ${KERNEL_PEER_BREAK_NET:-} == "$label" ]]; then
      guest_run break_net 30 ip link set eth0 down || true
      KERNEL_PEER_BREAK_NET=""
    fi
    read -r -a sargv <<<"$scmd"
    read -r -a cargv <<<"$ccmd"
    if [[ $server_side == guest ]]; then
      guest_start "$label.server" "$limit" "${sargv[@]}"
      guest_ready "$ready" "$label.server" || true
      clog="$UROCE_LOG_DIR/$label.client.log"
      host_run "$limit" "${cargv[@]}" </dev/null >"$clog" 2>&1 || crc=$?
      ((crc == 0)) || guest_stop "$label.server"
      guest_wait "$label.server" "$((limit + 30))" || src=$?
      slog="$UROCE_LOG_DIR/$label.server.log"
      cp "$GUEST_OUT" "$slog"
    else
      slog="$UROCE_LOG_DIR/$label.server.log"
      host_run "$limit" "${sargv[@]}" </dev/null >"$slog" 2>&1 &
      spid=$!
      case $ready in
        tcp) _uroce_wait_listen "$ns:$port" "$spid" || true ;;
        cm) sleep 1 ;;
        *) sleep "${ready#delay:}" ;;
      esac
      guest_run "$label.client" "$limit" "${cargv[@]}" || crc=$?
      clog="$UROCE_LOG_DIR/$label.client.log"
      cp "$GUEST_OUT" "$clog"
      ((crc == 0)) || { sleep 2; kill "$spid" 2>/dev/null || true; }
      wait "$spid" || src=$?
    fi
    local why=""
    ((src == 0)) || why+=" server exit $src;"
    ((crc == 0)) || why+=" client exit $crc;"
    if grep -qiE 'invalid data|[Ff]ailed|[Cc]ouldn.t|[^_]error|Unable|corrupt' "$slog" "$clog"; then
      why+=" error printed;"
    fi
    [[ -z $check ]] || grep -qE "$check" "$clog" || why+=" no '$check' in the client's output;"
    mark "$label" end
    local took=$((SECONDS - t0)) kernel_log=$slog
    [[ $server_side == guest ]] || kernel_log=$clog
    if [[ -z $why ]]; then
      ok "$label (${took} s)"
      printf '%-7s %-22s %-14s pass\n' "$mode" "$name" "$dir" >>"$matrix"
    elif [[ -n ${KERNEL_LACKS:-} ]] && grep -qE "$KERNEL_LACKS" "$kernel_log"; then
      ok "$label: n/a, $KERNEL_LACKS_WHY ($(grep -m1 -E "$KERNEL_LACKS" "$kernel_log"))"
      printf '%-7s %-22s %-14s n/a (%s)\n' "$mode" "$name" "$dir" "$KERNEL_LACKS_WHY" >>"$matrix"
    elif ((!rebooted && guest_reboots < 2)) && ! guest_net_alive; then
      # Both sides are gone and the guest still answers no ARP: its NIC is
      # dead (seen once in CI: from the middle of a case on, for every case
      # after it, while jobs still ran in the guest), not the peer's doing,
      # which ended with its programs. The guest boots again and the case
      # runs again; a second death of the same case is its failure.
      echo "again $label:$why (the guest's network died: it answers no ARP; booting it again)"
      echo "---- guest console (last 20 lines)" && tail -n 20 "$KERNEL_PEER_CONSOLE"
      ip -s -n "$ns" link show "$tap" || true
      guest_reboots=$((guest_reboots + 1)) rebooted=1
      kernel_peer_reboot || { bad "$label: the guest did not boot again"; break; }
      continue
    elif [[ -n ${RETRY_ON:-} ]] && grep -qE "$RETRY_ON" "$clog"; then
      if ((attempt < 3)); then
        echo "again $label:$why ($(grep -m1 -E "$RETRY_ON" "$clog"))"
        continue
      fi
      # The tool's own race, lost three times: said, not counted.
      echo "race $label: lost the tool's race 3 times ($(grep -m1 -E "$RETRY_ON" "$clog"))"
      printf '%-7s %-22s %-14s race lost 3 times (the tool'"'"'s own)\n' "$mode" "$name" "$dir" >>"$matrix"
    elif ((attempt < 3 && crc != 0)) && [[ $server_side == host && -n $check ]] && grep -qE "$check" "$slog" &&
        [[ $why != *"error printed"* ]]; then
      # Seen once in CI (netdev ib_send_bw_R): uroce's server received every
      # message and printed its result, and rxe's perftest client, under
      # TCG, exited 1 with neither its result nor any error line (every
      # failure path of perftest 4.5-0.17 prints one). Not the wire's doing:
      # the case runs again (three tries in all), and what the guest kept is
      # shown; the third loss in a row is a failure like any other.
      echo "again $label:$why (uroce's server finished; the kernel's client exited $crc without a word)"
      echo "---- client (first 3 lines): $(head -n 3 "$clog" | tr '\n' '|')"
      if guest_run "$label.dmesg" 30 dmesg; then
        echo "---- guest kernel log (last 10 lines; rxe's 'speed is unknown' left out)"
        grep -v 'speed is unknown' "$GUEST_OUT" | tail -n 10
      fi
      continue
    else
      bad "$label:$why (${took} s)"
      printf '%-7s %-22s %-14s FAIL%s\n' "$mode" "$name" "$dir" "$why" >>"$matrix"
      echo "---- server: $scmd" && tail -n 15 "$slog"
      echo "---- client: $ccmd" && tail -n 15 "$clog"
      dump_engine_counters in_ns 2>&1
      echo "---- guest console (last 10 lines)" && tail -n 10 "$KERNEL_PEER_CONSOLE"
      # The console is quiet: rxe's own warnings are in the guest's ring.
      if guest_run "$label.dmesg" 30 dmesg; then
        echo "---- guest kernel log (last 15 lines; rxe's 'speed is unknown' left out)"
        grep -v 'speed is unknown' "$GUEST_OUT" | tail -n 15
      fi
    fi
    break
   done
  done
}

# The cases the netdev mode runs (see the top; --full: all).
# The datapath tools (perftest's bandwidths, ud_pingpong, rdma_server,
# UCX over ud_verbs alone) are the ip mode's: the same code on the same wire.
netdev_cases='^(rc_pingpong|rping|ucmatose|udaddy|mckey|ib_send_bw_R|rc_pingpong_ipv6|ud_pingpong_ipv6|rping_ipv6|udaddy_ipv6|afib_.*|fi_pingpong_.*|ucx_tag_lat_rc_verbs)$'

run_matrix() {  # MODE
  local m=$1
  # The ibverbs-utils ping-pongs, data checked (-c) where they can.
  case_run "$m" rc_pingpong 60 tcp 'ibv_rc_pingpong -d {dev} -g {gid} -p {port} -n 100 -c' \
    'ibv_rc_pingpong -d {dev} -g {gid} -p {port} -n 100 -c {peer}' '100 iters in'
  case_run "$m" uc_pingpong 60 tcp 'ibv_uc_pingpong -d {dev} -g {gid} -p {port} -n 100' \
    'ibv_uc_pingpong -d {dev} -g {gid} -p {port} -n 100 {peer}' '100 iters in'
  case_run "$m" ud_pingpong 60 tcp 'ibv_ud_pingpong -d {dev} -g {gid} -p {port} -n 100 -s 1024' \
    'ibv_ud_pingpong -d {dev} -g {gid} -p {port} -n 100 -s 1024 {peer}' '100 iters in'
  case_run "$m" srq_pingpong 60 tcp 'ibv_srq_pingpong -d {dev} -g {gid} -p {port} -n 100' \
    'ibv_srq_pingpong -d {dev} -g {gid} -p {port} -n 100 {peer}' '100 iters in'
  local no_xrc="rxe has no XRC (EOPNOTSUPP)"
  KERNEL_LACKS="XRC Domain 95" KERNEL_LACKS_WHY=$no_xrc case_run "$m" xsrq_pingpong 60 tcp 'ibv_xsrq_pingpong -d {dev} -g {gid} -p {port} -n 100' \
    'ibv_xsrq_pingpong -d {dev} -g {gid} -p {port} -n 100 {peer}' '100 iters in'
  # perftest; -o 16 where the two sides' read depths must agree (rxe offers
  # 128, uroce 16 as mlx5: a ConnectX client fails against rxe without it).
  # The bandwidth tests keep 128 messages of 64 KiB in flight towards a
  # guest that TCG runs at a fraction of the wire's rate: when the tap's
  # queue overflows, go-back-N sends it all again, and perftest's default
  # local ACK timeout (-u 14: 67 ms, 7 retries) can end in RETRY_EXC_ERR
  # before a busy guest catches up (seen once in CI, uroce to rxe). -u 20
  # (4.3 s) gives it the time, both ways.
  local t bw_timeout="-u 20"
  for t in send write; do
    case_run "$m" "ib_${t}_bw" 90 tcp "ib_${t}_bw -d {dev} -x {gid} -p {port} -n 200 $bw_timeout" \
      "ib_${t}_bw -d {dev} -x {gid} -p {port} -n 200 $bw_timeout {peer}" '^ *65536 +200 '
    case_run "$m" "ib_${t}_lat" 90 tcp "ib_${t}_lat -d {dev} -x {gid} -p {port} -n 200" \
      "ib_${t}_lat -d {dev} -x {gid} -p {port} -n 200 {peer}" '^ *2 +200 '
  done
  case_run "$m" ib_read_bw 90 tcp "ib_read_bw -d {dev} -x {gid} -p {port} -n 200 -o 16 $bw_timeout" \
    "ib_read_bw -d {dev} -x {gid} -p {port} -n 200 -o 16 $bw_timeout {peer}" '^ *65536 +200 '
  case_run "$m" ib_atomic_bw 90 tcp 'ib_atomic_bw -d {dev} -x {gid} -p {port} -n 200 -o 16' \
    'ib_atomic_bw -d {dev} -x {gid} -p {port} -n 200 -o 16 {peer}' '^ *8 +200 '
  # The read and atomic latencies: the bandwidth cases' requests one at a
  # time (--full; the send and write latencies add inline and polling on
  # memory, and run always).
  if ((full)); then
    case_run "$m" ib_read_lat 90 tcp 'ib_read_lat -d {dev} -x {gid} -p {port} -n 200 -o 16' \
      'ib_read_lat -d {dev} -x {gid} -p {port} -n 200 -o 16 {peer}' '^ *2 +200 '
    case_run "$m" ib_atomic_lat 90 tcp 'ib_atomic_lat -d {dev} -x {gid} -p {port} -n 200 -o 16' \
      'ib_atomic_lat -d {dev} -x {gid} -p {port} -n 200 -o 16 {peer}' '^ *8 +200 '
  fi
  # rdma_cm.
  case_run "$m" rping 60 cm 'rping -s -v -C 10 -a {server} -p {port}' \
    'rping -c -v -C 10 -a {server} -p {port}' 'ping data: rdma-ping-9'
  case_run "$m" ucmatose 60 cm 'ucmatose -p {port} -c 2' 'ucmatose -p {port} -c 2 -s {server}' \
    'test complete'
  case_run "$m" udaddy 60 delay:3 'udaddy -c 2' 'udaddy -c 2 -s {server}' 'test complete'
  case_run "$m" mckey 60 delay:4 'mckey -m 239.1.2.3 -b {server} -C 20' \
    'mckey -m 239.1.2.3 -b {self} -C 20 -s' ''
  case_run "$m" rdma_server 60 cm 'rdma_server -p {port}' 'rdma_client -s {server} -p {port}' \
    'rdma_client: end 0'
  case_run "$m" rdma_xserver 60 cm 'rdma_xserver -p {port}' 'rdma_xclient -s {server} -p {port}' \
    'rdma_xclient: end 0'
  KERNEL_LACKS="(rdma_get_request|rdma_create_ep): Operation not supported" KERNEL_LACKS_WHY=$no_xrc \
    case_run "$m" rdma_xserver_xrc 60 cm 'rdma_xserver -c x -p {port}' \
    'rdma_xclient -c x -s {server} -p {port}' 'rdma_xclient: end 0'
  # perftest -R connects twice: its control connection, then at once the
  # test's QPs, which the server listens for only after the first; a slow
  # server (the emulated guest, or a uroce server beside it) rejects that
  # REQ (REJ 8, no listener) whichever side serves, and the client then
  # crashes in perftest itself. Run up to three times when that happens; a
  # case that loses it three times is reported, not counted (any other
  # failure is).
  RETRY_ON="REJECTED; error: 8" case_run "$m" ib_send_bw_R 90 cm 'ib_send_bw -R -d {dev} -x {gid} -p {port} -n 200' \
    'ib_send_bw -R -d {dev} -x {gid} -p {port} -n 200 {server}' '^ *65536 +200 '
  RETRY_ON="REJECTED; error: 8" case_run "$m" ib_write_lat_R 90 cm 'ib_write_lat -R -d {dev} -x {gid} -p {port} -n 200' \
    'ib_write_lat -R -d {dev} -x {gid} -p {port} -n 200 {server}' '^ *2 +200 '
  # RoCEv2 over IPv6: the GIDs of the IPv6 addresses (UDP checksums,
  # neighbour discovery), the side channels still over IPv4.
  case_run "$m" rc_pingpong_ipv6 60 tcp 'ibv_rc_pingpong -d {dev} -g {gid6} -p {port} -n 100 -c' \
    'ibv_rc_pingpong -d {dev} -g {gid6} -p {port} -n 100 -c {peer}' '100 iters in'
  case_run "$m" ud_pingpong_ipv6 60 tcp 'ibv_ud_pingpong -d {dev} -g {gid6} -p {port} -n 100 -s 1024' \
    'ibv_ud_pingpong -d {dev} -g {gid6} -p {port} -n 100 -s 1024 {peer}' '100 iters in'
  case_run "$m" ib_read_bw_ipv6 90 tcp 'ib_read_bw -d {dev} -x {gid6} -p {port} -n 200 -o 16' \
    'ib_read_bw -d {dev} -x {gid6} -p {port} -n 200 -o 16 {peer}' '^ *65536 +200 '
  case_run "$m" rping_ipv6 60 cm 'rping -s -v -C 10 -a {server6} -p {port}' \
    'rping -c -v -C 10 -a {server6} -p {port}' 'ping data: rdma-ping-9'
  case_run "$m" udaddy_ipv6 60 delay:3 'udaddy -c 2 -b {server6}' 'udaddy -c 2 -s {server6}' 'test complete'
  # AF_IB over RoCE, the kernel's way (rdmacm_afib.c says what it expects):
  # IP clients refused by AF_IB listeners (REJ 28, SIDR reject), and an
  # AF_IB client's route ENODEV, on each side.
  if [[ -n $afib ]]; then
    cp "$afib" "$kernel_peer_jobs/rdmacm_afib"
    case_run "$m" afib_listener 60 delay:3 '{afib} server ::ffff:{self} {port}' \
      '{afib} client {server} {port}' '^client: ok'
    port=$((port + 1))
    case_run "$m" afib_ibclient 60 delay:0 'sleep 1' '{afib} ibclient ::ffff:{server} {port}' '^ibclient: ok'
  fi
  # libfabric's verbs provider: its TCP control channel and its rdma_cm
  # connection go to one address, the kernel's own, so only with --netdev
  # (as libfabric over two rxe devices).
  if [[ $m == netdev ]]; then
    case_run "$m" fi_pingpong_msg 60 tcp 'fi_pingpong -p verbs -e msg -d {dev} -S 4096 -I 20 -c -B {port}' \
      'fi_pingpong -p verbs -e msg -d {dev} -S 4096 -I 20 -c -P {port} {peer}' '^4k +20 +=20 '
    # RDM over verbs;ofi_rxm fails on rxe itself (fi_enable: EINVAL), also
    # between two rxe endpoints of one kernel.
    KERNEL_LACKS="fi_enable\(\).*ret=-22" KERNEL_LACKS_WHY="libfabric's verbs;ofi_rxm on rxe: fi_enable EINVAL, rxe to rxe too" \
      case_run "$m" fi_pingpong_rdm 60 tcp 'fi_pingpong -p verbs;ofi_rxm -e rdm -d {dev} -S 4096 -I 20 -c -B {port}' \
      'fi_pingpong -p verbs;ofi_rxm -e rdm -d {dev} -S 4096 -I 20 -c -P {port} {peer}' '^4k +20 +=20 '
  fi
  # UCX's UCP over rc_verbs (with ud_verbs, its wire-up transport) and over
  # ud_verbs alone, each side on its own device. UCX's ud_verbs GRH check
  # (UCX_UD_VERBS_ETH_DGID_CHECK) stays on for uroce's side, which fills the
  # GRH area and wc.sl as mlx5 does; rxe's side has it off: see
  # ucx_dgid_check_on_rxe.
  local tl ucx="env UCX_UD_VERBS_ETH_DGID_CHECK={dgid_check}"
  for tl in rc_verbs,ud_verbs ud_verbs; do
    case_run "$m" "ucx_tag_lat_${tl%%,*}" 90 tcp \
      "$ucx UCX_TLS=$tl UCX_NET_DEVICES={dev}:1 ucx_perftest -p {port}" \
      "$ucx UCX_TLS=$tl UCX_NET_DEVICES={dev}:1 ucx_perftest -p {port} -t tag_lat -n 200 -w 20 {peer}" \
      '^Final: +200 '
  done
}

# Why the rxe side runs UCX's ud_verbs with its GRH check off: the check
# fails on rxe itself, between two rxe endpoints of one kernel. UCX
# (uct_ud_iface_check_grh, src/uct/ib/ud/base/ud_iface.h) takes the L3 type
# from wc.sl as mlx5's CQE gives it (2: IPv4, so the destination address is
# the last 4 bytes of the 40-byte GRH area); rxe leaves wc.sl 0, so UCX
# compares all 16 bytes at offset 24, where rxe (build_rdma_network_hdr,
# drivers/infiniband/sw/rxe/rxe_resp.c) put the IPv4 header's id, TTL and
# checksum, and drops every datagram. Should a kernel fix that, this says so
# and the check goes on for both sides.
ucx_dgid_check_on_rxe() {
  [[ -z $only || ucx_tag_lat_ud =~ $only ]] || return 0
  local check final=()
  for check in n y; do  # the same run, without the check and with it
    port=$((port + 1))
    local e="UCX_UD_VERBS_ETH_DGID_CHECK=$check UCX_TLS=ud_verbs UCX_NET_DEVICES=rxe0:1"
    # With the check, the client waits for answers that never come: its
    # limit ends it (without, it passes in about 5 s under TCG).
    guest_start "ucx_dgid_$check.server" 16 env $e ucx_perftest -p "$port"
    guest_ready tcp "ucx_dgid_$check.server" || true
    guest_run "ucx_dgid_$check.client" 12 env $e ucx_perftest -p "$port" -t tag_lat -n 200 -w 20 127.0.0.1 || true
    cp "$GUEST_OUT" "$UROCE_LOG_DIR/ucx_dgid_check_$check.rxe_to_rxe.log"
    guest_stop "ucx_dgid_$check.server"
    guest_wait "ucx_dgid_$check.server" 60 || true
    if grep -qE '^Final: +200 ' "$UROCE_LOG_DIR/ucx_dgid_check_$check.rxe_to_rxe.log"; then final+=(pass); else final+=(fail); fi
  done
  printf '%-7s %-22s %-14s without the GRH check %s, with it %s\n' guest ucx_ud_dgid_check rxe-to-rxe "${final[@]}" >>"$matrix"
  case "${final[*]}" in
    "pass fail") ok "ucx_dgid_check_on_rxe: UCX's ud_verbs rxe to rxe passes without its GRH check and fails with it (wc.sl 0): only rxe's side runs without it" ;;
    "pass pass") bad "ucx_dgid_check_on_rxe: UCX's ud_verbs now passes its GRH check between two rxe endpoints: turn it on for the rxe side ({dgid_check})" ;;
    *) bad "ucx_dgid_check_on_rxe: UCX's ud_verbs fails rxe to rxe even without its GRH check"
       tail -n 15 "$UROCE_LOG_DIR/ucx_dgid_check_n.rxe_to_rxe.log" ;;
  esac
}

# A connection to a port nobody listens on is refused both ways (REJ,
# reason 8: no such service ID), as between two kernels.
refused() {  # MODE
  local mode=$1 dir log rc
  for dir in kernel-server uroce-server; do
    port=$((port + 1)) rc=0
    mark "$mode.refused.$dir" start
    log="$UROCE_LOG_DIR/$mode.refused.$dir.log"
    if [[ $dir == kernel-server ]]; then
      host_run 30 rping -c -a "$guest_ip" -p "$port" -C 1 </dev/null >"$log" 2>&1 || rc=$?
    else
      guest_run "$mode.refused" 30 rping -c -a "$host_roce" -p "$port" -C 1 || rc=$?
      cp "$GUEST_OUT" "$log"
    fi
    mark "$mode.refused.$dir" end
    if ((rc != 0 && rc != 124)) && grep -q 'RDMA_CM_EVENT_REJECTED, error 8' "$log"; then
      ok "$mode.refused.$dir: $(grep -m1 REJECTED "$log")"
      printf '%-7s %-22s %-14s pass\n' "$mode" "refused (REJ 8)" "$dir" >>"$matrix"
    else
      bad "$mode.refused.$dir: exit $rc"
      printf '%-7s %-22s %-14s FAIL\n' "$mode" "refused (REJ 8)" "$dir" >>"$matrix"
      cat "$log"
    fi
  done
}

# Every CM MAD uroce sent next to the one the kernel sent for the same call
# (rping, ucmatose: RC with the same parameters both ways; udaddy: SIDR;
# the refused connections: REJ; rping and udaddy over IPv6 too), from the
# capture of the guest's NIC.
cm_compare() {  # MODE
  [[ -z $only || "rping ucmatose udaddy" =~ $only ]] || return 0  # --cases ran none of them
  sleep 1  # filter-dump writes as frames pass; the last DREP is there by now
  if python3 "$here/cm_mads.py" "$KERNEL_PEER_PCAPS" "$host_roce,$host_roce6" "$guest_ip,$guest_ip6" \
      "^$1\.(rping|ucmatose|udaddy|refused|rping_ipv6|udaddy_ipv6)\." \
      >"$UROCE_LOG_DIR/$1.cm_mads.txt" 2>&1; then
    ok "$1: uroce's CM MADs are the kernel's ($(grep -c '^ok' "$UROCE_LOG_DIR/$1.cm_mads.txt") types: $(awk '/^ok/ {sub(":", "", $2); printf "%s ", $2}' "$UROCE_LOG_DIR/$1.cm_mads.txt"))"
  else
    bad "$1: uroce's CM MADs differ from the kernel's"
  fi
  cat "$UROCE_LOG_DIR/$1.cm_mads.txt"
}

# The kernel's own frames on the tap (the side channels' TCP) stay the
# kernel's: the filter on the port's socket keeps them out of the engine's
# ring (rx_kernel 0), and nothing reaches it as malformed RoCE.
kernel_frames() {  # MODE
  local stats parse kernel
  stats=$(in_ns "$UROCE_BIN" stats --name uroce0 2>&1)
  parse=$(awk '$1 == "rx_parse_errors" {print $2}' <<<"$stats")
  kernel=$(awk '$1 == "rx_kernel" {print $2}' <<<"$stats")
  if [[ $parse == 0 && $kernel == 0 ]]; then
    ok "$1: the kernel's frames are the kernel's: rx_kernel 0, rx_parse_errors 0"
  else
    bad "$1: rx_parse_errors '$parse', rx_kernel '$kernel' after the kernel's TCP crossed the tap"
  fi
}

for mode in $modes; do
  UROCE_RUNTIME_DIR=$UROCE_RUNTIME_DIR in_ns "$UROCE_BIN" stop --all >/dev/null 2>&1 || true
  case $mode in
    ip) in_ns "$UROCE_BIN" start --name uroce0 --port "net_af_packet0,iface=$tap" --ip "$eng_ip" --ip6 "$eng_ip6"
        host_roce=$eng_ip host_roce6=$eng_ip6 ;;
    netdev) in_ns "$UROCE_BIN" start --name uroce0 --netdev "$tap"
        host_roce=$host_ip host_roce6=$host_ip6 ;;
    *) echo "unknown mode $mode" >&2; exit 2 ;;
  esac
  host_run 30 ibv_devinfo -v -d uroce0 >"$UROCE_LOG_DIR/$mode.devinfo" 2>&1 || true
  host_gid=$(gid_index "$UROCE_LOG_DIR/$mode.devinfo" "$host_roce")
  host_gid6=$(gid_index "$UROCE_LOG_DIR/$mode.devinfo" "$host_roce6")
  if [[ -z $host_gid || -z $host_gid6 ]]; then
    bad "$mode: uroce0 has no RoCE v2 GID of $host_roce and $host_roce6"
    continue
  fi
  run_matrix "$mode"
  [[ -n $only ]] || refused "$mode"
  cm_compare "$mode"
  kernel_frames "$mode"
  echo "---- $mode mode done at $SECONDS s"
done
ucx_dgid_check_on_rxe

# uroce's sysfs view on a NIC with a device of its own (the guest's
# virtio-net, beside rxe0): <dev>/device is the NIC's device and
# /sys/class/net/eth0/device/infiniband names uroce's device, every value as
# ibv_devinfo, ibstat and ibstatus give it (sysfs_check.py; a veth has no
# device below it, so the host's tests cannot show this). The engine runs in
# the guest from a copy in the job share (the guest's /tmp is its own).
sysfs_on_a_nic() {
  [[ -z $only || sysfs_nic =~ $only ]] || return 0
  local share=$kernel_peer_jobs/uroce
  mkdir -p "$share/bin" "$share/provider"
  cp "$UROCE_BUILD_DIR/bin/uroce" "$UROCE_BUILD_DIR/bin/uroced" "$share/bin/"
  cp -a "$UROCE_BUILD_DIR/provider/." "$share/provider/"
  cp "$here/../integration/sysfs_check.py" "$kernel_peer_jobs/"
  guest_run sysfs_nic 120 bash -c 'export UROCE_RUNTIME_DIR=/tmp/uroce-run; mkdir -m 700 -p $UROCE_RUNTIME_DIR
    t0=$(date +%s%N)
    /mnt/uroce/bin/uroce start --name uroce0 --netdev eth0 --wait 90 >/dev/null || exit 1
    echo "started in $((($(date +%s%N) - t0) / 1000000)) ms"
    /mnt/uroce/bin/uroce run -- python3 /mnt/sysfs_check.py uroce0 eth0; rc=$?
    /mnt/uroce/bin/uroce stop --name uroce0 >/dev/null; exit $rc' || true
  cp "$GUEST_OUT" "$UROCE_LOG_DIR/sysfs_nic.log"
  if grep -q '^sysfs_check uroce0: all agree' "$GUEST_OUT" && grep -q '^ok   device: .*/virtio' "$GUEST_OUT" &&
      grep -q '^ok   /sys/class/net/eth0/device/infiniband: 1' "$GUEST_OUT"; then
    ok "sysfs_nic: uroce0 --netdev eth0 in the guest ($(grep -m1 -o 'started in [0-9]* ms' "$GUEST_OUT"), TCG: up to 90 s allowed): $(grep -m1 '^ok   device:' "$GUEST_OUT" | cut -c6-), eth0/device/infiniband names it, $(grep -c '^ok' "$GUEST_OUT") values agree"
  else
    bad "sysfs_nic: uroce's sysfs view on the guest's NIC"
    grep -v '^ok' "$GUEST_OUT" | tail -n 20
  fi
}
sysfs_on_a_nic

echo "---- the matrix ----"
cat "$matrix"
[[ -z $matrix_out ]] || cp "$matrix" "$matrix_out"
if ((failures)); then
  echo "kernel_peer: $failures failed"
  exit 1
fi
echo "kernel_peer: all passed"
