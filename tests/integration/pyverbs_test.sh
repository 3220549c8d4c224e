#!/usr/bin/env bash
# rdma-core's own conformance suite (pyverbs, Debian's python3-pyverbs) run
# against a uroce engine, as rdma-core's Documentation/testing.md runs it
# against a device: tests of features the device reports as absent skip.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

src=/usr/share/doc/rdma-core/tests
if [[ ! -f $src/run_tests.py ]] || ! /usr/bin/python3 -c 'import pyverbs' 2>/dev/null; then
  echo "SKIP: python3-pyverbs is not installed"
  exit 77
fi
tests="$UROCE_LOG_DIR/pyverbs/tests"
mkdir -p "$tests"
cp -r "$src/." "$tests/"
find "$tests" -name '*.gz' -exec gunzip -f {} +

start_engine uroce0
log="$UROCE_LOG_DIR/pyverbs.log"
rc=0
(cd "$UROCE_LOG_DIR/pyverbs" &&
  timeout 300 "$UROCE_BIN" run -- /usr/bin/python3 tests/run_tests.py --dev uroce0 -v) >"$log" 2>&1 || rc=$?
tail -n 4 "$log"
if ((rc != 0)) || ! grep -qE '^OK( |$)' "$log"; then
  grep -E '^(FAIL|ERROR):' "$log" || true
  echo "pyverbs: failed (exit $rc)"
  exit 1
fi
# Capabilities uroce has (issue 13: on-demand paging, completion timestamps,
# the real-time clock, memory windows): their tests must run, not skip as on
# a device without them.
if grep -E "skipped '(ODP is not supported|ODP is unavailable|ODP implicit is not supported|Create Extended CQ is not supported|Query device real time is not supported|Create MW is not supported|Reg MR with MW access is not supported|Create memory window of type|Memory Window allocation is not supported|Create player with rc_bind_mw is not supported)" "$log"; then
  echo "pyverbs: tests of capabilities uroce advertises skipped for a missing capability"
  exit 1
fi
ran=$(grep -oE '^Ran [0-9]+' "$log" | awk '{print $2}')
skipped=$(grep -oE 'skipped=[0-9]+' "$log" | cut -d= -f2)
echo "pyverbs: $((ran - ${skipped:-0})) passed, 0 failed, ${skipped:-0} skipped"
