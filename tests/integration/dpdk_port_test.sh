#!/usr/bin/env bash
# DPDK port smoke test: net::DpdkPort over net_af_packet between two network
# namespaces joined by a veth pair (MTU 9000).
#
#   dpdk_port_test.sh PATH/TO/dpdk_port_probe
#
# 1. ARP: the sender resolves the receiver's address (net::ArpPending and
#    ArpTable on both sides), and each learns the other's veth MAC. The idle
#    receiver sleeps on a net::AfPacketWakeup fd and must be woken by it.
# 2. A checked transfer: 1000 RoCEv2 frames (UDP 4791, RDMA WRITE ONLY with
#    0..4096 payload bytes) arrive in order, ICRC and every byte right; the
#    receiver acknowledges every 64 frames and the sender keeps at most 256
#    in flight. The receiving port received them in place (no copy).
#    Again with a receiver that holds all 1500 frames it gets: the port
#    copies once its receive buffers run low, and no held frame changes.
# 3. Raw rates for 4200- and 1100-byte frames, one sender and one receiver,
#    UROCE_DPDK_RATE_SECONDS (default 2) each: printed, and checked only for
#    having moved frames.
#
# Traffic stays inside the two namespaces: the probes' addresses
# (10.200.X.1/.2) exist only in the probes, the kernel gets none. Namespaces
# are named per run and removed on exit. Exit 77 (ctest skip) only if the
# machine cannot create a network namespace.
set -uo pipefail

probe=${1:?usage: dpdk_port_test.sh PATH/TO/dpdk_port_probe}
rate_seconds=${UROCE_DPDK_RATE_SECONDS:-2}

if [[ $EUID -ne 0 ]]; then
  echo "SKIP: network namespaces need root"
  exit 77
fi

tag="$$$RANDOM"
tag=${tag: -7}
ns_a="uroce-dpa-$tag"
ns_b="uroce-dpb-$tag"
veth_a="udpa$tag"  # interface names: at most 15 characters
veth_b="udpb$tag"
subnet=$((10#$tag % 250))
ip_a="10.200.$subnet.1"
ip_b="10.200.$subnet.2"
work="$(mktemp -d "${TMPDIR:-/tmp}/uroce-dpdk.XXXXXX")"
pids=()

cleanup() {
  local pid
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null
  done
  for pid in "${pids[@]}"; do
    wait "$pid" 2>/dev/null
  done
  ip netns del "$ns_a" 2>/dev/null
  ip netns del "$ns_b" 2>/dev/null
  if [[ -n "${UROCE_KEEP_FILES:-}" ]]; then
    echo "files kept in $work"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail() {
  echo "FAIL: $*"
  exit 1
}

if ! ip netns add "$ns_a" 2>"$work/netns.err"; then
  echo "SKIP: cannot create a network namespace: $(cat "$work/netns.err")"
  exit 77
fi
ip netns add "$ns_b" || fail "second namespace"
ip link add "$veth_a" netns "$ns_a" mtu 9000 type veth peer name "$veth_b" netns "$ns_b" mtu 9000 ||
  fail "cannot create the veth pair"
for side in "$ns_a:$veth_a" "$ns_b:$veth_b"; do
  ns=${side%%:*}
  dev=${side#*:}
  # No IPv6 on the veths: no router solicitations or MLD frames in the test.
  ip netns exec "$ns" sysctl -qw "net.ipv6.conf.$dev.disable_ipv6=1" 2>/dev/null
  ip -n "$ns" link set lo up
  ip -n "$ns" link set "$dev" up || fail "link up $dev"
done
mac_a=$(ip -n "$ns_a" -o link show "$veth_a" | sed -n 's/.*link\/ether \([0-9a-f:]*\).*/\1/p')
mac_b=$(ip -n "$ns_b" -o link show "$veth_b" | sed -n 's/.*link\/ether \([0-9a-f:]*\).*/\1/p')
echo "namespaces $ns_a ($veth_a $mac_a, $ip_a) <-> $ns_b ($veth_b $mac_b, $ip_b)"

# value KEY FILE: the last KEY=value line of a probe's output.
value() {
  sed -n "s/^$1=//p" "$2" | tail -n 1
}

# start_receiver NAME ARGS...: runs a probe in ns_b in the background and
# waits (at most 30 s) until its port is open.
start_receiver() {
  local name=$1
  shift
  ip netns exec "$ns_b" timeout -k 5 90 "$probe" --name "$name-$tag" \
    --spec "net_af_packet0,iface=$veth_b" --ip "$ip_b" --peer "$ip_a" "$@" \
    >"$work/$name.out" 2>"$work/$name.err" &
  receiver_pid=$!
  pids+=("$receiver_pid")
  local i
  for ((i = 0; i < 300; i++)); do
    grep -qx ready "$work/$name.out" && return 0
    kill -0 "$receiver_pid" 2>/dev/null || break
    sleep 0.1
  done
  cat "$work/$name.out" "$work/$name.err"
  fail "$name: the receiving probe did not open its port"
}

# run_sender NAME ARGS...: runs a probe in ns_a in the foreground.
run_sender() {
  local name=$1
  shift
  ip netns exec "$ns_a" timeout -k 5 90 "$probe" --name "$name-$tag" \
    --spec "net_af_packet0,iface=$veth_a" --ip "$ip_a" --peer "$ip_b" "$@" \
    >"$work/$name.out" 2>"$work/$name.err"
}

show() {
  local f
  for f in "$@"; do
    echo "--- $f"
    cat "$work/$f.out"
    [[ -s "$work/$f.err" ]] && sed 's/^/stderr: /' "$work/$f.err"
  done
}

# ---- 1 and 2: ARP and the checked transfer ----
start_receiver recv --mode recv --count 1000 --timeout 40
run_sender send --mode send --count 1000 --timeout 40
send_rc=$?
wait "$receiver_pid"
recv_rc=$?
show recv send
((send_rc == 0)) || fail "sender exited $send_rc"
((recv_rc == 0)) || fail "receiver exited $recv_rc"
[[ $(value mac "$work/send.out") == "$mac_a" ]] || fail "sender's port MAC is not $veth_a's"
[[ $(value mac "$work/recv.out") == "$mac_b" ]] || fail "receiver's port MAC is not $veth_b's"
[[ $(value mtu "$work/send.out") == 9000 ]] || fail "sender's MTU is not 9000"
[[ $(value peer_mac "$work/send.out") == "$mac_b" ]] || fail "ARP: sender resolved a wrong MAC"
[[ $(value learned_peer_mac "$work/recv.out") == "$mac_a" ]] || fail "ARP: receiver did not learn the sender"
[[ $(value received "$work/recv.out") == 1000 ]] || fail "receiver did not get 1000 frames"
(($(value fd_wakeups "$work/recv.out") >= 1)) || fail "the idle receiver was never woken by its AfPacketWakeup fd"
[[ $(value eal_args "$work/send.out") == *"--file-prefix=uroce-send-$tag"* ]] || fail "EAL file prefix"
# net_af_packet received each frame straight into a packet buffer.
(($(value port_rx_in_place "$work/recv.out") == $(value port_rx_frames "$work/recv.out"))) ||
  fail "the receiver's frames were copied (port_rx_in_place $(value port_rx_in_place "$work/recv.out") of $(value port_rx_frames "$work/recv.out"))"
echo "checked transfer: ok"

# ---- 2b: a receiver that holds every frame ----
# Once few of its receive buffers are left the port copies; none of the
# frames held changes, none is lost.
start_receiver hold --mode recv --count 1500 --hold --timeout 40
run_sender send-hold --mode send --count 1500 --timeout 40
send_rc=$?
wait "$receiver_pid"
recv_rc=$?
((send_rc == 0 && recv_rc == 0)) || {
  show hold send-hold
  fail "held transfer: sender exited $send_rc, receiver $recv_rc"
}
in_place=$(value port_rx_in_place "$work/hold.out") frames=$(value port_rx_frames "$work/hold.out")
[[ $(value held "$work/hold.out") == 1500 && $(value held_changed "$work/hold.out") == 0 ]] ||
  fail "held transfer: held $(value held "$work/hold.out"), changed since $(value held_changed "$work/hold.out")"
((in_place > 0 && in_place < frames)) || fail "held transfer: $in_place of $frames frames in place (expected some copied)"
echo "held transfer: ok ($in_place of $frames frames in place, the rest copied)"

# ---- 3: raw rates ----
for size in 4200 1100; do
  start_receiver "rate-recv-$size" --mode rate-recv --timeout $((rate_seconds + 30))
  run_sender "rate-send-$size" --mode rate-send --size "$size" --seconds "$rate_seconds" \
    --timeout 30
  send_rc=$?
  wait "$receiver_pid"
  recv_rc=$?
  show "rate-recv-$size" "rate-send-$size"
  ((send_rc == 0 && recv_rc == 0)) || fail "rate run with $size-byte frames"
  out="$work/rate-recv-$size.out"
  printf 'RATE %s-byte frames: received %s of %s sent in %s s: %s frames/s, %s Gbit/s\n' \
    "$size" "$(value frames "$out")" "$(value sender_tx_frames "$out")" \
    "$(value seconds "$out")" "$(value rx_rate_pps "$out")" "$(value rx_rate_gbps "$out")"
done

echo "PASS"
