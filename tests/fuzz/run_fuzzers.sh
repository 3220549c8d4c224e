#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/*_fuzz.cc) in a clang build with
# ASan and UBSan, replays the saved findings (tests/fuzz/regressions/), then
# fuzzes each target for SECONDS from its seed corpus (tests/fuzz/corpus/,
# copied: the repository's corpus is not changed). Fails on any finding;
# the input that caused it is kept in the log directory.
#
#   tests/fuzz/run_fuzzers.sh [SECONDS]      (default 15 per target)
#
# UROCE_FUZZ_BUILD_DIR (default build/fuzz) and UROCE_FUZZ_LOG_DIR may be set.
# For a long run by hand: tests/fuzz/run_fuzzers.sh 3600
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$(cd "$here/../.." && pwd)"
seconds=${1:-15}
build="${UROCE_FUZZ_BUILD_DIR:-$src/build/fuzz}"
logs="${UROCE_FUZZ_LOG_DIR:-$(mktemp -d /tmp/uroce-fuzz.XXXXXX)}"
mkdir -p "$logs"
command -v clang++ >/dev/null || { echo "SKIP: clang++ is not installed"; exit 77; }

# -O1 with line tables: libFuzzer's own recommendation (llvm.org/docs/LibFuzzer),
# enough for ASan's stack traces, and about half RelWithDebInfo's compile time.
cmake -S "$src" -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DUROCE_FUZZ=ON -DUROCE_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=None \
  -DCMAKE_C_FLAGS="-O1 -gline-tables-only" -DCMAKE_CXX_FLAGS="-O1 -gline-tables-only" >"$logs/configure.log" 2>&1 ||
  { cat "$logs/configure.log"; exit 1; }
cmake --build "$build" -j"${UROCE_JOBS:-2}" --target uroce_fuzz_frame_parser uroce_fuzz_device_rx uroce_fuzz_control uroce_fuzz_wqe \
  >"$logs/build.log" 2>&1 || { tail -n 40 "$logs/build.log"; exit 1; }

export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
failed=0
for target in frame_parser device_rx control wqe; do
  bin="$build/bin/uroce_fuzz_$target"
  # Every saved finding first: each must now pass.
  for finding in "$here"/regressions/"$target"-*; do
    [[ -e "$finding" ]] || continue
    if ! "$bin" "$finding" >"$logs/$target-regression.log" 2>&1; then
      echo "fuzz: $target: the saved finding $(basename "$finding") fails again"
      tail -n 30 "$logs/$target-regression.log"
      failed=1
    fi
  done
  corpus="$logs/corpus-$target"
  mkdir -p "$corpus"
  cp "$here/corpus/$target/." "$corpus/" -r
  rc=0
  timeout $((seconds + 60)) "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$logs/$target-" "$corpus" >"$logs/$target.log" 2>&1 || rc=$?
  runs=$(grep -oE 'Done [0-9]+ runs' "$logs/$target.log" | awk '{print $2}' || true)
  if ((rc != 0)); then
    echo "fuzz: $target: FINDING (exit $rc); input kept as $logs/$target-*"
    grep -E 'ERROR|SUMMARY|runtime error|#[0-9]+ 0x' "$logs/$target.log" | head -30
    failed=1
  else
    echo "fuzz: $target: ${runs:-?} inputs in ${seconds} s, no finding"
  fi
done
if ((failed)); then
  echo "fuzz: logs in $logs"
  exit 1
fi
rm -rf "$logs"
echo "fuzz: passed"
