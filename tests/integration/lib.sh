# shellcheck shell=bash
# Helpers for integration tests. Source it from a test script:
#
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#
# It gives the test a private runtime directory (UROCE_RUNTIME_DIR, exported),
# stops every engine started there when the script exits (also if the script
# is killed: a watchdog stops them once this shell is gone), and keeps the
# test's files on failure. Everything it runs is bounded by `timeout`.
#
# Environment:
#   UROCE_BUILD_DIR   build tree (ctest sets it); default <repo>/build
#   UROCE_TEST_TMP    where the private directory is made; default /tmp
#                     (kept short: socket paths are limited to 107 bytes)
#   UROCE_KEEP_FILES  set to keep the private directory after a passing run
#
# Functions:
#   start_engine NAME [ARGS...]     uroce start --name NAME ARGS...
#   stop_all_engines                uroce stop --all
#   uroce ARGS...                   the uroce command of the build tree
#   uroce_run CMD [ARGS...]         uroce run -- CMD ARGS...
#   run_pair [OPTIONS] TIMEOUT SERVER_CMD... -- CLIENT_CMD...
#   have_engine                     true if uroced is built
#   add_cleanup 'SHELL CODE'        run at exit, before the engines stop

if [[ -n "${_UROCE_LIB_SH:-}" ]]; then
  return 0
fi
_UROCE_LIB_SH=1

UROCE_SRC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if ! UROCE_BUILD_DIR="$(cd "${UROCE_BUILD_DIR:-$UROCE_SRC_DIR/build}" 2>/dev/null && pwd)"; then
  echo "lib.sh: build directory ${UROCE_BUILD_DIR:-$UROCE_SRC_DIR/build} not found" >&2
  exit 1
fi
export UROCE_BUILD_DIR
UROCE_BIN="$UROCE_BUILD_DIR/bin/uroce"
UROCE_ENGINE_BIN="$UROCE_BUILD_DIR/bin/uroced"
if [[ ! -x "$UROCE_BIN" ]]; then
  echo "lib.sh: $UROCE_BIN is not built" >&2
  exit 1
fi

# Seconds that the engine commands below may take at most.
UROCE_CMD_TIMEOUT=30

# Resident memory an ASan-built engine (tests/sanitize.sh) holds beyond a
# plain one: freed memory waits in ASan's quarantine (256 MiB at most) before
# reuse, so its RSS grows with every free. Tests that bound an engine's RSS
# growth add it; leaks there are LeakSanitizer's to report when the engine stops.
UROCE_ASAN_QUARANTINE_KIB=0
[[ ${UROCE_SANITIZE:-} != *address* ]] || UROCE_ASAN_QUARANTINE_KIB=262144

UROCE_TEST_DIR="$(mktemp -d "${UROCE_TEST_TMP:-/tmp}/uroce-test.XXXXXX")"
export UROCE_RUNTIME_DIR="$UROCE_TEST_DIR/run"
UROCE_LOG_DIR="$UROCE_TEST_DIR/logs"
mkdir -p "$UROCE_RUNTIME_DIR" "$UROCE_LOG_DIR"
chmod 700 "$UROCE_TEST_DIR" "$UROCE_RUNTIME_DIR"

uroce() {
  "$UROCE_BIN" "$@"
}

uroce_run() {
  "$UROCE_BIN" run -- "$@"
}

have_engine() {
  [[ -x "$UROCE_ENGINE_BIN" ]]
}

start_engine() {
  if (($# < 1)); then
    echo "usage: start_engine NAME [ARGS...]" >&2
    return 2
  fi
  local name=$1
  shift
  local rc=0
  timeout -k 5 "$UROCE_CMD_TIMEOUT" "$UROCE_BIN" start --name "$name" "$@" || rc=$?
  if ((rc != 0)); then
    echo "start_engine $name: uroce start failed (exit $rc)" >&2
  fi
  return "$rc"
}

stop_all_engines() {
  timeout -k 5 "$UROCE_CMD_TIMEOUT" "$UROCE_BIN" stop --all >&2 || true
}

_uroce_cleanups=()
add_cleanup() {
  _uroce_cleanups+=("$1")
}

# Prints the tail of every engine log of this test to stderr.
dump_engine_logs() {
  local log
  for log in "$UROCE_RUNTIME_DIR"/*.log; do
    [[ -e "$log" ]] || continue
    echo "---- engine log $log (last 50 lines) ----" >&2
    tail -n 50 "$log" >&2
  done
}

# dump_engine_counters [PREFIX...]: every running engine's counters that are
# not zero (`uroce stats`), to stderr: where a failed run's frames went (sent,
# dropped and why, retransmitted) while the engine still has them. PREFIX
# (run_pair's --as function, or `ip netns exec NS`) runs it where they are.
dump_engine_counters() {
  echo "---- engine counters not zero (uroce stats) ----" >&2
  "$@" timeout -k 2 10 "$UROCE_BIN" stats 2>&1 | grep -vE '^ +[a-z_0-9]+ 0 ' >&2 || true
}

_uroce_on_exit() {
  local rc=$?
  set +e
  local i
  for ((i = ${#_uroce_cleanups[@]} - 1; i >= 0; i--)); do
    eval "${_uroce_cleanups[i]}"
  done
  stop_all_engines
  kill "$_uroce_watchdog" 2>/dev/null
  wait "$_uroce_watchdog" 2>/dev/null
  if ((rc != 0)); then
    dump_engine_logs
    echo "test files kept in $UROCE_TEST_DIR" >&2
  elif [[ -n "${UROCE_KEEP_FILES:-}" ]]; then
    echo "test files kept in $UROCE_TEST_DIR" >&2
  else
    rm -rf "$UROCE_TEST_DIR"
  fi
  exit "$rc"
}
trap _uroce_on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Stops this test's engines if the test shell dies without running its EXIT
# trap (SIGKILL from a test runner's timeout). Its output goes nowhere, so it
# holds no pipe of the test runner open.
_uroce_test_shell=$$
(
  trap - EXIT INT TERM
  while kill -0 "$_uroce_test_shell" 2>/dev/null; do
    sleep 1
  done
  timeout -k 5 "$UROCE_CMD_TIMEOUT" "$UROCE_BIN" stop --all
) </dev/null >/dev/null 2>&1 &
_uroce_watchdog=$!

# Describes an exit status from `timeout`.
_uroce_describe_rc() {
  local rc=$1 limit=$2
  case $rc in
    124) echo "timed out after ${limit} s" ;;
    137) echo "killed after ${limit} s (did not stop on SIGTERM)" ;;
    *) echo "exit $rc" ;;
  esac
}

# A script's checks: ok and bad print a line each ("ok   ..." / "FAIL ...");
# bad counts in $failures, which the script reports at its end.
failures=0
ok() { echo "ok   $1"; }
bad() {
  echo "FAIL $1"
  failures=$((failures + 1))
}

# expect_failure LABEL PATTERN CMD...: CMD under `uroce run` (on the host
# ${ON_HOST:-}, a function such as on_a, when set) exits non-zero within
# 30 s, not by the timeout (124), and prints PATTERN; the test's ok/bad
# tell which.
expect_failure() {
  local label=$1 pattern=$2 rc=0
  shift 2
  ${ON_HOST:-} timeout 30 "$UROCE_BIN" run -- "$@" </dev/null >"$UROCE_LOG_DIR/$label.log" 2>&1 || rc=$?
  if ((rc != 0 && rc != 124)) && grep -q "$pattern" "$UROCE_LOG_DIR/$label.log"; then
    ok "$label: exit $rc, $(grep -m1 "$pattern" "$UROCE_LOG_DIR/$label.log")"
  else
    cat "$UROCE_LOG_DIR/$label.log"
    bad "$label: exit $rc"
  fi
}

# run_pair [--forbid ERE]... [--delay SECONDS] [--listen [NETNS:]PORT] [--label NAME] \
#          [--as FUNCTION] TIMEOUT SERVER_CMD... -- CLIENT_CMD...
#
# --as FUNCTION runs both sides through a shell function of the caller that
# execs its arguments as another user or in another environment (as_nobody).
#
# Runs SERVER_CMD in the background under `uroce run`, waits DELAY seconds
# (default 0.5; retrying the connection is the client's job), then runs
# CLIENT_CMD under `uroce run`. With --listen it waits instead until the
# server listens on TCP port PORT (in network namespace NETNS), up to 30 s:
# perftest and the ibverbs-utils ping-pongs connect once, and a server that
# takes more than DELAY to start on a loaded machine failed the pair with
# "Couldn't connect". Each side is limited to TIMEOUT seconds. If the
# client fails, the server gets 5 more seconds before it is stopped, since it
# may be waiting for a client that is gone.
#
# Fails (returns 1) if either side exits non-zero or if either output matches
# a --forbid extended regular expression (e.g. --forbid 'invalid data'); then
# both outputs and the engine logs are printed to stderr. The outputs are kept
# in $RUN_PAIR_SERVER_LOG and $RUN_PAIR_CLIENT_LOG for further checks.
_uroce_pair_count=0
# Waits up to 30 s while PID lives until TCP port PORT listens in NETNS (or
# here): [NETNS:]PORT PID.
_uroce_wait_listen() {
  local ns="" port=$1 pid=$2 i
  if [[ $port == *:* ]]; then
    ns=${port%%:*}
    port=${port##*:}
  fi
  local -a ss=(ss -Hltn "sport = :$port")
  [[ -n $ns ]] && ss=(ip netns exec "$ns" "${ss[@]}")
  for ((i = 0; i < 300; i++)); do
    [[ -n $("${ss[@]}" 2>/dev/null) ]] && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
run_pair() {
  local -a forbid=() server=() client=()
  local delay=0.5 label="" as="" listen=""
  while (($#)); do
    case $1 in
      --forbid) forbid+=("$2"); shift 2 ;;
      --delay) delay=$2; shift 2 ;;
      --listen) listen=$2; shift 2 ;;
      --label) label=$2; shift 2 ;;
      --as) as=$2; shift 2 ;;
      *) break ;;
    esac
  done
  local limit=${1:-}
  (($#)) && shift
  while (($#)) && [[ $1 != -- ]]; do
    server+=("$1")
    shift
  done
  if [[ ! "$limit" =~ ^[0-9]+$ || ${1:-} != -- || ${#server[@]} -eq 0 || $# -lt 2 ]]; then
    echo "usage: run_pair [--forbid ERE]... [--delay S] [--label NAME] TIMEOUT SERVER... -- CLIENT..." >&2
    return 2
  fi
  shift
  client=("$@")

  _uroce_pair_count=$((_uroce_pair_count + 1))
  label=${label:-pair$_uroce_pair_count}
  RUN_PAIR_SERVER_LOG="$UROCE_LOG_DIR/$label.server.log"
  RUN_PAIR_CLIENT_LOG="$UROCE_LOG_DIR/$label.client.log"

  $as timeout -k 5 "$limit" "$UROCE_BIN" run ${RUN_PAIR_RUN_FLAGS:-} -- "${server[@]}" \
    </dev/null >"$RUN_PAIR_SERVER_LOG" 2>&1 &
  local server_pid=$!
  if [[ -n $listen ]]; then
    _uroce_wait_listen "$listen" "$server_pid" || true  # a server that never listens fails below
  else
    sleep "$delay"
  fi

  local client_rc=0 server_rc=0
  $as timeout -k 5 "$limit" "$UROCE_BIN" run ${RUN_PAIR_RUN_FLAGS:-} -- "${client[@]}" \
    </dev/null >"$RUN_PAIR_CLIENT_LOG" 2>&1 || client_rc=$?

  if ((client_rc != 0)); then
    local waited=0
    while kill -0 "$server_pid" 2>/dev/null && ((waited < 50)); do
      sleep 0.1
      waited=$((waited + 1))
    done
    kill -TERM "$server_pid" 2>/dev/null || true
  fi
  wait "$server_pid" || server_rc=$?

  local -a problems=()
  ((server_rc == 0)) || problems+=("server: $(_uroce_describe_rc "$server_rc" "$limit")")
  ((client_rc == 0)) || problems+=("client: $(_uroce_describe_rc "$client_rc" "$limit")")
  local pattern side log
  for pattern in "${forbid[@]}"; do
    for side in server client; do
      log=$RUN_PAIR_SERVER_LOG
      [[ $side == client ]] && log=$RUN_PAIR_CLIENT_LOG
      if grep -qE -- "$pattern" "$log"; then
        problems+=("$side output matches forbidden pattern '$pattern'")
      fi
    done
  done

  if ((${#problems[@]} == 0)); then
    echo "run_pair $label: ok" >&2
    return 0
  fi
  {
    echo "run_pair $label: FAILED"
    printf '  %s\n' "${problems[@]}"
    echo "---- server: ${server[*]} ($RUN_PAIR_SERVER_LOG) ----"
    tail -n 100 "$RUN_PAIR_SERVER_LOG"
    echo "---- client: ${client[*]} ($RUN_PAIR_CLIENT_LOG) ----"
    tail -n 100 "$RUN_PAIR_CLIENT_LOG"
  } >&2
  dump_engine_counters $as
  dump_engine_logs
  return 1
}

# make_two_hosts TAG OCTET
#
# Two hosts as network namespaces joined by a veth pair (MTU 9000), removed
# at exit. Sets ns_a ns_b (namespaces), veth_a veth_b (interfaces), net
# (10.OCTET.X.0, X from the shell's pid), kern_a kern_b (the kernel's
# addresses: TCP side channels) and eng_a eng_b (addresses for engines,
# RoCE only). Returns 77 when network namespaces cannot be made here.
make_two_hosts() {
  local tag=$1 octet=$2 id=$$ side ns_var veth_var kern_var
  if ! ip netns add "uroce-probe-$id" 2>/dev/null; then
    return 77
  fi
  ip netns del "uroce-probe-$id"
  ns_a="$tag-a-$id" ns_b="$tag-b-$id"
  veth_a="${tag:0:3}a$id" veth_b="${tag:0:3}b$id"
  net=10.$octet.$((id % 200)).0
  kern_a=${net%.0}.1 kern_b=${net%.0}.2
  eng_a=${net%.0}.11 eng_b=${net%.0}.12
  add_cleanup "ip netns del $ns_a 2>/dev/null; ip netns del $ns_b 2>/dev/null"
  ip netns add "$ns_a" || return 1
  ip netns add "$ns_b" || return 1
  ip link add "$veth_a" type veth peer name "$veth_b" || return 1
  ip link set "$veth_a" netns "$ns_a" || return 1
  ip link set "$veth_b" netns "$ns_b" || return 1
  for side in a b; do
    ns_var=ns_$side veth_var=veth_$side kern_var=kern_$side
    ip -n "${!ns_var}" link set lo up || return 1
    ip -n "${!ns_var}" link set "${!veth_var}" mtu 9000 up || return 1
    ip -n "${!ns_var}" addr add "${!kern_var}/24" dev "${!veth_var}" || return 1
  done
}

# make_two_hosts for a test script: SKIP (exit 77) where namespaces cannot
# be made, fail on any other error.
two_hosts_or_skip() {  # TAG OCTET
  local rc=0
  make_two_hosts "$1" "$2" || rc=$?
  if ((rc == 77)); then
    echo "SKIP: cannot create network namespaces here"
    exit 77
  fi
  ((rc == 0)) || exit 1
}

# The ping-pongs (ibv_rc_pingpong, ibv_srq_pingpong) have no closing
# handshake: a side that has all its completions destroys its QP at once, and
# if the ACK of the other side's last SEND was lost, that side retries into a
# QP that is gone and ends with RETRY_EXC_ERR, as between two NICs on a lossy
# link. True only for that ending: the peer completed all ITERS with its data
# checked and the failing side's only error is the retry counter.
closing_ack_ending() {  # ITERS DONE_LOG FAILED_LOG
  grep -q "^$1 iters in" "$2" &&
    grep -q 'transport retry counter exceeded' "$3" &&
    ! grep -qE 'invalid data|[Cc]ouldn.t|Unable' "$2" "$3"
}

# mckey (rdmacm-utils): UD multicast through rdma_join_multicast, 20
# datagrams from a sender to a receiver, each joined to GROUP from its own
# address, optionally in a network namespace each. The sender starts once
# the receiver has joined and posted its receives (a datagram to a group
# nobody joined yet is gone, as on a fabric).
#   mckey_pair LABEL GROUP RECEIVER_ADDR SENDER_ADDR [RECEIVER_NS SENDER_NS]
mckey_pair() {
  local label=$1 group=$2 raddr=$3 saddr=$4
  local -a rns=() sns=()
  [[ -n ${5:-} ]] && rns=(ip netns exec "$5")
  [[ -n ${6:-} ]] && sns=(ip netns exec "$6")
  local rlog="$UROCE_LOG_DIR/$label.receiver.log" slog="$UROCE_LOG_DIR/$label.sender.log"
  timeout -k 5 30 "${rns[@]}" "$UROCE_BIN" run -- mckey -m "$group" -b "$raddr" -C 20 >"$rlog" 2>&1 &
  local receiver=$! waited=0
  while ! grep -q 'joined dgid' "$rlog" && ((waited < 100)); do
    sleep 0.1
    waited=$((waited + 1))
  done
  if timeout -k 5 30 "${sns[@]}" "$UROCE_BIN" run -- mckey -m "$group" -b "$saddr" -C 20 -s >"$slog" 2>&1 &&
     wait "$receiver" && grep -q 'data transfers complete' "$rlog"; then
    return 0
  fi
  kill "$receiver" 2>/dev/null || true
  wait "$receiver" 2>/dev/null || true
  cat "$rlog" "$slog"
  return 1
}

# wait_gone PID SECONDS: true if PID exits within SECONDS; its status in $rc
# (a child of this shell: wait reaps it).
wait_gone() {
  local pid=$1 limit=$2 i
  for ((i = 0; i < limit * 10; i++)); do
    if ! kill -0 "$pid" 2>/dev/null; then
      rc=0
      wait "$pid" || rc=$?
      return 0
    fi
    sleep 0.1
  done
  return 1
}

# The one step of the composite GitHub Action ACTION_YML (action.yml), written
# to OUT as the bash GitHub runs for it (its inputs come from the environment).
action_step() {  # ACTION_YML OUT
  python3 - "$1" "$2" <<'PY'
import sys, yaml
action = yaml.safe_load(open(sys.argv[1]))
assert action["runs"]["using"] == "composite"
steps = [s for s in action["runs"]["steps"] if "run" in s]
assert len(steps) == 1 and steps[0]["shell"] == "bash"
open(sys.argv[2], "w").write(steps[0]["run"])
PY
}
