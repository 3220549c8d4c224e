#!/usr/bin/env bash
# Devices bound to kernel interfaces (uroced --netdev IF, as `rdma link add
# rxe0 type rxe netdev IF`): two network namespaces joined by a veth pair,
# an engine on each end taking that end's MAC and the kernel's own IPv4 and
# IPv6 addresses as its GIDs. Checks:
#  - the GID table is the interface's addresses, each with its ndev_ifindex
#    (ibv_query_gid_table / ibv_query_gid_ex through pyverbs);
#  - rping -v over IPv4 and IPv6 and ib_send_bw -R between the kernel's own
#    addresses, while the kernels keep their own traffic (perftest's TCP
#    side channel) on the same interfaces and addresses;
#  - no ICMP port unreachable from the kernels for the RoCE datagrams they
#    also see (their counters, after a probe that shows the counter counts);
#  - an address added to the interface later becomes a GID (with
#    IBV_EVENT_GID_CHANGE counted) and takes a connection; removed, it goes;
#  - `uroce run` shows /sys/class/infiniband/<dev>/device/net/<IF>;
#  - the kernel's own traffic does not wake an idle engine.
# With rdmacm_events given, also the event sequences of a connection over
# IPv4 and over IPv6 between the bound engines, and ADDR_CHANGE for the ids
# bound to an address removed from the interface.
#
#   netdev_two_hosts_test.sh [RDMACM_EVENTS_BINARY]
set -euo pipefail
events=${1:-}
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
for tool in rping ib_send_bw nstat; do
  if ! command -v $tool >/dev/null; then
    echo "SKIP: $tool not installed"
    exit 77
  fi
done
if ! /usr/bin/python3 -c 'import pyverbs' 2>/dev/null; then
  echo "SKIP: python3-pyverbs is not installed"
  exit 77
fi

two_hosts_or_skip ndv 235
run_a="$UROCE_RUNTIME_DIR/a" run_b="$UROCE_RUNTIME_DIR/b"
mkdir -p "$run_a" "$run_b"
chmod 700 "$run_a" "$run_b"
add_cleanup "UROCE_RUNTIME_DIR=$run_a '$UROCE_BIN' stop --all >/dev/null 2>&1 || true"
add_cleanup "UROCE_RUNTIME_DIR=$run_b '$UROCE_BIN' stop --all >/dev/null 2>&1 || true"
on_a() { UROCE_RUNTIME_DIR=$run_a ip netns exec "$ns_a" "$@"; }
on_b() { UROCE_RUNTIME_DIR=$run_b ip netns exec "$ns_b" "$@"; }
v6=fd00:235:$(printf '%x' $(($$ % 65536)))
kern6_a=$v6::1 kern6_b=$v6::2
ip -n "$ns_a" addr add "$kern6_a/64" dev "$veth_a" nodad
ip -n "$ns_b" addr add "$kern6_b/64" dev "$veth_b" nodad
# The kernel's traffic floods A's interface while its engine starts: what the
# driver's socket takes before its filter is on must not reach the engine
# (rx_kernel stays 0, checked below).
on_b ping -q -i 0.002 -w 20 "$kern_a" >/dev/null 2>&1 &
flood=$!
sleep 0.3
on_a "$UROCE_BIN" start --name hostA --netdev "$veth_a"
kill "$flood" 2>/dev/null || true
wait "$flood" 2>/dev/null || true
on_b "$UROCE_BIN" start --name hostB --netdev "$veth_b"
gid_table="$(dirname "${BASH_SOURCE[0]}")/gid_table.py"

failures=0

# The kernel's unreachable answers (absolute counters of that namespace).
unreachables() {  # NS
  ip netns exec "$1" nstat -az IcmpOutDestUnreachs Icmp6OutDestUnreachs UdpNoPorts Udp6NoPorts 2>/dev/null |
    awk '/^(Icmp|Udp)/ {n += $2} END {print n + 0}'
}

# The GID table: kernel addresses, the interface's index on every GID.
check_gids() {  # HOST NS IF EXPECTED_ADDR...
  local host=$1 ns=$2 ifname=$3 on=on_a
  shift 3
  [[ $host == hostB ]] && on=on_b
  local ifindex table addr
  ifindex=$(ip netns exec "$ns" cat "/sys/class/net/$ifname/ifindex")
  table=$($on "$UROCE_BIN" run -- /usr/bin/python3 "$gid_table" "$host" 2>&1) || {
    bad "$host: gid_table.py: $table"
    return
  }
  for addr in "$@"; do
    grep -qE "^[0-9]+ $addr $ifindex\$" <<<"$table" || {
      bad "$host: no GID $addr with ndev_ifindex $ifindex in:"$'\n'"$table"
      return
    }
  done
  if awk -v i="$ifindex" '$3 != i {exit 1}' <<<"$table"; then
    ok "$host GIDs: $(tr '\n' ' ' <<<"$table")(ndev_ifindex $ifindex = $ifname)"
  else
    bad "$host: a GID with another ndev_ifindex:"$'\n'"$table"
  fi
}
check_gids hostA "$ns_a" "$veth_a" "$kern_a" "$kern6_a"
check_gids hostB "$ns_b" "$veth_b" "$kern_b" "$kern6_b"

# rdma-core's tests find a device's interface in sysfs (tests/base.py).
if view=$(on_a "$UROCE_BIN" run -- ls /sys/class/infiniband/hostA/device/net/ 2>&1) && [[ $view == "$veth_a" ]]; then
  ok "uroce run: /sys/class/infiniband/hostA/device/net/$veth_a"
else
  bad "uroce run: /sys/class/infiniband/hostA/device/net/ lists '$view'"
fi

# The counter counts: a datagram to a port nobody holds is answered.
on_a bash -c "echo probe >/dev/udp/$kern_b/4792" || true
sleep 0.2
icmp_before=$(unreachables "$ns_b")
((icmp_before >= 1)) || bad "the kernel did not count an unreachable for UDP 4792 (probe)"
icmp_before_a=$(unreachables "$ns_a")

# LABEL SERVER... -- CLIENT...: the server on B, the client on A.
pair() {
  local label=$1 server=() client=() attempt crc src spid
  shift
  while [[ $1 != -- ]]; do server+=("$1"); shift; done
  shift
  client=("$@")
  local slog="$UROCE_LOG_DIR/$label.server.log" clog="$UROCE_LOG_DIR/$label.client.log"
  for attempt in 1 2 3; do
    on_b timeout -k 5 30 "$UROCE_BIN" run -- "${server[@]}" </dev/null >"$slog" 2>&1 &
    spid=$! crc=0 src=0
    sleep 1
    on_a timeout -k 5 30 "$UROCE_BIN" run -- "${client[@]}" </dev/null >"$clog" 2>&1 || crc=$?
    ((crc != 0)) && pkill -TERM -P "$spid" 2>/dev/null || true
    wait "$spid" || src=$?
    # perftest -R's own race (its data listener after its handshake), as
    # in rdmacm_two_hosts: run again.
    if ((crc != 0)) && [[ ${client[0]} == ib_* ]] && grep -qE 'RDMA_CM_EVENT_REJECTED; error: 8' "$clog"; then
      continue
    fi
    break
  done
  if ((crc == 0 && src == 0)) && ! grep -qE 'error|[Ff]ail|invalid data' "$clog" "$slog"; then
    ok "$label"
  else
    bad "$label (client $crc, server $src)"
    tail -n 15 "$clog" "$slog"
  fi
  PAIR_CLIENT_LOG=$clog
}

# Nothing known: the first connection makes the engines resolve.
ip -n "$ns_a" neigh flush dev "$veth_a"
ip -n "$ns_b" neigh flush dev "$veth_b"
pair rping_ipv4 rping -s -a "$kern_b" -p 18911 -C 10 -v -- rping -c -a "$kern_b" -p 18911 -C 10 -v
grep -q 'ping data: rdma-ping-9' "$PAIR_CLIENT_LOG" || bad "rping_ipv4: 10 pings with their data"
pair rping_ipv6 rping -s -a "$kern6_b" -p 18912 -C 10 -v -- rping -c -a "$kern6_b" -p 18912 -C 10 -v
grep -q 'ping data: rdma-ping-9' "$PAIR_CLIENT_LOG" || bad "rping_ipv6: 10 pings with their data"
pair ib_send_bw_R ib_send_bw -R -d hostB -x 0 -p 18913 -n 500 -- ib_send_bw -R -d hostA -x 0 -p 18913 -n 500 "$kern_b"

# The event sequence of each step (rdmacm_events' ends: ADDR_RESOLVED,
# ROUTE_RESOLVED, CONNECT_RESPONSE, then ESTABLISHED on the server,
# DISCONNECTED on both, each checked as it comes) over IPv4 and IPv6.
if [[ -n $events ]]; then
  for v in "ipv4 $kern_b 18916" "ipv6 $kern6_b 18917"; do
    read -r fam addr port <<<"$v"
    slog="$UROCE_LOG_DIR/events_$fam.server.log" clog="$UROCE_LOG_DIR/events_$fam.client.log"
    on_b timeout -k 5 30 "$UROCE_BIN" run -- "$events" slow-server "$addr" "$port" 0 </dev/null >"$slog" 2>&1 &
    spid=$!
    sleep 1
    crc=0 src=0
    on_a timeout -k 5 30 "$UROCE_BIN" run -- "$events" slow-client "$addr" "$port" 0 </dev/null >"$clog" 2>&1 || crc=$?
    wait "$spid" || src=$?
    if ((crc == 0 && src == 0)) && grep -q '^client: connected' "$clog" && grep -q '^server: established' "$slog"; then
      ok "rdma_cm event sequence over $fam ($addr) between the bound engines"
    else
      bad "rdma_cm event sequence over $fam (client $crc, server $src)"
      cat "$clog" "$slog"
    fi
  done
fi

icmp_after=$(unreachables "$ns_b") icmp_after_a=$(unreachables "$ns_a")
guarded=$(UROCE_RUNTIME_DIR=$run_b "$UROCE_BIN" stats --name hostB | awk '$1 == "roce_port_datagrams" {print $2}')
if ((icmp_after == icmp_before && icmp_after_a == icmp_before_a && ${guarded:-0} > 0)); then
  ok "no ICMP unreachable for RoCE: the kernel of B delivered $guarded RoCE datagrams to the engine's socket"
else
  bad "unreachables: B $icmp_before -> $icmp_after, A $icmp_before_a -> $icmp_after_a; roce_port_datagrams ${guarded:-none}"
fi
kernel_frames=$(UROCE_RUNTIME_DIR=$run_a "$UROCE_BIN" stats --name hostA | awk '$1 == "rx_kernel" {print $2}')
# The port's socket filter (net/af_packet_wakeup.h) keeps the kernel's own
# traffic out of the engine's ring: perftest's TCP crossed the interface, and
# none of it reached the engine.
[[ $kernel_frames == 0 ]] && ok "the kernel's own traffic (perftest's TCP) never reached hostA's ring (rx_kernel 0)" ||
  bad "hostA's ring took ${kernel_frames:-no count of} the kernel's frames (rx_kernel): its socket filter is missing"

# Neighbours as the kernel resolves them: the engines asked their kernels
# (whose ARP and neighbour discovery answered) and sent no request of their own.
for h in A B; do
  dir=run_${h,,}
  stats=$(UROCE_RUNTIME_DIR=${!dir} "$UROCE_BIN" stats --name "host$h")
  asked=$(awk '$1 == "neigh_kernel_asked" {print $2}' <<<"$stats")
  own=$(awk '$1 == "neigh_requests_sent" {print $2}' <<<"$stats")
  # A, the client, found no entry (flushed) and asked; B's kernel learnt A from its request.
  if [[ $own == 0 ]] && { [[ $h == B ]] || ((${asked:-0} >= 1)); }; then
    ok "host$h: neighbours from the kernel's table ($asked asked of the kernel, none resolved itself)"
  else
    bad "host$h: neigh_kernel_asked ${asked:-none}, neigh_requests_sent ${own:-none}"
  fi
done

# An address added later is a GID at once; a connection to it works.
extra=${net%.0}.21 extra6=$v6::21
ip -n "$ns_a" addr add "$extra/24" dev "$veth_a"
ip -n "$ns_a" addr add "$extra6/64" dev "$veth_a" nodad
sleep 0.5
check_gids hostA "$ns_a" "$veth_a" "$kern_a" "$kern6_a" "$extra" "$extra6"
changes=$(UROCE_RUNTIME_DIR=$run_a "$UROCE_BIN" stats --name hostA | awk '$1 == "gid_changes" {print $2}')
((${changes:-0} >= 1)) && ok "hostA: $changes GID changes (IBV_EVENT_GID_CHANGE)" || bad "hostA: no GID change counted"
# This time the server is on A, on the new address.
slog="$UROCE_LOG_DIR/rping_new.server.log" clog="$UROCE_LOG_DIR/rping_new.client.log"
on_a timeout -k 5 30 "$UROCE_BIN" run -- rping -s -a "$extra" -p 18914 -C 5 -v </dev/null >"$slog" 2>&1 &
spid=$!
sleep 1
if on_b timeout -k 5 30 "$UROCE_BIN" run -- rping -c -a "$extra" -p 18914 -C 5 -v </dev/null >"$clog" 2>&1 &&
   wait "$spid" && grep -q 'ping data: rdma-ping-4' "$clog"; then
  ok "rping to an address added later ($extra)"
else
  bad "rping to an address added later"
  tail -n 10 "$slog" "$clog"
fi
# ADDR_CHANGE: an id bound to the address about to go gets it; one bound
# to the address that stays does not.
if [[ -n $events ]]; then
  alog="$UROCE_LOG_DIR/addr_change.log"
  on_a timeout -k 5 40 "$UROCE_BIN" run -- "$events" addr-change "$extra" "$extra6" 18918 </dev/null >"$alog" 2>&1 &
  apid=$!
  for ((i = 0; i < 200; i++)); do
    grep -q '^bound' "$alog" && break
    sleep 0.1
  done
fi
ip -n "$ns_a" addr del "$extra/24" dev "$veth_a"
if [[ -n $events ]]; then
  arc=0
  wait "$apid" || arc=$?
  if ((arc == 0)) && grep -q "RDMA_CM_EVENT_ADDR_CHANGE on the id bound to $extra " "$alog"; then
    ok "ADDR_CHANGE for the id bound to the removed $extra, none for the one on $extra6"
  else
    bad "ADDR_CHANGE (rc $arc)"
    cat "$alog"
  fi
fi
sleep 0.5
if ! table=$(on_a "$UROCE_BIN" run -- /usr/bin/python3 "$gid_table" hostA 2>&1); then
  bad "gid_table.py: $table"
elif grep -q " $extra " <<<"$table"; then
  bad "a removed address is still a GID"
elif ! grep -q " $extra6 " <<<"$table"; then
  bad "the other added address went too"
else
  ok "a removed address is no GID any more, the other stays"
fi

# The kernel's own traffic does not wake a sleeping engine: 200 UDP
# datagrams (and the ICMP answers) between the kernels cross B's interface
# while B's engine is idle; only RoCE, ARP and neighbour discovery frames
# wake it (wire_wakeups, which the RoCE traffic above made count).
wakeups() { UROCE_RUNTIME_DIR=$run_b "$UROCE_BIN" stats --name hostB | awk '$1 == "wire_wakeups" {print $2}'; }
sleep 0.5
woke_before=$(wakeups)
ip netns exec "$ns_a" bash -c "for i in {1..200}; do echo x >/dev/udp/$kern_b/9; sleep 0.005; done" ||
  bad "UDP between the kernels"
woke=$(($(wakeups) - ${woke_before:-0}))
if ((${woke_before:-0} > 0 && woke < 20)); then
  ok "200 kernel datagrams woke hostB's idle engine $woke times (RoCE before: $woke_before)"
else
  bad "200 kernel datagrams woke hostB's idle engine $woke times (wire_wakeups before: ${woke_before:-none})"
fi

if ((failures)); then
  tail -n 30 "$run_a"/*.log "$run_b"/*.log 2>/dev/null || true
  echo "netdev_two_hosts: $failures failed"
  exit 1
fi
echo "netdev_two_hosts: all passed"
