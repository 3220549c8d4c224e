#!/usr/bin/env bash
# The CI recipe for verbs projects: the GitHub Action (action.yml, whose one
# step is tools/ci-recipe/run-under-uroce.sh) as the example workflow
# (tools/ci-recipe/github-workflow.yml) uses it, proved the way a project
# would: the action's own step, taken from action.yml, installs uroce (this
# build tree, into a scratch prefix), starts an engine and runs a real verbs
# consumer's own test suite, rdma-core's pyverbs, under `uroce run`; a
# failing command fails the step and shows the engine's counters and log;
# the engine is stopped either way. (package_test.sh runs the same step on a
# clean copy of the tree, with the build and the .deb made from it.)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

recipe="$UROCE_SRC_DIR/tools/ci-recipe/run-under-uroce.sh"
workflow="$UROCE_SRC_DIR/tools/ci-recipe/github-workflow.yml"
# The workflow uses the action with a pinned ref (a tag or commit, not a branch).
grep -qE '^ +- uses: [^ ]+/uroce@(v[0-9][0-9.]*|[0-9a-f]{40})( |$)' "$workflow" ||
  { echo "ci_recipe_test: the example workflow does not use the action with a pinned ref" >&2; exit 1; }
# The action's step, as GitHub runs it (bash, its inputs in the environment).
step="$UROCE_TEST_DIR/action-step.sh"
action_step "$UROCE_SRC_DIR/action.yml" "$step"
grep -q 'run-under-uroce.sh' "$step" || { echo "ci_recipe_test: the action does not run the recipe" >&2; exit 1; }
# RUNNER_TEMP/uroce-build is where the action builds; here the suite's own
# build tree (a recipe uses an existing tree as it is), so nothing is rebuilt.
runner_temp="$UROCE_TEST_DIR/runner"
mkdir -p "$runner_temp"
ln -sfn "$UROCE_BUILD_DIR" "$runner_temp/uroce-build"
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
(cd "$project" && timeout 600 env GITHUB_ACTION_PATH="$UROCE_SRC_DIR" RUNNER_TEMP="$runner_temp" \
  UROCE_ACTION_RUN="/usr/bin/python3 tests/run_tests.py --dev uroce0 -v" UROCE_ACTION_DEVICE=uroce0 \
  UROCE_ACTION_ENGINE_ARGS="--cpu none" UROCE_ACTION_DEB="" UROCE_ACTION_PREFIX="$prefix" bash -e "$step") \
  >"$log" 2>&1 || rc=$?
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
for shown in "the engine's counters" "rx_packets" "the engine's log" "uroce start"; do
  grep -q "$shown" "$UROCE_LOG_DIR/recipe-fail.log" ||
    { cat "$UROCE_LOG_DIR/recipe-fail.log" >&2; echo "ci_recipe_test: a failing command does not show $shown" >&2; exit 1; }
done
if grep -q '^== ' <<<"$("$prefix/bin/uroce" status)"; then
  echo "ci_recipe_test: the engine was left running after a failing command" >&2
  exit 1
fi
echo "ci_recipe_test: pyverbs ($ran tests) ran through the recipe; failures propagate; no engine left"
