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
cut -d: -f2- "$failed"
while IFS=: read -r _ name; do
  echo "==== $name (last $lines lines of its output) ===="
  # The block of one test: from "N/M Testing: NAME" to its "<end of output>".
  awk -v name="$name" '
    $0 ~ "^[0-9]+/[0-9]+ Testing: " && $NF == name { inside = 1; next }
    inside && /^<end of output>/ { exit }
    inside { print }
  ' "$log" | tail -n "$lines"
done <"$failed"
