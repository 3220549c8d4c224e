# shellcheck shell=bash
# Helpers for the UCX and Open MPI tests (ucx_*_test.sh, mpi_test.sh), on top
# of lib.sh (source that first).
#
#   need_commands CMD...            exit 77 (skip) unless every CMD is installed
#   perftest_pair LABEL [--env VAR=VALUE]... -- CLIENT_ARGS...
#       one ucx_perftest server and client under `uroce run`, through the
#       default engine; fails unless the client prints its "Final:" line.
#       The client's output is kept in $PERFTEST_CLIENT_LOG.
#   UCX_AS=(CMD...)                 prefix for both sides' `uroce run`
#                                   (e.g. setpriv to another user); default none
#   expect_transport LOG TL [DEVICE...]
#                                   UCP's endpoints (UCX_LOG_LEVEL=info) use
#                                   TL on each DEVICE (default uroce0:1) and
#                                   nothing but rc_verbs/ud_verbs on them

need_commands() {
  local c
  for c in "$@"; do
    if ! command -v "$c" >/dev/null; then
      echo "$(basename "$0"): $c is not installed (tools/install-deps.sh installs it): skipped" >&2
      exit 77
    fi
  done
}

# UCX's TCP bootstrap port for the next pair: distinct per run and per pair,
# so parallel tests and a port still in TIME_WAIT do not collide.
_ucx_next_port=$((20000 + ($$ % 20000)))

# Waits until something listens on TCP PORT (up to 20 s) or PID is gone.
# (ucx_perftest's "Waiting for connection" sits in its stdout buffer.)
_wait_for_listener() {
  local port=$1 pid=$2 i
  for ((i = 0; i < 200; i++)); do
    [[ -n "$(ss -Hltn "sport = :$port" 2>/dev/null)" ]] && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

UCX_AS=()

perftest_pair() {
  local label=$1
  shift
  local -a envs=()
  while (($#)) && [[ $1 != -- ]]; do
    [[ $1 == --env ]] && envs+=("$2") && shift 2 && continue
    echo "perftest_pair: unknown option $1" >&2
    return 2
  done
  shift
  local port=$((_ucx_next_port++))
  local server_log="$UROCE_LOG_DIR/$label.server.log"
  PERFTEST_CLIENT_LOG="$UROCE_LOG_DIR/$label.client.log"
  env "${envs[@]}" timeout -k 5 60 "${UCX_AS[@]}" "$UROCE_BIN" run -- ucx_perftest -p "$port" \
    </dev/null >"$server_log" 2>&1 &
  local server_pid=$! client_rc=0 server_rc=0
  if ! _wait_for_listener "$port" "$server_pid"; then
    echo "perftest_pair $label: the server did not start" >&2
    cat "$server_log" >&2
    kill "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
    return 1
  fi
  env "${envs[@]}" timeout -k 5 60 "${UCX_AS[@]}" "$UROCE_BIN" run -- ucx_perftest 127.0.0.1 -p "$port" "$@" \
    </dev/null >"$PERFTEST_CLIENT_LOG" 2>&1 || client_rc=$?
  ((client_rc == 0)) || kill "$server_pid" 2>/dev/null
  wait "$server_pid" || server_rc=$?
  if ((client_rc != 0 || server_rc != 0)) || ! grep -q '^Final:' "$PERFTEST_CLIENT_LOG"; then
    {
      echo "perftest_pair $label: FAILED (client exit $client_rc, server exit $server_rc): ucx_perftest $*"
      echo "---- server ----"
      tail -n 40 "$server_log"
      echo "---- client ----"
      tail -n 40 "$PERFTEST_CLIENT_LOG"
    } >&2
    dump_engine_logs
    return 1
  fi
  echo "perftest_pair $label: $(grep '^Final:' "$PERFTEST_CLIENT_LOG" | tr -s ' ')" >&2
}

# UCP logs, at UCX_LOG_LEVEL=info, the transports of each endpoint
# configuration: "ep_cfg[0]: tag(rc_verbs/uroce0:1)". Every lane must be
# rc_verbs or ud_verbs on one of DEVICES (default uroce0:1; not self, shm or
# tcp), and TL must be used on each of DEVICES.
expect_transport() {
  local log=$1 tl=$2 lanes dev
  shift 2
  local -a devices=("$@")
  ((${#devices[@]})) || devices=(uroce0:1)
  lanes=$(grep -oE 'ep_cfg\[[0-9]+\]: .*' "$log" | grep -oE '[a-z_0-9]+/[A-Za-z_0-9:.]+' | sort -u)
  if [[ -z "$lanes" ]]; then
    echo "expect_transport: $log names no endpoint transports" >&2
    return 1
  fi
  local allowed
  allowed="^(rc_verbs|ud_verbs|rc_mlx5|ud_mlx5|dc_mlx5)/($(IFS='|'; echo "${devices[*]}"))\$"
  if grep -qvE "$allowed" <<<"$lanes"; then
    echo "expect_transport: $log uses a transport other than rc/ud verbs, rc/ud/dc mlx5 on ${devices[*]}: $(tr '\n' ' ' <<<"$lanes")" >&2
    return 1
  fi
  for dev in "${devices[@]}"; do
    if ! grep -qx "$tl/$dev" <<<"$lanes"; then
      echo "expect_transport: $log does not use $tl/$dev: $(tr '\n' ' ' <<<"$lanes")" >&2
      return 1
    fi
  done
}
