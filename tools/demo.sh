#!/usr/bin/env bash
# The demo: builds uroce, starts an engine (its default port, the in-engine
# loopback), runs Debian's unmodified ibv_rc_pingpong server and client
# through it, prints both outputs and stops the engine. Everything is bounded
# by timeouts; the exit status is the client's.
#
# UROCE_BUILD_DIR (default: build) and UROCE_JOBS (default: 2) may be set.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tools/install-deps.sh  # a fresh Debian 12 machine: the packages first

build_dir="${UROCE_BUILD_DIR:-build}"
limit=60  # seconds for each side of the ping-pong

cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build_dir" -j"${UROCE_JOBS:-2}"
uroce="$(cd "$build_dir" && pwd)/bin/uroce"

if ! command -v ibv_rc_pingpong >/dev/null; then
  echo "demo: ibv_rc_pingpong not found (apt-get install ibverbs-utils)" >&2
  exit 1
fi

# A private runtime directory: the demo neither sees nor disturbs other engines.
work="$(mktemp -d "${TMPDIR:-/tmp}/uroce-demo.XXXXXX")"
export UROCE_RUNTIME_DIR="$work/run"
server_pid=""
passed=0
# The engine stops first: its runtime directory (pid file, socket) is what
# `uroce stop` finds it by, so the files go only after it is gone.
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  if [[ -n "$server_pid" ]]; then kill "$server_pid" 2>/dev/null || true; fi
  timeout 30 "$uroce" stop --all >/dev/null 2>&1 || true
  if ((passed)); then rm -rf "$work"; fi
}
trap cleanup EXIT

echo
echo "demo: uroce start"
timeout 30 "$uroce" start --name uroce0

echo "demo: server: uroce run -- ibv_rc_pingpong -g 0"
timeout -k 5 "$limit" "$uroce" run -- ibv_rc_pingpong -g 0 \
  </dev/null >"$work/server.log" 2>&1 &
server_pid=$!
sleep 0.5

# ibv_rc_pingpong's client tries to connect once: retry while the server is
# still setting up.
echo "demo: client: uroce run -- ibv_rc_pingpong -g 0 localhost"
client_rc=0
for _ in 1 2 3 4 5; do
  client_rc=0
  timeout -k 5 "$limit" "$uroce" run -- ibv_rc_pingpong -g 0 localhost \
    </dev/null >"$work/client.log" 2>&1 || client_rc=$?
  if ((client_rc == 0)) || ! grep -q "Couldn't connect" "$work/client.log"; then
    break
  fi
  sleep 1
done

if ((client_rc != 0)); then
  sleep 2  # let the server report, then stop it
  kill "$server_pid" 2>/dev/null || true
fi
server_rc=0
wait "$server_pid" || server_rc=$?
server_pid=""

echo "---- server ----"
cat "$work/server.log"
echo "---- client ----"
cat "$work/client.log"
echo "----"
if ((client_rc == 0 && server_rc == 0)); then
  echo "demo: ok: ibv_rc_pingpong ran over uroce"
  passed=1
else
  echo "demo: FAILED (client exit $client_rc, server exit $server_rc); engine log:"
  tail -n 30 "$UROCE_RUNTIME_DIR"/*.log 2>/dev/null || true
  echo "demo: files kept in $work"
fi
exit "$client_rc"
