#!/usr/bin/env bash
# Every advertised maximum (max_qp, max_cq, max_srq, max_pd, max_mr, max_ah)
# is reachable, by one process and by four sharing max_qp, and one past it is
# ENOMEM: runs the Limits.* cases of verbs_semantics
# (tests/integration/verbs_limits.cc) against an engine of their own, since
# the limits are device totals.
#
#   limits_test.sh PATH/TO/verbs_semantics [GTEST-ARGS...]
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

binary=${1:?usage: $0 PATH/TO/verbs_semantics [GTEST-ARGS...]}
shift
if ! have_engine; then
  echo "limits_test: uroced is not built" >&2
  exit 1
fi
start_engine uroce0
echo "engine limits (vm.max_map_count $(cat /proc/sys/vm/max_map_count), ulimit -n $(ulimit -n)):"
# --all-cpus: these clients make objects, they do not poll; moved off the
# engine's CPU, each control round trip waits for a CPU shared with whatever
# else runs (8x slower on a busy two-CPU machine).
timeout -k 5 150 "$UROCE_BIN" run --all-cpus -- "$binary" --gtest_filter='Limits.*' "$@"
