#!/usr/bin/env bash
# Debian's unmodified ibverbs-utils against a uroce engine: device listing,
# ibv_devinfo -v, and the RC/UC/UD ping-pong examples in every mode that
# matters (events, the new send API, data check), each bounded in time.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start_engine uroce0
failures=0
check() {  # NAME COMMAND...: run, fail the test on non-zero exit
  local name=$1
  shift
  if "$@"; then
    echo "ok   $name"
  else
    echo "FAIL $name"
    failures=$((failures + 1))
  fi
}

expect_output() {  # PATTERN COMMAND...: the command succeeds and prints PATTERN
  local pattern=$1 out
  shift
  out=$(timeout 20 "$@" 2>&1) || { echo "$out"; return 1; }
  grep -qE -- "$pattern" <<<"$out" || { echo "$out"; echo "missing: $pattern"; return 1; }
}

check ibv_devices expect_output 'uroce0[[:space:]]+[0-9a-f]{16}' "$UROCE_BIN" run -- ibv_devices
check "ibv_devinfo -v" expect_output 'GID\[ *0\]:.*::ffff:127\.0\.0\.1, RoCE v2' "$UROCE_BIN" run -- ibv_devinfo -v
check "ibv_devinfo -v tag matching caps" expect_output 'max_rndv_hdr_size:[[:space:]]+64' "$UROCE_BIN" run -- ibv_devinfo -v
check "ibv_devinfo link layer" expect_output 'link_layer:[[:space:]]+Ethernet' "$UROCE_BIN" run -- ibv_devinfo -d uroce0
check "ibv_devinfo port active" expect_output 'state:[[:space:]]+PORT_ACTIVE' "$UROCE_BIN" run -- ibv_devinfo -d uroce0

# The drop-in library stays light: nothing an application would not expect
# (a sanitizer build, tests/sanitize.sh, adds the sanitizers' runtimes).
provider_is_light() {
  local lib=$1 unexpected
  unexpected=$(ldd "$lib" | awk '{print $1}' |
    grep -Ev '^(linux-vdso\.so|/lib64/ld-linux|libc\.so|libm\.so|libstdc\+\+\.so|libgcc_s\.so)' |
    { if [[ -n ${UROCE_SANITIZE:-} ]]; then grep -Ev '^lib(asan|ubsan)\.so'; else cat; fi } || true)
  [[ -z "$unexpected" ]] || { echo "unexpected dependencies: $unexpected"; return 1; }
}
check "provider links only libc/libstdc++" provider_is_light "$UROCE_BUILD_DIR/provider/libibverbs.so.1"

# Several engines at once: each is its own device, listed by ibv_devices.
# uroce1 also has a device memory size of its own (uroced --max-dm-size).
start_engine uroce1 --ip 127.0.0.2 --max-dm-size 64K
check "two engines listed" expect_output 'uroce0[[:space:]]+[0-9a-f]{16}.*uroce1[[:space:]]+[0-9a-f]{16}' \
  bash -c '"$0" run -- ibv_devices | tr "\n" " "' "$UROCE_BIN"
check "second engine's GID" expect_output '::ffff:127\.0\.0\.2, RoCE v2' \
  "$UROCE_BIN" run -- ibv_devinfo -v -d uroce1
check "device memory sizes" expect_output 'uroce0 .*device memory:[[:space:]]+262144Bytes uroce1 .*device memory:[[:space:]]+65536Bytes' \
  bash -c 'for d in uroce0 uroce1; do echo "$d $("$0" run -- ibv_devinfo -v -d $d | grep "device memory" | tr -s "\t" " ")"; done | tr "\n" " "' "$UROCE_BIN"
"$UROCE_BIN" stop --name uroce1 >/dev/null

port=18600
pingpong() {  # LABEL PROGRAM ARGS...
  local label=$1 prog=$2
  shift 2
  port=$((port + 1))
  run_pair --label "$label" --listen "$port" --forbid 'invalid data|[Ff]ailed|[Cc]ouldn.t' 30 \
    "$prog" -p "$port" "$@" -- "$prog" -p "$port" "$@" localhost || return 1
  grep -qE 'iters in [0-9.]+ seconds' "$RUN_PAIR_CLIENT_LOG" || { echo "no result line"; return 1; }
}

check "rc_pingpong" pingpong rc ibv_rc_pingpong -g 0
check "rc_pingpong -e" pingpong rc-e ibv_rc_pingpong -g 0 -e
check "rc_pingpong -N" pingpong rc-N ibv_rc_pingpong -g 0 -N
check "rc_pingpong -c" pingpong rc-c ibv_rc_pingpong -g 0 -c
check "rc_pingpong -e -N -c" pingpong rc-all ibv_rc_pingpong -g 0 -e -N -c
check "rc_pingpong 64KiB -c" pingpong rc-big ibv_rc_pingpong -g 0 -s 65536 -n 200 -c
check "rc_pingpong mtu 256 -c" pingpong rc-mtu ibv_rc_pingpong -g 0 -m 256 -s 10000 -n 100 -c
check "uc_pingpong" pingpong uc ibv_uc_pingpong -g 0
check "uc_pingpong -e" pingpong uc-e ibv_uc_pingpong -g 0 -e
check "ud_pingpong" pingpong ud ibv_ud_pingpong -g 0
check "ud_pingpong -e" pingpong ud-e ibv_ud_pingpong -g 0 -e

# Loopback frames carry no checksums unless a capture or the loopback fault
# injector needs them: a capture's frames are valid (ICRC, IP checksum) and
# decode cleanly, and corrupted frames are caught by the ICRC and repaired.
if command -v tshark >/dev/null; then
  cap="$UROCE_LOG_DIR/loopback.pcap"
  "$UROCE_BIN" capture --name uroce0 -w "$cap" --count 100 --seconds 20 >/dev/null &
  cap_pid=$!
  sleep 0.3
  check "rc_pingpong captured" pingpong rc-cap ibv_rc_pingpong -g 0 -n 100
  wait "$cap_pid" || true
  check "loopback capture: ICRC and IP checksums" python3 "$(dirname "$0")/pcap_icrc.py" "$cap"
  check "loopback capture decodes cleanly" expect_output '^0$' bash -c \
    'tshark -o ip.check_checksum:TRUE -r "$0" -Y "_ws.malformed || _ws.expert.severity == error" | wc -l' "$cap"
else
  echo "skip loopback capture: tshark not installed"
fi
"$UROCE_BIN" fault --name uroce0 --port loopback corrupt=0.02 >/dev/null
# Under corruption the server may end on the closing-ACK ending (lib.sh).
pingpong_lossy() {  # LABEL ITERS PROGRAM ARGS...
  local label=$1 n=$2
  shift 2
  pingpong "$label" "$@" -n "$n" && return 0
  closing_ack_ending "$n" "$RUN_PAIR_CLIENT_LOG" "$RUN_PAIR_SERVER_LOG" &&
    echo "  (the server's closing-ACK ending: the client completed all $n iterations, data checked)"
}
check "rc_pingpong under loopback corruption" pingpong_lossy rc-corrupt 500 ibv_rc_pingpong -g 0 -c -e
"$UROCE_BIN" fault --name uroce0 --port loopback off >/dev/null
stats=$("$UROCE_BIN" stats --name uroce0)
check "corrupted loopback frames dropped" expect_output 'rx_parse_errors [1-9]' echo "$stats"

# On RoCE an address without a GRH cannot be built: like a real RoCE NIC,
# ibv_rc_pingpong without -g fails instead of running.
port=$((port + 1))
timeout 10 "$UROCE_BIN" run -- ibv_rc_pingpong -p "$port" >/dev/null 2>&1 &
no_grh_server=$!
sleep 0.3
if timeout 10 "$UROCE_BIN" run -- ibv_rc_pingpong -p "$port" localhost >/dev/null 2>&1; then
  echo "FAIL rc_pingpong without GRH unexpectedly succeeded"
  failures=$((failures + 1))
else
  echo "ok   rc_pingpong without GRH is refused"
fi
wait "$no_grh_server" || true

echo "failures: $failures"
((failures == 0))
