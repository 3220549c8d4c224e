#!/usr/bin/env bash
# rdma_cm across two engines: network namespaces joined by a veth pair, one
# engine in each on a DPDK net_af_packet port with --ip, each host's clients
# seeing only their own engine (a runtime directory each, as two machines).
# Connections go as IB CM MADs on QP1 over RoCEv2 (cm/cm_wire.cc).
# Debian's unmodified rdmacm-utils and perftest -R under `uroce run`, a
# refused connect, a killed client whose peer sees DISCONNECTED, and a
# capture that tshark decodes as REQ, REP, RTU, DREQ, DREP with nothing
# malformed, and an address no neighbour answers for (ADDR_ERROR). Every run is bounded in time.
#
# With rdmacm_events (tests/integration/rdmacm_events.cc) given: a server
# slow to accept and a client slow to establish, on engines whose CM gives
# up after 4.8 s, still connect through MRAs.
#
# AF_IB as the kernel's rdma_cm over RoCE: with rdmacm_afib
# (tests/integration/rdmacm_afib.c) given, its AF_IB listeners on the zero
# GID refuse an IPv4 and an IPv6 client of the other engine at once (REJ 28,
# SIDR "reject" 2) and hear nothing (captured: the REQ, with rdma_cm's IP
# header as a kernel client's, and its REJ), and its AF_IB client resolves
# the other engine's GID but not the route (ENODEV). ucmatose and udaddy -f gid fail as on a kernel RoCE device.
#
#   rdmacm_two_hosts_test.sh [RDMACM_EVENTS_BINARY [RDMACM_AFIB_BINARY]]
set -euo pipefail
events=${1:-}
afib=${2:-}
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
if ! command -v rping >/dev/null; then
  echo "SKIP: rdmacm-utils not installed"
  exit 77
fi

two_hosts_or_skip ucm 234
run_a="$UROCE_RUNTIME_DIR/a" run_b="$UROCE_RUNTIME_DIR/b"
mkdir -p "$run_a" "$run_b"
chmod 700 "$run_a" "$run_b"
add_cleanup "UROCE_RUNTIME_DIR=$run_a '$UROCE_BIN' stop --all >/dev/null 2>&1 || true"
add_cleanup "UROCE_RUNTIME_DIR=$run_b '$UROCE_BIN' stop --all >/dev/null 2>&1 || true"
# on_a / on_b: a command on that host, with that host's engine only.
on_a() { UROCE_RUNTIME_DIR=$run_a ip netns exec "$ns_a" "$@"; }
on_b() { UROCE_RUNTIME_DIR=$run_b ip netns exec "$ns_b" "$@"; }
v6=fd00:234:$(printf '%x' $(($$ % 65536)))
eng6_a=$v6::11 eng6_b=$v6::12  # RoCEv2 over IPv6 (GID 2)
on_a "$UROCE_BIN" start --name hostA --port "net_af_packet0,iface=$veth_a" --ip "$eng_a" --ip6 "$eng6_a"
on_b "$UROCE_BIN" start --name hostB --port "net_af_packet0,iface=$veth_b" --ip "$eng_b" --ip6 "$eng6_b"

failures=0

# The CM ids in hostB's engine; wait_for_listener BEFORE waits (up to 30 s)
# until a server made one more, i.e. it is binding or listening: a loaded
# machine may take seconds to start a client (a connect before the listen
# is REJECTED, a SIDR REQ UNREACHABLE).
cm_ids_b() { UROCE_RUNTIME_DIR=$run_b "$UROCE_BIN" status 2>/dev/null | awk '/^cm: ids/ {print $3 + 0}'; }
wait_for_listener() {
  local i
  for ((i = 0; i < 300; i++)); do
    (($(cm_ids_b) > $1)) && break
    sleep 0.1
  done
  sleep 0.5  # from its bind to its listen
}

# LABEL SERVER... -- CLIENT...: the server on B, the client on A.
pair() {
  local label=$1 server=() client=()
  shift
  while [[ $1 != -- ]]; do server+=("$1"); shift; done
  shift
  client=("$@")
  local slog="$UROCE_LOG_DIR/$label.server.log" clog="$UROCE_LOG_DIR/$label.client.log"
  local before attempt crc src spid
  for attempt in 1 2 3; do
    before=$(cm_ids_b)
    on_b timeout -k 5 60 "$UROCE_BIN" run -- "${server[@]}" </dev/null >"$slog" 2>&1 &
    spid=$! crc=0 src=0
    wait_for_listener "$before"
    on_a timeout -k 5 60 "$UROCE_BIN" run -- "${client[@]}" </dev/null >"$clog" 2>&1 || crc=$?
    if ((crc != 0)); then  # the server's `timeout` (our child's child) stops it
      pkill -TERM -P "$spid" 2>/dev/null || true
    fi
    wait "$spid" || src=$?
    # perftest -R races itself: after its control connection's handshake
    # the client connects at once while the server is still making its
    # data listener (a REQ before the listen is REJECTED 8, a SIDR REQ
    # UNREACHABLE 1, as with the kernel's CM). That one ending is run again.
    if ((crc != 0)) && grep -qE 'Event: RDMA_CM_EVENT_(REJECTED; error: 8|UNREACHABLE; error: 1)' "$clog" &&
       grep -q 'ib_' <<<"${client[0]}"; then
      echo "     $label: perftest's own listen race (attempt $attempt), again"
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
  PAIR_CLIENT_LOG=$clog PAIR_SERVER_LOG=$slog
}

cap="$UROCE_LOG_DIR/cm.pcap"
if command -v tshark >/dev/null; then
  sleep 1  # past start-up (EAL, the kernel's own IPv6 chatter on a new link)
  UROCE_RUNTIME_DIR=$run_a "$UROCE_BIN" capture --name hostA -w "$cap" --count 400 --seconds 30 \
    >"$UROCE_LOG_DIR/capture.log" 2>&1 &
  cap_pid=$!
  sleep 0.5
fi
pair rping rping -s -a "$eng_b" -p 18901 -C 10 -v -- rping -c -a "$eng_b" -p 18901 -C 10 -v
grep -q 'ping data: rdma-ping-9' "$PAIR_CLIENT_LOG" || bad "rping: 10 pings with their data"
if command -v tshark >/dev/null; then
  wait "$cap_pid" || cat "$UROCE_LOG_DIR/capture.log"
  # CM MADs by attribute ID (IBA table 105): REQ, REP, RTU, DREQ, DREP.
  attrs=$(tshark -r "$cap" -Y infiniband.mad -T fields -e infiniband.mad.attributeid 2>/dev/null | sort | uniq -c | tr -s ' ' | tr '\n' ';' || true)
  malformed=$(tshark -r "$cap" -Y "_ws.malformed || _ws.expert.severity == error" 2>/dev/null | wc -l || true)
  missing=""
  for a in 0x0010 0x0013 0x0014 0x0015 0x0016; do
    grep -q " $a" <<<"$attrs" || missing+=" $a"
  done
  reqs=$(tshark -r "$cap" -Y "infiniband.cm.req.serviceid.dport == 18901" 2>/dev/null | wc -l || true)
  if [[ -z $missing ]] && ((malformed == 0 && reqs > 0)); then
    ok "capture: CM MADs by attribute:$attrs none malformed"
  else
    bad "capture: attributes$attrs missing$missing, $malformed malformed, $reqs REQs to port 18901"
  fi
else
  echo "skip capture: tshark not installed"
fi

pair rping_ipv6 rping -s -a "$eng6_b" -p 18906 -C 5 -v -- rping -c -a "$eng6_b" -p 18906 -C 5 -v
grep -q 'ping data: rdma-ping-4' "$PAIR_CLIENT_LOG" || bad "rping_ipv6: 5 pings with their data"
pair ucmatose ucmatose -p 18902 -c 2 -- ucmatose -p 18902 -c 2 -s "$eng_b"
# udaddy has no port option (its -p is the port space): 7174.
pair udaddy udaddy -c 2 -- udaddy -c 2 -s "$eng_b"
pair rdma_server_client rdma_server -p 18903 -- rdma_client -s "$eng_b" -p 18903
pair rdma_xserver_xclient rdma_xserver -p 18908 -- rdma_xclient -s "$eng_b" -p 18908
pair rdma_xserver_xclient_xrc rdma_xserver -c x -p 18909 -- rdma_xclient -c x -s "$eng_b" -p 18909
grep -q 'rdma_xclient: end 0' "$PAIR_CLIENT_LOG" || bad "rdma_xclient -c x: did not end 0"
pair ib_send_bw_R_UD ib_send_bw -R -c UD -d hostB -x 0 -p 18907 -n 200 -- ib_send_bw -R -c UD -d hostA -x 0 -p 18907 -n 200 "$eng_b"
pair ib_send_bw_R ib_send_bw -R -d hostB -x 0 -p 18904 -n 200 -- ib_send_bw -R -d hostA -x 0 -p 18904 -n 200 "$eng_b"

if [[ -n $afib ]]; then
  if command -v tshark >/dev/null; then
    afib_cap="$UROCE_LOG_DIR/afib.pcap"
    UROCE_RUNTIME_DIR=$run_a "$UROCE_BIN" capture --name hostA -w "$afib_cap" --count 400 --seconds 30 \
      >"$UROCE_LOG_DIR/afib_capture.log" 2>&1 &
    cap_pid=$!
    sleep 0.5
  fi
  pair afib_listener_ipv4 "$afib" server "::ffff:$eng_b" 18912 -- "$afib" client "$eng_b" 18912
  grep -q '^client: ok' "$PAIR_CLIENT_LOG" && grep -q '^server: ok' "$PAIR_SERVER_LOG" ||
    bad "afib_listener_ipv4: both ends ok"
  if command -v tshark >/dev/null; then
    kill -INT "$cap_pid" 2>/dev/null || true
    wait "$cap_pid" || true
    # The REQ carries RDMA_PS_TCP's service ID (0x01060000 | 18912), which
    # the AF_IB listener bound, and rdma_cm's IP header; it goes once (no
    # retries) and its answer is a REJ (ConnectReject), reason 28; no CM MAD
    # is malformed.
    comm_ids=$(tshark -r "$afib_cap" -Y "infiniband.cm.req.serviceid == 0x010649e0" -T fields -e infiniband.cm.req \
      2>/dev/null || true)
    reqs=$(grep -c . <<<"$comm_ids" || true) rejs=0
    if ((reqs == 1)); then
      rejs=$(tshark -r "$afib_cap" -Y "infiniband.cm.rej.remotecommid == $comm_ids && infiniband.cm.rej.reason == 28" \
        2>/dev/null | grep -c ConnectReject || true)
    fi
    malformed=$(tshark -r "$afib_cap" -Y "infiniband.mad && (_ws.malformed || _ws.expert.severity == error)" \
      2>/dev/null | wc -l || true)
    if ((reqs == 1 && rejs == 1 && malformed == 0)); then
      ok "capture: one REQ to the AF_IB listener (service ID 0x010649e0), its REJ 28, none malformed"
    else
      bad "capture: $reqs REQs to the AF_IB listener, $rejs REJ 28 to it, $malformed malformed"
    fi
  fi
  pair afib_listener_ipv6 "$afib" server "$eng6_b" 18915 -- "$afib" client "$eng6_b" 18915
  grep -q '^client: ok' "$PAIR_CLIENT_LOG" && grep -q '^server: ok' "$PAIR_SERVER_LOG" ||
    bad "afib_listener_ipv6: both ends ok"
  if on_a timeout 30 "$UROCE_BIN" run -- "$afib" ibclient "::ffff:$eng_b" 18912 >"$UROCE_LOG_DIR/afib_ibclient.log" 2>&1 &&
     grep -q '^ibclient: ok' "$UROCE_LOG_DIR/afib_ibclient.log"; then
    ok "afib_ibclient: the other engine's GID resolves, the route is ENODEV"
  else
    cat "$UROCE_LOG_DIR/afib_ibclient.log"
    bad afib_ibclient
  fi
fi
ON_HOST=on_a expect_failure ucmatose_gid_server 'bind address failed: No such device' \
  ucmatose -f gid -P ib -b "::ffff:$eng_a" -p 18914 -c 1
ON_HOST=on_a expect_failure ucmatose_gid_client 'resolve route failed: No such device' \
  ucmatose -f gid -P ib -s "::ffff:$eng_b" -p 18914 -c 1
ON_HOST=on_a expect_failure udaddy_gid_client 'resolve route failed: No such device' udaddy -f gid -s "::ffff:$eng_b" -c 1

# A connect to a port nobody listens on is REJECTED (invalid service ID) by
# the other engine at once, never a hang.
start=$SECONDS
if on_a timeout 10 "$UROCE_BIN" run -- rping -c -a "$eng_b" -p 18999 -C 1 >"$UROCE_LOG_DIR/nolistener.log" 2>&1; then
  bad "rping to no listener succeeded"
elif grep -q 'RDMA_CM_EVENT_REJECTED, error 8' "$UROCE_LOG_DIR/nolistener.log" && ((SECONDS - start < 5)); then
  ok "no listener on the other host: REJECTED (error 8)"
else
  cat "$UROCE_LOG_DIR/nolistener.log"
  bad "no listener"
fi

# An address nobody answers ARP for: ADDR_ERROR after a second of asking.
start=$SECONDS
if on_a timeout 10 "$UROCE_BIN" run -- rping -c -a "${net%.0}.99" -p 18998 -C 1 >"$UROCE_LOG_DIR/noneighbour.log" 2>&1; then
  bad "rping to an absent host succeeded"
elif grep -q 'RDMA_CM_EVENT_ADDR_ERROR, error -113' "$UROCE_LOG_DIR/noneighbour.log" && ((SECONDS - start < 6)); then
  ok "absent host: ADDR_ERROR (EHOSTUNREACH) in $((SECONDS - start)) s"
else
  cat "$UROCE_LOG_DIR/noneighbour.log"
  bad "absent host"
fi

# A client killed with its connection up: the server on the other host sees
# DISCONNECTED (the engine's DREQ) and ends on its own. The client is
# stopped first, so the server is idle, waiting for its next SEND, when the
# client goes (else the server's RDMA to a vanishing client may fail first,
# as between two NICs).
before=$(cm_ids_b)
on_b timeout -k 5 30 "$UROCE_BIN" run -- rping -s -a "$eng_b" -p 18905 -v >"$UROCE_LOG_DIR/killed.server.log" 2>&1 &
server_pid=$!
wait_for_listener "$before"
on_a timeout -k 5 30 "$UROCE_BIN" run -- rping -c -a "$eng_b" -p 18905 -C 1000000 -S 64 >"$UROCE_LOG_DIR/killed.client.log" 2>&1 &
client_pid=$!
for ((i = 0; i < 300; i++)); do  # until the server's engine holds the connection's id too
  (($(cm_ids_b) > before + 1)) && break
  sleep 0.1
done
sleep 1
# The client is this script's own rping, named by its unique arguments.
client_rping=$(pgrep -f -- "-a $eng_b -p 18905 -C 1000000" || true)
if [[ -n $client_rping ]]; then
  kill -STOP $client_rping
  sleep 1
  kill -KILL $client_rping
fi
wait "$client_pid" 2>/dev/null || true
server_rc=0
wait "$server_pid" || server_rc=$?
if ((server_rc != 124)) && grep -q 'DISCONNECT EVENT' "$UROCE_LOG_DIR/killed.server.log"; then
  ok "killed client: the server on the other host saw DISCONNECTED and ended"
else
  grep -v 'ping data' "$UROCE_LOG_DIR/killed.server.log" | tail -n 5
  bad "killed client: server rc $server_rc"
fi

# MRA (IBA 12.6.6): both engines again, their CM giving up on an unanswered
# REQ or REP after 4.8 s (--cm-response-timeout 16: each wait 2 * 2^18 +
# 2^16 times 4.096 us, 2.4 s; --cm-retries 1: sent twice). A server that
# accepts 8 s after the request, and a client that establishes 8 s after the
# REP, still connect: the slow side's CM sends an MRA (service timeout 24,
# 69 s) at half the peer's response timeout, which holds the peer's retries
# back. Without it each connect would end UNREACHABLE at 4.8 s.
mra_count() {  # HOST sent|received: the engine's MRA counter
  local dir=run_$1
  UROCE_RUNTIME_DIR=${!dir} "$UROCE_BIN" status 2>/dev/null |
    sed -n "s/.*mras sent \([0-9]*\) received \([0-9]*\).*/\1 \2/p" |
    awk -v w="$2" '{print (w == "sent" ? $1 : $2)}'
}
# LABEL SERVER_DELAY_MS CLIENT_DELAY_MS PORT: rdmacm_events' slow ends.
mra_case() {
  local label=$1 sdelay=$2 cdelay=$3 port=$4 before spid crc=0 src=0
  local slog="$UROCE_LOG_DIR/$label.server.log" clog="$UROCE_LOG_DIR/$label.client.log"
  before=$(cm_ids_b)
  on_b timeout -k 5 60 "$UROCE_BIN" run -- "$events" slow-server "$eng_b" "$port" "$sdelay" >"$slog" 2>&1 &
  spid=$!
  wait_for_listener "$before"
  on_a timeout -k 5 60 "$UROCE_BIN" run -- "$events" slow-client "$eng_b" "$port" "$cdelay" >"$clog" 2>&1 || crc=$?
  wait "$spid" || src=$?
  local took
  took=$(sed -n 's/^client: connected \([0-9]*\) ms.*/\1/p' "$clog")
  if ((crc == 0 && src == 0)) && [[ -n $took ]] && ((took >= 8000)); then
    ok "$label: connected after $took ms (the CM gives up after 4.8 s)"
  else
    bad "$label (client $crc, server $src)"
    cat "$clog" "$slog"
  fi
}
if [[ -n $events ]]; then
  UROCE_RUNTIME_DIR=$run_a "$UROCE_BIN" stop --name hostA >/dev/null
  UROCE_RUNTIME_DIR=$run_b "$UROCE_BIN" stop --name hostB >/dev/null
  on_a "$UROCE_BIN" start --name hostA --port "net_af_packet0,iface=$veth_a" --ip "$eng_a" --ip6 "$eng6_a" \
    --cm-response-timeout 16 --cm-retries 1
  on_b "$UROCE_BIN" start --name hostB --port "net_af_packet0,iface=$veth_b" --ip "$eng_b" --ip6 "$eng6_b" \
    --cm-response-timeout 16 --cm-retries 1
  mra_cap="$UROCE_LOG_DIR/mra.pcap"
  if command -v tshark >/dev/null; then
    sleep 1
    UROCE_RUNTIME_DIR=$run_a "$UROCE_BIN" capture --name hostA -w "$mra_cap" --count 400 --seconds 45 \
      >"$UROCE_LOG_DIR/mra_capture.log" 2>&1 &
    cap_pid=$!
    sleep 0.5
  fi
  mra_case mra_slow_accept 8000 0 18910
  (($(mra_count b sent) >= 1 && $(mra_count a received) >= 1)) ||
    bad "mra_slow_accept: hostB sent $(mra_count b sent) MRAs, hostA received $(mra_count a received)"
  mra_case mra_slow_establish 0 8000 18911
  (($(mra_count a sent) >= 1 && $(mra_count b received) >= 1)) ||
    bad "mra_slow_establish: hostA sent $(mra_count a sent) MRAs, hostB received $(mra_count b received)"
  if command -v tshark >/dev/null; then
    kill -INT "$cap_pid" 2>/dev/null || true
    wait "$cap_pid" || true
    # MRAs (attribute 0x0011) both ways, decoded as InfiniBand CM, nothing malformed.
    mras=$(tshark -r "$mra_cap" -Y "infiniband.mad.attributeid == 0x0011" 2>/dev/null | wc -l || true)
    mra_attrs=$(tshark -r "$mra_cap" -Y infiniband.mad -T fields -e infiniband.mad.attributeid 2>/dev/null | sort | uniq -c | tr -s ' ' | tr '\n' ';' || true)
    malformed=$(tshark -r "$mra_cap" -Y "_ws.malformed || _ws.expert.severity == error" 2>/dev/null | wc -l || true)
    if ((mras >= 2 && malformed == 0)); then
      ok "capture: $mras MRAs, CM MADs by attribute:$mra_attrs none malformed"
    else
      bad "capture: $mras MRAs (attributes$mra_attrs), $malformed malformed"
    fi
  fi
else
  echo "skip MRA: no rdmacm_events binary given"
fi

for h in a b; do
  dir=run_$h
  UROCE_RUNTIME_DIR=${!dir} "$UROCE_BIN" status 2>/dev/null | grep '^cm' | sed "s/^/host$h /" || true
done
if ((failures)); then
  tail -n 30 "$run_a"/*.log "$run_b"/*.log 2>/dev/null || true
  echo "rdmacm_two_hosts: $failures failed"
  exit 1
fi
echo "rdmacm_two_hosts: all passed"
