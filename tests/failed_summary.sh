#!/usr/bin/env bash
# Prints, for a ctest build directory, the tests its last run failed and the
# last lines of each one's output (from Testing/Temporary/LastTest.log).
# .ci/run calls it at the very end: a CI log is often read from its tail,
# where the sanitizer run's passing tests would otherwise hide the name of a
# test that failed half an hour earlier.
#
#   tests/failed_summary.sh BUILD_DIR [LABEL] [LINES]
set -uo pipefail
build_dir=$1 label=${2:-$1} lines=${3:-40}
failed="$build_dir/Testing/Temporary/LastTestsFailed.log"
log="$build_dir/Testing/Temporary/LastTest.log"
if [[ ! -s $failed ]]; then
  echo "---- $label: no failed tests ----"
  exit 0
fi
echo "---- $label: failed tests ----"
block=$(mktemp)
# gtest's verdict lines, and the FAIL of the project's scripts and matrices.
what_failed='^\[  FAILED  \]|: Failure$|(^|[[:space:]])FAIL([[:space:]:]|$)'
cut -d: -f2- "$failed"
while IFS=: read -r _ name; do
  echo "==== $name (last $lines lines of its output) ===="
  # The block of one test: from "N/M Testing: NAME" to its "<end of output>".
  awk -v name="$name" '
    $0 ~ "^[0-9]+/[0-9]+ Testing: " && $NF == name { inside = 1; next }
    inside && /^<end of output>/ { exit }
    inside { print }
  ' "$log" >"$block"
  # A suite of many cases fails in one of them, named far above the tail.
  if grep -qE "$what_failed" "$block"; then
    # With the indented lines that follow one (a matrix's details).
    echo "---- $name: lines that say what failed (first 30) ----"
    awk -v re="$what_failed" '
      $0 ~ re { print; more = 12; next }
      more > 0 && /^[[:space:]]/ { print; more--; next }
      { more = 0 }
    ' "$block" | head -n 30
    echo "---- $name: the end of its output ----"
  fi
  tail -n "$lines" "$block"
done <"$failed"
rm -f "$block"
