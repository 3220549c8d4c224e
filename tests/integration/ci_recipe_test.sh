#!/usr/bin/env bash
# The CI recipe for verbs projects (tools/ci-recipe/run-under-uroce.sh, the
# step tools/ci-recipe/github-workflow.yml runs; issue 15), proved the way a
# project would use it: it installs uroce (from this build tree, into a scratch
# prefix), starts an engine and runs a real verbs consumer's own test suite,
# rdma-core's pyverbs, under `uroce run`; a failing test command fails the
# recipe; the engine is stopped either way.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

recipe="$UROCE_SRC_DIR/tools/ci-recipe/run-under-uroce.sh"
grep -q 'run-under-uroce.sh -- ' "$UROCE_SRC_DIR/tools/ci-recipe/github-workflow.yml" ||
  { echo "ci_recipe_test: the example workflow does not run the recipe" >&2; exit 1; }
src=/usr/share/doc/rdma-core/tests
if [[ ! -f $src/run_tests.py ]] || ! /usr/bin/python3 -c 'import pyverbs' 2>/dev/null; then
  echo "SKIP: python3-pyverbs is not installed"
  exit 77
fi
if type -P uroce >/dev/null; then
  echo "SKIP: a uroce is installed on PATH; the recipe would use it"
  exit 77
fi

project="$UROCE_TEST_DIR/project"  # "the project": pyverbs' tests
mkdir -p "$project"
cp -r "$src/." "$project/tests/"
find "$project" -name '*.gz' -exec gunzip -f {} +
prefix="$UROCE_TEST_DIR/prefix"

log="$UROCE_LOG_DIR/recipe.log"
rc=0
(cd "$project" && timeout 600 "$recipe" --build-dir "$UROCE_BUILD_DIR" --prefix "$prefix" \
  -- /usr/bin/python3 tests/run_tests.py --dev uroce0 -v) >"$log" 2>&1 || rc=$?
tail -n 5 "$log"
if ((rc != 0)) || ! grep -qE '^OK( |$)' "$log"; then
  grep -E '^(FAIL|ERROR):' "$log" || tail -n 40 "$log"
  echo "ci_recipe_test: the recipe failed (exit $rc)" >&2
  exit 1
fi
[[ -x "$prefix/bin/uroce" ]] || { echo "ci_recipe_test: uroce was not installed into the prefix" >&2; exit 1; }
ran=$(grep -oE '^Ran [0-9]+' "$log" | awk '{print $2}')
((ran > 100)) || { echo "ci_recipe_test: only $ran pyverbs tests ran" >&2; exit 1; }
if grep -q '^== ' <<<"$("$prefix/bin/uroce" status)"; then
  echo "ci_recipe_test: the recipe left its engine running" >&2
  exit 1
fi

# A failing test command fails the job, and the engine still stops.
rc=0
PATH="$prefix/bin:$PATH" timeout 120 "$recipe" -- sh -c 'ibv_devices | grep -q uroce0 && exit 3' \
  >"$UROCE_LOG_DIR/recipe-fail.log" 2>&1 || rc=$?
((rc == 3)) || { cat "$UROCE_LOG_DIR/recipe-fail.log" >&2; echo "ci_recipe_test: exit $rc, not the command's 3" >&2; exit 1; }
if grep -q '^== ' <<<"$("$prefix/bin/uroce" status)"; then
  echo "ci_recipe_test: the engine was left running after a failing command" >&2
  exit 1
fi
echo "ci_recipe_test: pyverbs ($ran tests) ran through the recipe; failures propagate; no engine left"
