#!/usr/bin/env bash
# The CI recipe for verbs projects: installs uroce (a .deb given with --deb;
# else built from its source tree without its test suite, skipped when
# `uroce` is already installed), starts an engine, runs the project's test
# command under `uroce run` and stops the engine, whatever the command's
# outcome; when the command fails, prints the engine's counters and log.
# Exits with the test command's status. The GitHub Action (action.yml at the
# top of the tree) is this script.
#
#   run-under-uroce.sh [--source DIR] [--build-dir DIR] [--prefix DIR]
#                      [--deb FILE] [--device NAME] [--engine-args ARGS]
#                      -- TEST-COMMAND [ARGS...]
#
#   --source       uroce's source tree (default: the tree this script is in)
#   --build-dir    where to build (default: SOURCE/build; a new one is
#                  configured without the tests, an existing one is used as it is)
#   --prefix       where to install (default: /usr/local)
#   --deb          install this uroce .deb instead of building
#   --device       the device name the tests open (default: uroce0)
#   --engine-args  more flags for `uroce start` (e.g. "--cpu none")
#
# Example, in a job on Debian 12 (as root, or with sudo for the packages):
#   uroce/tools/ci-recipe/run-under-uroce.sh -- make check
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source_dir="$(cd "$here/../.." && pwd)"
build_dir="" prefix=/usr/local device=uroce0 deb="" engine_args=""
while (($#)); do
  case $1 in
    --source) source_dir=$(cd "$2" && pwd); shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --prefix) prefix=$2; shift 2 ;;
    --deb) deb=$(realpath "$2"); shift 2 ;;
    --device) device=$2; shift 2 ;;
    --engine-args) engine_args=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "run-under-uroce: unknown option $1" >&2; exit 2 ;;
  esac
done
(($#)) || { echo "usage: run-under-uroce.sh [OPTIONS] -- TEST-COMMAND [ARGS...]" >&2; exit 2; }
build_dir=${build_dir:-$source_dir/build}

sudo=()
((EUID == 0)) || sudo=(sudo)
if [[ -n $deb ]]; then
  echo "run-under-uroce: installing $deb"
  "${sudo[@]}" apt-get update
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y --no-install-recommends "$deb"
fi
uroce=$(type -P uroce || true)
if [[ -z "$uroce" ]]; then
  echo "run-under-uroce: building uroce from $source_dir"
  "$source_dir/tools/install-deps.sh" build
  # A build tree already configured is built as it is (its own options).
  [[ -e $build_dir/CMakeCache.txt ]] ||
    cmake -S "$source_dir" -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUROCE_BUILD_TESTS=OFF
  cmake --build "$build_dir" -j"$(nproc)"
  "${sudo[@]}" cmake --install "$build_dir" --prefix "$prefix"
  uroce="$prefix/bin/uroce"
fi

# shellcheck disable=SC2086  # engine_args: words for uroce start
"$uroce" start --name "$device" $engine_args
# shellcheck disable=SC2064  # the engine to stop is known now
trap "'$uroce' stop --name '$device' >/dev/null 2>&1 || true" EXIT
rc=0
"$uroce" run -- "$@" || rc=$?
if ((rc != 0)); then
  echo "run-under-uroce: the tests failed (exit $rc); the engine's counters:" >&2
  "$uroce" stats --name "$device" >&2 || true
  runtime_dir=$("$uroce" env 2>/dev/null | sed -n "s/^export UROCE_RUNTIME_DIR='\(.*\)'$/\1/p")
  if [[ -n $runtime_dir && -r $runtime_dir/$device.log ]]; then
    echo "run-under-uroce: the engine's log ($runtime_dir/$device.log):" >&2
    tail -n 100 "$runtime_dir/$device.log" >&2
  fi
fi
exit "$rc"
