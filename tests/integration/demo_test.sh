#!/usr/bin/env bash
# The README's first command, tools/demo.sh, on the build tree under test: it
# must pass and leave no engine behind (issue 9, point 11: it removed its
# runtime directory before its exit trap could stop the engine).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

have_engine || { echo "demo_test: uroced is not built" >&2; exit 1; }

demo_tmp="$UROCE_TEST_DIR/demo"
mkdir -p "$demo_tmp"
demo_engines() { pgrep -f -- "uroced .*--runtime-dir .*/uroce-demo\.[^ ]*/run" | sort || true; }
before=$(demo_engines)
rc=0
TMPDIR="$demo_tmp" UROCE_BUILD_DIR="$UROCE_BUILD_DIR" \
  timeout -k 5 300 bash "$UROCE_SRC_DIR/tools/demo.sh" >"$UROCE_LOG_DIR/demo.log" 2>&1 || rc=$?
if ((rc != 0)); then
  cat "$UROCE_LOG_DIR/demo.log" >&2
  echo "demo_test: tools/demo.sh failed (exit $rc)" >&2
  exit 1
fi
grep -q "demo: ok: ibv_rc_pingpong ran over uroce" "$UROCE_LOG_DIR/demo.log" ||
  { echo "demo_test: the demo did not report success" >&2; exit 1; }

# Its engine ran with --runtime-dir .../uroce-demo.XXXXXX/run: none may be left.
left=$(comm -13 <(echo "$before") <(demo_engines) | sed '/^$/d')
if [[ -n "$left" ]]; then
  ps -o pid,args -p "$(echo $left | tr ' ' ,)" >&2 || true
  kill $left 2>/dev/null || true
  echo "demo_test: the demo left its engine running" >&2
  exit 1
fi
if compgen -G "$demo_tmp/uroce-demo.*" >/dev/null; then
  echo "demo_test: the demo left its files behind after passing" >&2
  exit 1
fi
echo "demo_test: passed, no engine and no files left"
