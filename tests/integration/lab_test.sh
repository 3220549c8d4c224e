#!/usr/bin/env bash
# Runs the teaching lab (docs/lab/README.md) as a student would, so the lab
# never rots: every ```sh block in order, in one shell (a block's `cd` or
# variable carries over to the next), with PATH starting at the build tree's
# bin. The ```sh setup block (install and build) is what the suite itself
# already did: it is skipped. Then it checks what each step's "Expected
# output" promises, step by step, not only that the commands exited 0.
#
# Where the lab runs: the student types the commands at the top of the uroce
# source tree, and the lab names its exercises docs/lab/exercises/...; the
# test runs them in a directory of its own whose `docs` is a symlink to the
# source tree's docs/, so the files the lab writes (outputs, captures, the
# compiled exercise) stay out of the source tree.
#
# python3: the lab's is Debian's /usr/bin/python3 with python3-pyverbs. When
# the first python3 in PATH (pyenv, a venv) cannot import pyverbs, the test
# puts /usr/bin/python3 first.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
have_engine || { echo "lab_test: uroced is not built" >&2; exit 1; }

lab="$UROCE_SRC_DIR/docs/lab/README.md"
exercises="$UROCE_SRC_DIR/docs/lab/exercises"
script="$UROCE_TEST_DIR/lab.sh"
fail() {
  echo "lab_test: $*" >&2
  exit 1
}

pybin="$UROCE_TEST_DIR/pybin"
mkdir -p "$pybin"
if ! python3 -c 'import pyverbs' 2>/dev/null; then
  /usr/bin/python3 -c 'import pyverbs' 2>/dev/null ||
    fail "python3-pyverbs is not installed (tools/install-deps.sh lab)"
  ln -s /usr/bin/python3 "$pybin/python3"
fi
for tool in gcc tshark ibv_rc_pingpong ibv_asyncwatch ib_write_bw raw_ethernet_bw rping ibstat; do
  command -v "$tool" >/dev/null || fail "$tool is missing (tools/install-deps.sh lab)"
done
((EUID == 0)) || fail "run it as root: step 11's raw packet QPs need CAP_NET_RAW"

# The script: a marker line per heading (## and ###) and per block, so the
# log can be cut into steps; the blocks' commands as they are.
{
  echo 'set -euo pipefail'
  echo "export PATH='$UROCE_BUILD_DIR/bin:$pybin':\"\$PATH\""
  awk '/^```sh setup/ {skip = 1; next}
       /^```sh$/ {inside = 1; n++; print "echo \"---- lab block " n " ----\""; next}
       /^```/ {fence = !fence; if (inside || skip) fence = 0; inside = 0; skip = 0; next}
       inside && !skip {print; next}
       !fence && /^##+ / {h = $0; sub(/^#+ /, "", h); gsub(/\047/, "", h)
                          print "echo \047==== " h "\047"}' "$lab"
} >"$script"
blocks=$(grep -c '^```sh$' "$lab")
((blocks >= 14)) || fail "only $blocks command blocks in the lab"

work="$UROCE_TEST_DIR/student"
mkdir -p "$work"
ln -s "$UROCE_SRC_DIR/docs" "$work/docs"
log="$UROCE_LOG_DIR/lab.log"
rc=0
start=$SECONDS
(cd "$work" && timeout -k 5 240 bash "$script") >"$log" 2>&1 || rc=$?
elapsed=$((SECONDS - start))
if ((rc != 0)); then
  tail -n 60 "$log"
  fail "the lab failed (exit $rc) after $elapsed s"
fi

# step PATTERN: the log of the step whose heading matches PATTERN.
step() {
  awk -v p="$1" '/^==== / {on = ($0 ~ p); next} on' "$log"
}
# expect PATTERN_OF_STEP ERE WHAT: the step's log has a line matching ERE.
expect() {
  step "$1" | grep -qE -- "$2" || {
    echo "---- log of step /$1/ ----" >&2
    step "$1" | tail -n 40 >&2
    fail "step /$1/: $3 (no line matches: $2)"
  }
}
# counter STEP NAME: the last value of counter NAME that the step printed
# (uroce stats: "  name value  # description"; grep of sysfs files:
# "/sys/.../name:value").
counter() {
  step "$1" | awk -v n="$2" '{sub(/^[ \t]+/, ""); if (/^\//) sub(/^[^ ]*\//, ""); split($0, f, /[: \t]+/)}
                             f[1] == n && f[2] ~ /^[0-9]+$/ {v = f[2]} END {print v + 0}'
}
positive() {
  local v
  v=$(counter "$1" "$2")
  ((v > 0)) || { step "$1" | tail -n 40 >&2; fail "step /$1/: $2 is $v, not > 0"; }
}

# 1. The device.
expect 'A device without hardware' '^ *uroce0[[:space:]]+[0-9a-f]{16}$' "ibv_devices lists no uroce0"
expect 'A device without hardware' 'transport:[[:space:]]+InfiniBand \(0\)' "ibv_devinfo shows no InfiniBand transport"
expect 'A device without hardware' 'link_layer:[[:space:]]+Ethernet' "ibv_devinfo shows no Ethernet link layer"
expect 'A device without hardware' 'state:[[:space:]]+PORT_ACTIVE' "the port is not active"
expect 'A device without hardware' 'GID\[ *0\]:[[:space:]]+::ffff:127\.0\.0\.1' "GID 0 is not ::ffff:127.0.0.1"
# 2. The ping-pong: both sides' addresses and numbers.
expect 'first ping-pong' 'local address: +LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:127\.0\.0\.1' "no local address line"
expect 'first ping-pong' 'remote address: +LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}' "no remote address line"
[[ $(step 'first ping-pong' | grep -cE '^8192000 bytes in [0-9.]+ seconds') -eq 2 ]] ||
  fail "step 2: not both sides reported 8192000 bytes"
[[ $(step 'first ping-pong' | grep -cE '^1000 iters in [0-9.]+ seconds = [0-9.]+ usec/iter') -eq 2 ]] ||
  fail "step 2: not both sides reported 1000 iters"
# 3. Like with like: two latency tables of 1000 iterations of 2 bytes.
expect 'WRITE or SEND' 'RDMA_Write Latency Test' "no ib_write_lat header"
expect 'WRITE or SEND' 'Send Latency Test' "no ib_send_lat header"
[[ $(step 'WRITE or SEND' | grep -cE '^ *2[[:space:]]+1000([[:space:]]+[0-9.]+){4}') -ge 2 ]] ||
  fail "step 3: not two latency rows (2 bytes, 1000 iterations)"
# 4. Counters and live rates, per QP as well.
positive 'Watch the counters' rx_packets
expect 'Watch the counters' '^  rx [0-9.]+ [kMG]pkt/s' "no port rates"
expect 'Watch the counters' '^ +[0-9]+ RC +RTS +[0-9]+ +[0-9.]+ [kMG]pkt/s' "no per-QP rate (above 1 kpkt/s) for the client's QP"
# 5. The decoded packets of a 3000-byte SEND.
for op in 'RC Send First' 'RC Send Middle' 'RC Send Last' 'RC Acknowledge'; do
  expect 'Look at the packets' "$op" "the capture shows no $op"
done
expect 'Look at the packets' 'captured [1-9][0-9]* frames' "the capture reports no frames"
# 6. Loss: faults shown and set, drops, NAKs in the counters and the
# capture (syndrome 0x60: PSN sequence error), go-back-N retransmissions.
expect 'Loss' 'uroce0: loopback: drop=0\.05' "uroce fault does not show drop=0.05"
expect 'Loss' 'uroce0: loopback: off' "uroce fault does not show off at the end"
expect 'Loss' '^200 iters in [0-9.]+ seconds' "the lossy ping-pong did not complete"
# The client ends as the server did, or (its last ACK dropped, the server's
# QP gone: the lab explains it) with retry exceeded on its last SEND.
iters=$(step 'Loss' | grep -cE '^200 iters in [0-9.]+ seconds' || true)
if ((iters < 2)) && ! step 'Loss' | grep -qE '^Failed status transport retry counter exceeded \(12\)'; then
  step 'Loss' | tail -n 40 >&2
  fail "step /Loss/: the client's ending is neither its 200 iterations nor the lost closing ACK"
fi
if step 'Loss' | grep -qE 'invalid data|[Cc]ouldn.t|Unable'; then
  fail "step /Loss/: the ping-pong reports bad data or a failure to start"
fi
positive 'Loss' fault_loopback_dropped
positive 'Loss' retransmits
positive 'Loss' nak_sent
positive 'Loss' rx_out_of_seq
expect 'Loss' '^ *[0-9]+ +0x60' "the capture shows no NAK with syndrome 0x60"
expect 'Loss' '^ *[0-9]+ +0x1f' "the capture shows no ACK (syndrome 0x1f)"
# 7. RNR: a receiver that posts late.
positive 'RNR' rnr_nak_sent
positive 'RNR' rnr_nak_received
positive 'RNR' rcvd_rnr_err
positive 'RNR' send_rnr_err
expect 'RNR' '^ *[0-9]+ +0x[23][0-9a-f]' "the capture shows no RNR NAK (syndrome 0x20-0x3f)"
expect 'RNR' '^ *1024 +1000 +[0-9.]+ +[0-9.]+' "ib_send_bw did not complete"
# 8. The port goes down mid-transfer.
expect 'port goes down' 'state:[[:space:]]+PORT_DOWN' "ibv_devinfo does not show the port down"
expect 'port goes down' 'client exit [1-9]' "the client did not fail"
expect 'port goes down' 'Failed status 12' "the client shows no retry-exceeded completion (status 12)"
expect 'port goes down' 'server exit [1-9]' "the server did not fail"
expect 'port goes down' 'event_type IBV_EVENT_PORT_ERR' "ibv_asyncwatch showed no IBV_EVENT_PORT_ERR"
expect 'port goes down' 'event_type IBV_EVENT_PORT_ACTIVE' "ibv_asyncwatch showed no IBV_EVENT_PORT_ACTIVE"
expect 'port goes down' 'state:[[:space:]]+PORT_ACTIVE' "the port did not come back"
positive 'port goes down' retry_exceeded
positive 'port goes down' tx_port_down
# 9. SRQ and XRC.
[[ $(step 'SRQ and XRC' | grep -cE '^[0-9]+ bytes in [0-9.]+ seconds') -ge 2 ]] ||
  fail "step 9: ibv_srq_pingpong reported no bandwidth on both sides"
step 'SRQ and XRC' | grep -qx 3 || fail "step 9: not three XRC processes printed success"
# 10. Tag matching.
expect 'Tag matching' 'iters: received [1-9][0-9]* tagged messages .*data checked' "uroce-tag-pingpong reported no tagged messages"
positive 'Tag matching' tm_matched
positive 'Tag matching' tm_rndv_reads
# 11. Raw Ethernet.
expect 'Raw Ethernet' '^ *1518 +[1-9][0-9]* +[0-9.]+ +[0-9.]+' "raw_ethernet_bw shows no result row"
positive 'Raw Ethernet' raw_tx_frames
positive 'Raw Ethernet' raw_rx_frames
positive 'Raw Ethernet' flow_trapped
# Exercises 1 and 2: as given they fail their check; the solutions pass.
for ex in 'Exercise 1' 'Exercise 2'; do
  expect "$ex" '^rdma_write: exit [1-9]' "the student's version as given did not fail"
  [[ $(step "$ex" | grep -c 'data checked, ok') -eq 1 ]] ||
    fail "/$ex/: not exactly one run (the solution's) printed 'data checked, ok'"
  expect "$ex" '^RDMA WRITE of 4096 bytes: data checked, ok' "the solution did not pass"
done
# 12. Done: no engine runs any more.
expect 'Done' '^status exit 3$' "uroce status did not exit 3 after uroce stop"
# The student's versions fail their own check (not a crash, not a hang),
# and the solutions pass, run here once more on an engine of the test's own.
start_engine uroce0 >/dev/null
exe="$UROCE_TEST_DIR/exe"
mkdir -p "$exe"
for v in rdma_write rdma_write_solution; do
  gcc -O2 -Wall -Werror -o "$exe/$v" "$exercises/$v.c" -libverbs || fail "$v.c does not compile"
done
check_run() { # pass|fail PATTERN CMD...: CMD exits 0 (pass) or fails its check, not by a signal or the timeout (fail), and prints PATTERN
  local want=$1 pattern=$2 out rc=0 good
  shift 2
  out=$(cd "$exe" && PATH="$pybin:$PATH" timeout 30 "$UROCE_BIN" run -- "$@" 2>&1) || rc=$?
  if [[ $want == pass ]]; then good=$((rc == 0)); else good=$((rc != 0 && rc < 124)); fi
  if ((!good)) || ! grep -qE "$pattern" <<<"$out"; then
    echo "$out" >&2
    fail "$*: exit $rc, expected to $want with /$pattern/"
  fi
}
check_run fail '^rdma_write: no completion polled' ./rdma_write
check_run pass '^RDMA WRITE of 4096 bytes: data checked, ok' ./rdma_write_solution
check_run fail '^rdma_write: no completion polled' python3 "$exercises/rdma_write.py"
check_run pass '^RDMA WRITE of 4096 bytes: data checked, ok' python3 "$exercises/rdma_write_solution.py"
stop_all_engines 2>/dev/null
echo "lab_test: all $blocks blocks ran in $elapsed s; every step showed what it promises"
