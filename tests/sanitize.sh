#!/usr/bin/env bash
# The test suite under AddressSanitizer and UndefinedBehaviorSanitizer
# (issue 14): configures a build directory of its own with
# -DUROCE_SANITIZE=address,undefined (gcc), builds engine, provider, tools
# and tests there, and runs ctest with the sanitizers' options set. Any
# sanitizer report fails the run, also an ASan or LSan report from a process
# whose exit status no test looks at (an engine's leak report when it
# stops): those go to files, printed at the end. UBSan's, on stderr, stop
# the process (halt_on_error), which fails its test.
#
#   tests/sanitize.sh [--subset ci|all] [CTEST-ARGS...]
#       e.g. tests/sanitize.sh                        the CI subset (default)
#            tests/sanitize.sh --subset all           the whole suite
#            tests/sanitize.sh -R verbs_semantics     one test (CTEST-ARGS
#                                                     replace the subset)
#
# UROCE_SANITIZE_BUILD_DIR (default: build-sanitize) and UROCE_JOBS
# (default: 2) may be set.
#
# The CI subset: the unit tests (every GoogleTest case), verbs_semantics,
# Debian's ibverbs-utils and perftest through the engine, the hostile client,
# the uroce command, and the wire fault matrix's suite runs. Left out of
# "all" too: fuzz (its own clang ASan+UBSan build) and package (a Debian
# package build of its own, not sanitized).
#
# Programs that are not ASan-built (perftest, ibverbs-utils, python3 for
# pyverbs) load the ASan-built provider: `uroce run` of a sanitizer build
# preloads the ASan runtime for them (tools/uroce.cc).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tools/install-deps.sh  # as tests/run_all.sh: the packages first

subset=ci
if [[ ${1:-} == --subset ]]; then
  subset=$2
  shift 2
fi
ci_tests='\.|^(tool_cli|verbs_semantics|ibverbs_utils|perftest|hostile_client|wire_faults)$'
declare -a select
if (($#)); then
  select=("$@")
else
  case $subset in
    ci) select=(-R "$ci_tests") ;;
    all) select=(-E '^(fuzz|package)$') ;;
    *) echo "usage: $0 [--subset ci|all] [CTEST-ARGS...]" >&2; exit 2 ;;
  esac
fi

build_dir="${UROCE_SANITIZE_BUILD_DIR:-build-sanitize}"
jobs="${UROCE_JOBS:-2}"
# -O1 -g1: ASan's usual optimisation, line tables for its reports (a third
# less compile time than RelWithDebInfo's -O2 -g).
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=None -DCMAKE_C_FLAGS="-O1 -g1" -DCMAKE_CXX_FLAGS="-O1 -g1" \
  -DUROCE_SANITIZE=address,undefined
targets=()
if [[ $subset == ci && $# == 0 ]]; then
  # The CI subset builds what it runs: the engine, the tools, the drop-in
  # libraries, every GoogleTest binary, and the programs its scripts start.
  mapfile -t targets < <(cmake --build "$build_dir" --target help | sed -n 's/^\.\.\. \([a-z_]*_unit_test\)$/\1/p')
  targets+=(uroced uroce uroce_verbs uroce_rdmacm uroce_mlx5 verbs_semantics hostile_client
            rc_sequence_checker slow_rtr)
fi
build_started=$SECONDS
cmake --build "$build_dir" -j"$jobs" ${targets[@]:+--target "${targets[@]}"}
echo "sanitize: built in $((SECONDS - build_started)) s"

reports="$(cd "$build_dir" && pwd)/sanitizer-reports"
rm -rf "$reports"
mkdir -p "$reports"
# Writable by all (sticky, as /tmp): tests run programs as nobody too
# (ucx_devices, install, container), whose ASan cannot log elsewhere and
# then fails the program ("Can't open file").
chmod 1777 "$reports"
supp="$PWD/tests/sanitize.supp"
# detect_leaks: the engine and tools are checked at exit (uroce run turns it
# off for the programs it runs: tools/uroce.cc). halt_on_error: UBSan's
# findings fail like ASan's (the build has -fno-sanitize-recover too).
export ASAN_OPTIONS="detect_leaks=1:log_path=$reports/asan:check_initialization_order=1:strict_string_checks=1:detect_stack_use_after_return=0"
export LSAN_OPTIONS="suppressions=$supp"
# Tests that check how the build links allow the sanitizers' runtimes.
export UROCE_SANITIZE=address,undefined
# UBSan (gcc's libubsan beside libasan) writes to stderr whatever log_path
# says: its reports are in the failing test's output.
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"

rc=0
# -j: the units side by side, every other test alone (RUN_SERIAL), as run_all.sh.
ctest --test-dir "$build_dir" --output-on-failure -j"$jobs" "${select[@]}" || rc=$?

shopt -s nullglob
found=("$reports"/*)
if ((${#found[@]})); then
  echo "---- sanitizer reports (${#found[@]}) ----"
  for f in "${found[@]}"; do
    echo "== $f"
    head -n 60 "$f"
  done
  ((rc != 0)) || rc=1
else
  echo "sanitizers: no reports"
fi
exit "$rc"
