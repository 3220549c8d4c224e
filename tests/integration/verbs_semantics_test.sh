#!/usr/bin/env bash
# Verbs semantics against a real engine: runs the GoogleTest program
# verbs_semantics (tests/integration/verbs_*.cc) under `uroce run`, and checks
# that an idle engine uses (almost) no CPU.
#
#   verbs_semantics_test.sh PATH/TO/verbs_semantics [GTEST-ARGS...]
#
# Order: idle CPU of a fresh engine; every test but EngineStop.*; idle CPU of
# the same engine after that traffic; then EngineStop.*, which stops the
# engine itself, against an engine of its own.
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if (($# < 1)); then
  echo "usage: $0 PATH/TO/verbs_semantics [GTEST-ARGS...]" >&2
  exit 2
fi
binary=$1
shift
if [[ ! -x "$binary" ]]; then
  echo "verbs_semantics_test: $binary is not built" >&2
  exit 1
fi
if ! have_engine; then
  echo "verbs_semantics_test: uroced is not built" >&2
  exit 1
fi

failures=0

engine_pid() {
  cat "$UROCE_RUNTIME_DIR/uroce0.pid"
}

# utime + stime of a process, in clock ticks (fields 14 and 15 of stat; the
# command name in field 2 may hold spaces, so cut after its ')').
cpu_ticks() {
  local stat
  stat=$(<"/proc/$1/stat")
  stat=${stat##*) }
  # shellcheck disable=SC2086
  set -- $stat
  echo $((${12} + ${13}))
}

# idle_cpu LABEL: the engine may use less than 1% of a core over 3 s.
idle_cpu() {
  local label=$1 pid before after used hz limit
  pid=$(engine_pid)
  hz=$(getconf CLK_TCK)
  limit=$((3 * hz / 100))  # 1% of 3 s
  ((limit >= 1)) || limit=1
  sleep 0.5  # let the engine reach its sleeping state
  before=$(cpu_ticks "$pid")
  sleep 3
  after=$(cpu_ticks "$pid")
  used=$((after - before))
  if ((used < limit)); then
    echo "ok: idle engine ($label) used $used clock ticks in 3 s (limit $limit, CLK_TCK $hz)"
  else
    echo "FAIL: idle engine ($label) used $used clock ticks in 3 s (limit $limit, CLK_TCK $hz)"
    failures=$((failures + 1))
  fi
}

# run_gtest LABEL LIMIT GTEST-ARGS...
run_gtest() {
  local label=$1 limit=$2 rc=0
  shift 2
  echo "---- $label ----"
  timeout -k 5 "$limit" "$UROCE_BIN" run -- "$binary" --gtest_brief=1 "$@" || rc=$?
  if ((rc != 0)); then
    echo "FAIL: $label: $(_uroce_describe_rc "$rc" "$limit")"
    failures=$((failures + 1))
  fi
}

start_engine uroce0
idle_cpu "fresh"
# Limits.* fill the device: limits_test.sh runs them on an engine of their own.
run_gtest "verbs semantics" 80 --gtest_filter='-EngineStop.*:Limits.*' "$@"
# The data path again with every MR left on process_vm_* (no shared pages):
# memory the provider cannot move (files, huge pages, the stack) takes it.
UROCE_SHARED_MR=0 run_gtest "verbs semantics without shared pages" 60 \
  --gtest_filter='Errors.*:DataPath.*:Uc.*:Ud.*:Fork.*:SharedMr.FileBacked*' "$@"
idle_cpu "after the tests"
if [[ -f "$UROCE_RUNTIME_DIR/uroce0.pid" ]]; then
  uroce stop --name uroce0 >/dev/null
fi

start_engine uroce0
run_gtest "engine stop" 20 --gtest_filter='EngineStop.*' "$@"

if ((failures)); then
  echo "verbs_semantics: $failures failure(s)"
  exit 1
fi
echo "verbs_semantics: all passed"
