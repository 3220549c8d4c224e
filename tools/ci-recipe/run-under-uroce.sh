#!/usr/bin/env bash
# The CI recipe for verbs projects: builds and installs uroce from its source
# tree (skipped when `uroce` is already installed), starts an engine, runs the
# project's test command under `uroce run` and stops the engine, whatever the
# command's outcome. Exits with the test command's status.
#
#   run-under-uroce.sh [--source DIR] [--build-dir DIR] [--prefix DIR]
#                      [--device NAME] -- TEST-COMMAND [ARGS...]
#
#   --source     uroce's source tree (default: the tree this script is in)
#   --build-dir  where to build (default: SOURCE/build)
#   --prefix     where to install (default: /usr/local)
#   --device     the device name the tests open (default: uroce0)
#
# Example, in a job on Debian 12 (as root, or with sudo for the packages):
#   uroce/tools/ci-recipe/run-under-uroce.sh -- make check
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source_dir="$(cd "$here/../.." && pwd)"
build_dir="" prefix=/usr/local device=uroce0
while (($#)); do
  case $1 in
    --source) source_dir=$(cd "$2" && pwd); shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --prefix) prefix=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "run-under-uroce: unknown option $1" >&2; exit 2 ;;
  esac
done
(($#)) || { echo "usage: run-under-uroce.sh [OPTIONS] -- TEST-COMMAND [ARGS...]" >&2; exit 2; }
build_dir=${build_dir:-$source_dir/build}

uroce=$(type -P uroce || true)
if [[ -z "$uroce" ]]; then
  echo "run-under-uroce: building uroce from $source_dir"
  "$source_dir/tools/install-deps.sh"
  cmake -S "$source_dir" -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo
  cmake --build "$build_dir" -j"$(nproc)"
  cmake --install "$build_dir" --prefix "$prefix"
  uroce="$prefix/bin/uroce"
fi

"$uroce" start --name "$device"
# shellcheck disable=SC2064  # the engine to stop is known now
trap "'$uroce' stop --name '$device' >/dev/null 2>&1 || true" EXIT
rc=0
"$uroce" run -- "$@" || rc=$?
if ((rc != 0)); then
  echo "run-under-uroce: the tests failed (exit $rc); the engine's counters:" >&2
  "$uroce" stats --name "$device" >&2 || true
fi
exit "$rc"
