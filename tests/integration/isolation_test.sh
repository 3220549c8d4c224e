#!/usr/bin/env bash
# Isolation between users (issue 14): an engine serves its owner (and root)
# only, unless `uroce start --users LIST` or `--group NAME` admits others, as
# /dev/infiniband permissions do. Run as root (CI does); the other users are
# nobody, nobody with a supplementary group, and a uid without a name, made
# with setpriv. Checks:
#   - the modes of the runtime directory, socket, log, pid file and every
#     memfd the engine and a client map (the engine's queues, the page it
#     shares, the client's registered pages): nobody else's to read;
#   - a user the engine does not admit sees no device (ibv_devices lists
#     nothing and says why on stderr) and cannot open it (ibv_devinfo fails);
#     `uroce stats` counts the refusals;
#   - --users admits the users named (ibv_rc_pingpong as nobody), no one else;
#     --group admits its members (a supplementary group is enough), no one else;
#   - an admitted user may look (status, stats) but not change the engine:
#     fault, capture, port and stop are its owner's or root's;
#   - the engine will not put its socket in a directory another user owns or
#     may write into.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if ((EUID != 0)) || ! command -v setpriv >/dev/null || ! id nobody >/dev/null 2>&1; then
  echo "isolation_test: needs root, setpriv and user nobody: skipped"
  exit 77
fi
nogroup=$(id -g nobody)
# A group nobody is not in: the members' check must see the supplementary one.
group=users
getent group "$group" >/dev/null || { echo "isolation_test: no group '$group': skipped"; exit 77; }
group_gid=$(getent group "$group" | cut -d: -f3)

# Others may reach the runtime directory through the test's directory.
chmod 711 "$UROCE_TEST_DIR"

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
as_nobody() { setpriv --reuid=nobody --regid="$nogroup" --clear-groups env HOME=/ "$@"; }
as_member() { setpriv --reuid=nobody --regid="$nogroup" --groups="$group_gid" env HOME=/ "$@"; }
as_stranger() { setpriv --reuid=12345 --regid=12345 --clear-groups env HOME=/ "$@"; }
mode_of() { stat -L -c %a "$1"; }
# The whole report is read before it is searched: a reader that stops at the
# first match would end `uroce stats` with SIGPIPE, a failure under pipefail.
counter() { uroce stats | awk -v k="$1" '$1 == k && !found { print $2; found = 1 }'; }

# expect_refused WHO: ibv_devices as WHO lists no uroce0 and says why;
# ibv_devinfo -d uroce0 fails.
expect_refused() {
  local who=$1 log="$UROCE_LOG_DIR/refused-$1.log"
  "as_$who" timeout 30 "$UROCE_BIN" run -- ibv_devices >"$log" 2>&1 || true
  if grep -v '^uroce' "$log" | grep -q uroce0; then
    cat "$log"
    fail "$who: ibv_devices lists an engine that does not admit it"
  fi
  grep -qE 'uroce: warning: .*(refuses|permission denied)' "$log" ||
    { cat "$log"; fail "$who: ibv_devices does not say why the device is missing"; }
  if "as_$who" timeout 30 "$UROCE_BIN" run -- ibv_devinfo -d uroce0 >"$log" 2>&1; then
    cat "$log"
    fail "$who: ibv_devinfo opened an engine that does not admit it"
  fi
}

expect_admitted() {
  local who=$1 log="$UROCE_LOG_DIR/admitted-$1.log"
  "as_$who" timeout 30 "$UROCE_BIN" run -- ibv_devices >"$log" 2>&1 ||
    { cat "$log"; fail "$who: ibv_devices failed"; }
  grep -q uroce0 "$log" || { cat "$log"; fail "$who: ibv_devices does not list uroce0"; }
}

# ---- 1. An engine of root's alone ------------------------------------------
start_engine uroce0 >/dev/null
pid=$(cat "$UROCE_RUNTIME_DIR/uroce0.pid")
[[ $(mode_of "$UROCE_RUNTIME_DIR") == 700 ]] || fail "runtime dir mode $(mode_of "$UROCE_RUNTIME_DIR"), not 700"
[[ $(mode_of "$UROCE_RUNTIME_DIR/uroce0.sock") == 600 ]] || fail "socket mode $(mode_of "$UROCE_RUNTIME_DIR/uroce0.sock")"
[[ $(mode_of "$UROCE_RUNTIME_DIR/uroce0.log") == 600 ]] || fail "log mode $(mode_of "$UROCE_RUNTIME_DIR/uroce0.log")"
[[ $(mode_of "$UROCE_RUNTIME_DIR/uroce0.pid") == 600 ]] || fail "pid file mode $(mode_of "$UROCE_RUNTIME_DIR/uroce0.pid")"

# Every memfd the engine and a client map (queues, the engine's page, the
# client's registered pages) is 0600, while a ping-pong runs.
"$UROCE_BIN" run -- ibv_rc_pingpong -g 0 -n 1000000 -p 18801 >"$UROCE_LOG_DIR/modes-server.log" 2>&1 &
server=$!
add_cleanup "kill $server 2>/dev/null || true"
sleep 0.5
"$UROCE_BIN" run -- ibv_rc_pingpong -g 0 -n 1000000 -p 18801 localhost >"$UROCE_LOG_DIR/modes-client.log" 2>&1 &
client=$!
add_cleanup "kill $client 2>/dev/null || true"
memfds=0
for ((i = 0; i < 50 && memfds < 4; i++)); do
  sleep 0.1
  memfds=0
  for proc in "$pid" "$client"; do
    for f in /proc/"$proc"/map_files/*; do
      target=$(readlink "$f" 2>/dev/null) || continue
      [[ $target == /memfd:* ]] || continue
      m=$(mode_of "$f" 2>/dev/null) || continue
      [[ $m == 600 ]] || fail "pid $proc maps $target with mode $m"
      memfds=$((memfds + 1))
    done
  done
done
((memfds >= 4)) || fail "found only $memfds memfd mappings to check"
kill "$client" "$server" 2>/dev/null || true
wait "$client" "$server" 2>/dev/null || true
echo "ok: modes: runtime dir 700, socket 600, log 600, pid 600, $memfds memfd mappings 600"

expect_refused nobody
echo "ok: nobody sees no device on root's own engine, and is told why"
uroce stop --name uroce0 >/dev/null

# ---- 2. --users nobody -----------------------------------------------------
start_engine uroce0 --users nobody >/dev/null
[[ $(mode_of "$UROCE_RUNTIME_DIR") == 755 ]] || fail "--users: runtime dir mode $(mode_of "$UROCE_RUNTIME_DIR")"
[[ $(mode_of "$UROCE_RUNTIME_DIR/uroce0.sock") == 666 ]] || fail "--users: socket mode"
[[ $(mode_of "$UROCE_RUNTIME_DIR/uroce0.log") == 600 ]] || fail "--users: log mode"
refused_before=$(counter clients_refused)
expect_admitted nobody
run_pair --as as_nobody --label nobody --forbid 'invalid data|[Ff]ailed|[Cc]ouldn.t' 60 \
  ibv_rc_pingpong -g 0 -n 200 -p 18802 -- ibv_rc_pingpong -g 0 -n 200 -p 18802 localhost ||
  fail "--users nobody: ibv_rc_pingpong as nobody"
expect_refused stranger
grep -q 'refuses user 12345' "$UROCE_LOG_DIR/refused-stranger.log" ||
  { cat "$UROCE_LOG_DIR/refused-stranger.log"; fail "the refusal does not name the user"; }
refused=$(counter clients_refused)
((refused > refused_before)) || fail "clients_refused did not count the refusals ($refused_before -> $refused)"
echo "ok: --users nobody admits nobody (ibv_rc_pingpong), refuses uid 12345 ($((refused - refused_before)) refusals counted)"

# An admitted user may look, but not change the engine.
# (A client of nobody's is connected: a ping-pong server waiting for its
# peer; the status command itself is not among the clients.)
as_nobody timeout 30 "$UROCE_BIN" run -- ibv_rc_pingpong -g 0 -p 18731 >"$UROCE_LOG_DIR/status-client.log" 2>&1 &
status_client=$!
_uroce_wait_listen 18731 "$status_client" || true
as_nobody timeout 30 "$UROCE_BIN" status >"$UROCE_LOG_DIR/status.log" || fail "nobody: uroce status"
kill "$status_client" 2>/dev/null; pkill -u nobody -f 'ibv_rc_pingpong -g 0 -p 18731' 2>/dev/null || true
wait "$status_client" 2>/dev/null || true
grep -q 'engine: admits its owner (root) and user nobody' "$UROCE_LOG_DIR/status.log" &&
  grep -qE 'pid [0-9]+ ibv_rc_pingpong \(nobody\)' "$UROCE_LOG_DIR/status.log" &&
  grep -q '^clients: 1$' "$UROCE_LOG_DIR/status.log" ||
  { cat "$UROCE_LOG_DIR/status.log"; fail "uroce status does not say whom the engine admits and who is connected"; }
as_nobody timeout 30 "$UROCE_BIN" stats >/dev/null || fail "nobody: uroce stats"
ops_before=$(counter engine_ops_refused)
for cmd in "fault drop=0.5" "capture -w /tmp/uroce-isolation-$$.pcap --count 1" "port down"; do
  log="$UROCE_LOG_DIR/engine-op.log"
  # shellcheck disable=SC2086
  if as_nobody timeout 30 "$UROCE_BIN" $cmd >"$log" 2>&1; then
    cat "$log"
    fail "nobody: 'uroce $cmd' succeeded on root's engine"
  fi
  grep -q 'only its owner (root) may' "$log" || { cat "$log"; fail "nobody: 'uroce $cmd': no clear refusal"; }
done
[[ ! -e /tmp/uroce-isolation-$$.pcap ]] || { rm -f "/tmp/uroce-isolation-$$.pcap"; fail "the refused capture wrote a file"; }
[[ $(counter engine_ops_refused) == $((ops_before + 3)) ]] || fail "engine_ops_refused: $(counter engine_ops_refused), not $((ops_before + 3))"
grep -qE '^  fault_loopback_' <<<"$(uroce stats)" && fail "the refused fault injection is on"
grep -q 'ACTIVE' <<<"$(uroce status)" || fail "the refused 'port down' took the port down"
log="$UROCE_LOG_DIR/stop.log"
as_nobody timeout 30 "$UROCE_BIN" stop >"$log" 2>&1 && { cat "$log"; fail "nobody stopped root's engine"; }
grep -q "only the engine's owner or root may stop it" "$log" || { cat "$log"; fail "nobody: uroce stop: no clear refusal"; }
kill -0 "$(cat "$UROCE_RUNTIME_DIR/uroce0.pid")" || fail "the engine is gone"
# Its owner may.
uroce fault drop=0.01 >/dev/null && uroce fault >/dev/null || fail "root: uroce fault"
echo "ok: nobody may run status and stats but not fault, capture, port or stop (3 refusals counted)"
uroce stop --name uroce0 >/dev/null

# ---- 3. --group ------------------------------------------------------------
start_engine uroce0 --group "$group" >/dev/null
[[ $(mode_of "$UROCE_RUNTIME_DIR/uroce0.sock") == 660 ]] || fail "--group: socket mode $(mode_of "$UROCE_RUNTIME_DIR/uroce0.sock")"
[[ $(stat -c %G "$UROCE_RUNTIME_DIR/uroce0.sock") == "$group" ]] || fail "--group: socket group $(stat -c %G "$UROCE_RUNTIME_DIR/uroce0.sock")"
expect_admitted member
expect_refused nobody
echo "ok: --group $group admits a member (supplementary group), refuses nobody"
uroce stop --name uroce0 >/dev/null

# ---- 4. Runtime directories another user could write into --------------------
for setup in "chown nobody" "chmod 1777"; do
  dir="$UROCE_TEST_DIR/bad-$RANDOM"
  mkdir -m 700 "$dir"
  $setup "$dir"
  log="$UROCE_LOG_DIR/bad-dir.log"
  if timeout 30 "$UROCE_BIN" --runtime-dir "$dir" start --name bad >"$log" 2>&1; then
    "$UROCE_BIN" --runtime-dir "$dir" stop --all >/dev/null 2>&1 || true
    fail "an engine started in a runtime dir after '$setup'"
  fi
  grep -q "will not do" "$log" || { cat "$log"; fail "'$setup' runtime dir: no clear message"; }
done
echo "ok: no engine in a runtime dir of another user, or one others may write into"
echo "isolation: passed"
