#!/usr/bin/env bash
# rdma_cm on one engine: the event sequences of rdmacm_events (gtest), then
# Debian's unmodified rdmacm-utils and perftest's -R (rdma_cm) mode under
# `uroce run`, over IPv4 and IPv6 loopback, and AF_IB addresses as the
# kernel takes them over RoCE (rdmacm_afib; ucmatose and udaddy -f gid).
# usage: rdmacm_test.sh RDMACM_EVENTS_BINARY [RDMACM_AFIB_BINARY]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

events=${1:?usage: $0 RDMACM_EVENTS_BINARY [RDMACM_AFIB_BINARY]}
afib=${2:-}
if ! command -v rping >/dev/null; then
  echo "SKIP: rdmacm-utils not installed"
  exit 77
fi

start_engine uroce0
failures=0

if timeout 120 "$UROCE_BIN" run -- "$events" >"$UROCE_LOG_DIR/events.log" 2>&1; then
  ok "rdmacm_events: $(grep -c '^\[       OK' "$UROCE_LOG_DIR/events.log") cases"
else
  cat "$UROCE_LOG_DIR/events.log"
  bad rdmacm_events
fi

pair() {  # LABEL SERVER... -- CLIENT...
  local label=$1 attempt
  shift
  for attempt in 1 2 3; do
    if run_pair --label "$label" --forbid 'error|[Ff]ail|invalid data' 60 "$@"; then
      ok "$label"
      return
    fi
    # perftest -R races itself (its client connects the data id right
    # after the control handshake, maybe before the server listens:
    # REJECTED 8, as with the kernel's CM); that ending alone runs again,
    # as in rdmacm_two_hosts.
    [[ $label == ib_* ]] && grep -qE 'RDMA_CM_EVENT_(REJECTED; error: 8|UNREACHABLE; error: 1)' "$RUN_PAIR_CLIENT_LOG" ||
      break
    echo "     $label: perftest's own listen race (attempt $attempt), again"
  done
  bad "$label"
}

pair rping_ipv4 rping -s -a 127.0.0.1 -p 18801 -C 10 -v -- rping -c -a 127.0.0.1 -p 18801 -C 10 -v
grep -q 'ping data: rdma-ping-9' "$RUN_PAIR_CLIENT_LOG" || bad "rping_ipv4: 10 pings"
pair rping_ipv6 rping -s -a ::1 -p 18802 -C 10 -v -- rping -c -a ::1 -p 18802 -C 10 -v
pair ucmatose ucmatose -p 18803 -c 2 -- ucmatose -p 18803 -c 2 -s 127.0.0.1
# udaddy has no port option (its -p is the port space): 7174.
pair udaddy udaddy -c 2 -- udaddy -c 2 -s 127.0.0.1
pair udaddy_ipv6 udaddy -c 2 -b ::1 -- udaddy -c 2 -s ::1
pair rdma_server_client rdma_server -p 18805 -- rdma_client -s 127.0.0.1 -p 18805
# rdma_xserver / rdma_xclient: RC, then XRC (RDMA_PS_IB, an XRC_SEND QP to
# an XRC_RECV QP and its XRC SRQ, whose number the accept's private data carries).
pair rdma_xserver_xclient rdma_xserver -p 18810 -- rdma_xclient -s 127.0.0.1 -p 18810
pair rdma_xserver_xclient_xrc rdma_xserver -c x -p 18811 -- rdma_xclient -c x -s 127.0.0.1 -p 18811
pair ib_send_bw_R ib_send_bw -R -d uroce0 -x 0 -p 18806 -n 200 -- ib_send_bw -R -d uroce0 -x 0 -p 18806 -n 200 127.0.0.1
pair ib_send_bw_R_UD ib_send_bw -R -c UD -d uroce0 -x 0 -p 18809 -n 200 -- ib_send_bw -R -c UD -d uroce0 -x 0 -p 18809 -n 200 127.0.0.1
pair ib_read_lat_R ib_read_lat -R -d uroce0 -x 0 -p 18807 -n 200 -- ib_read_lat -R -d uroce0 -x 0 -p 18807 -n 200 127.0.0.1

# AF_IB, as the kernel's rdma_cm over a RoCE port: rdmacm_afib's AF_IB
# listeners on the zero GID (its bind to the GID itself ENODEV) refuse an
# IPv4 and an IPv6 client's requests at once, REJ 28 and SIDR "reject" (2),
# and hear nothing; its AF_IB client resolves the address but not the
# route (ENODEV). Debian's ucmatose and udaddy with
# AF_IB addresses of their own making (-f gid: rdma_getaddrinfo's
# RAI_FAMILY with AF_IB hints) fail as on a kernel RoCE device: a server
# bound to a GID at rdma_bind_addr, a client at rdma_resolve_route.
if [[ -n $afib ]]; then
  pair afib_listener_ipv4 "$afib" server ::ffff:127.0.0.1 18820 -- "$afib" client 127.0.0.1 18820
  grep -q '^client: ok' "$RUN_PAIR_CLIENT_LOG" && grep -q '^server: ok' "$RUN_PAIR_SERVER_LOG" ||
    bad "afib_listener_ipv4: both ends ok"
  pair afib_listener_ipv6 "$afib" server ::1 18823 -- "$afib" client ::1 18823
  grep -q '^client: ok' "$RUN_PAIR_CLIENT_LOG" && grep -q '^server: ok' "$RUN_PAIR_SERVER_LOG" ||
    bad "afib_listener_ipv6: both ends ok"
  if timeout 30 "$UROCE_BIN" run -- "$afib" ibclient ::ffff:127.0.0.1 18820 >"$UROCE_LOG_DIR/afib_ibclient.log" 2>&1 &&
     grep -q '^ibclient: ok' "$UROCE_LOG_DIR/afib_ibclient.log"; then
    ok "afib_ibclient: route ENODEV, connect EINVAL"
  else
    cat "$UROCE_LOG_DIR/afib_ibclient.log"
    bad afib_ibclient
  fi
fi
expect_failure ucmatose_gid_server 'bind address failed: No such device' \
  ucmatose -f gid -P ib -b ::ffff:127.0.0.1 -p 18822 -c 1
expect_failure ucmatose_gid_client 'resolve route failed: No such device' \
  ucmatose -f gid -P ib -s ::ffff:127.0.0.1 -p 18822 -c 1
expect_failure udaddy_gid_client 'resolve route failed: No such device' udaddy -f gid -s ::ffff:127.0.0.1 -c 1

# mckey: UD multicast through rdma_join_multicast (lib.sh's mckey_pair).
for args in "mckey_ipv4 239.1.2.3 127.0.0.1 127.0.0.1" "mckey_ipv6 ff0e::1:2:3 ::1 ::1"; do
  # shellcheck disable=SC2086
  if mckey_pair $args; then ok "${args%% *}"; else bad "${args%% *}"; fi
done

# cmtime: 50 connections set up and torn down at once (its server serves
# until it is stopped).
timeout 60 "$UROCE_BIN" run -- cmtime -p 18808 -c 50 >"$UROCE_LOG_DIR/cmtime.server.log" 2>&1 &
cmtime_server=$!
sleep 0.5
if timeout 60 "$UROCE_BIN" run -- cmtime -s 127.0.0.1 -p 18808 -c 50 >"$UROCE_LOG_DIR/cmtime.client.log" 2>&1 &&
   grep -q '^connect ' "$UROCE_LOG_DIR/cmtime.client.log"; then
  ok "cmtime: $(grep '^connect ' "$UROCE_LOG_DIR/cmtime.client.log" | tr -s ' ')"
else
  cat "$UROCE_LOG_DIR/cmtime.client.log" "$UROCE_LOG_DIR/cmtime.server.log"
  bad cmtime
fi
kill "$cmtime_server" 2>/dev/null || true
wait "$cmtime_server" 2>/dev/null || true

# A connect to a port nobody listens on is REJECTED at once, never a hang.
start=$SECONDS
if timeout 10 "$UROCE_BIN" run -- rping -c -a 127.0.0.1 -p 18899 -C 1 >"$UROCE_LOG_DIR/nolistener.log" 2>&1; then
  bad "rping to no listener succeeded"
elif grep -q 'RDMA_CM_EVENT_REJECTED, error 8' "$UROCE_LOG_DIR/nolistener.log" && ((SECONDS - start < 5)); then
  ok "no listener: REJECTED (error 8)"
else
  cat "$UROCE_LOG_DIR/nolistener.log"
  bad "no listener"
fi

# rsockets are not served: rstream says so and stops.
if timeout 10 "$UROCE_BIN" run -- rstream -s 127.0.0.1 -p 18898 >"$UROCE_LOG_DIR/rstream.log" 2>&1; then
  bad "rstream succeeded"
elif grep -q 'Function not implemented' "$UROCE_LOG_DIR/rstream.log"; then
  ok "rstream: ENOSYS"
else
  cat "$UROCE_LOG_DIR/rstream.log"
  bad "rstream"
fi

# Nothing is left in the engine's CM once its clients are gone.
if grep -q '^cm: ids 0, events dropped 0$' <<<"$(uroce status)" &&
   uroce status --json | python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(0 if all(e["report"]["cm"]["ids"]==0 and e["report"]["cm"]["events_dropped"]==0 for e in d["engines"]) else 1)'; then
  ok "no CM ids left"
else
  uroce status
  bad "CM ids left behind"
fi

# An engine answers for its --ip address too (GID 0 is that address), and
# an id goes to the engine of its address: uroce0, the first device, does
# not own 10.77.0.1 (its bind there would fail with EADDRNOTAVAIL).
start_engine uroce1 --ip 10.77.0.1
pair rping_second_engine_ip rping -s -a 10.77.0.1 -p 18810 -C 5 -v -- rping -c -a 10.77.0.1 -p 18810 -C 5 -v

if ((failures)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "all passed"
