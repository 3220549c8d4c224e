#!/usr/bin/env bash
# Builds uroce and runs the whole test suite. The README and .ci/run both call
# this script, so the documented command and CI cannot drift apart.
#
#   tests/run_all.sh [CTEST-ARGS...]     e.g. tests/run_all.sh -R tool_cli
#
# UROCE_BUILD_DIR (default: build) and UROCE_JOBS (default: 2) may be set.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tools/install-deps.sh  # a fresh Debian 12 machine: the packages first

build_dir="${UROCE_BUILD_DIR:-build}"
jobs="${UROCE_JOBS:-2}"

cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo
build_started=$SECONDS
cmake --build "$build_dir" -j"$jobs"
echo "run_all: built in $((SECONDS - build_started)) s"
# -j: the GoogleTest units run side by side; every other test is RUN_SERIAL
# (tests/CMakeLists.txt): engines, CPU ticks and latencies are measured alone.
ctest --test-dir "$build_dir" --output-on-failure -j"$jobs" "$@"
