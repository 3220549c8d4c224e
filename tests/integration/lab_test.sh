#!/usr/bin/env bash
# Runs every command of the teaching lab (docs/lab/README.md) in order, as a
# student would, so the lab never rots. The ```sh setup block (install and
# build) is what the suite itself already did; every other ```sh block runs.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
have_engine || { echo "lab_test: uroced is not built" >&2; exit 1; }

lab="$UROCE_SRC_DIR/docs/lab/README.md"
script="$UROCE_TEST_DIR/lab.sh"
{
  echo 'set -euo pipefail'
  echo "export PATH='$UROCE_BUILD_DIR/bin':\"\$PATH\""
  awk '/^```sh setup/ {skip = 1; next}
       /^```sh$/ {inside = 1; n++; print "echo \"---- lab block " n " ----\""; next}
       /^```/ {inside = 0; skip = 0; next}
       inside && !skip {print}' "$lab"
} >"$script"
blocks=$(grep -c '^```sh$' "$lab")
((blocks >= 8)) || { echo "lab_test: only $blocks command blocks in the lab" >&2; exit 1; }

work="$UROCE_TEST_DIR/student"
mkdir -p "$work"
rc=0
(cd "$work" && timeout -k 5 300 bash "$script") >"$UROCE_LOG_DIR/lab.log" 2>&1 || rc=$?
if ((rc != 0)); then
  tail -n 40 "$UROCE_LOG_DIR/lab.log"
  echo "lab_test: the lab failed (exit $rc)" >&2
  exit 1
fi
log="$UROCE_LOG_DIR/lab.log"
# What each step shows the student.
grep -q 'uroce0' "$log" || { echo "lab_test: step 1 shows no device" >&2; exit 1; }
grep -q 'RC Send First' "$log" || { echo "lab_test: step 5 shows no decoded RoCE packets" >&2; exit 1; }
grep -qE 'retransmits [1-9]' "$log" || { echo "lab_test: step 6 shows no retransmission" >&2; exit 1; }
grep -qE 'fault_loopback_dropped [1-9]' "$log" || { echo "lab_test: step 6 dropped nothing" >&2; exit 1; }
grep -qx 3 "$log" || { echo "lab_test: step 8: not three processes printed success" >&2; exit 1; }
grep -qE 'rx [0-9.]+ [kMG]pkt/s' "$log" || { echo "lab_test: step 4 shows no rates" >&2; exit 1; }
echo "lab_test: all $blocks blocks ran"
