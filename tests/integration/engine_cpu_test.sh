#!/usr/bin/env bash
# CPU placement of engines (uroced --cpu auto, include/uroce/cpu_placement.h):
# on a machine with two or more CPUs, two engines started one after the
# other, or at the same moment, poll on different CPUs; also when an older
# engine is pinned to CPU 0 (the case that put both ends of a two-namespace
# test on CPU 1), and when the two engines have runtime directories of their
# own (as the two-namespace tests of other worktrees do). Loopback engines:
# the choice does not depend on the port (DPDK's EAL leaves the thread on
# every CPU, net/dpdk_port.cc), which two_hosts_test.sh checks on its own
# pair.
#
# Engines of other tests on the machine may start while a round runs and
# take a CPU in between; a round during which the set of foreign engines
# changed proves nothing and is run again (at most 5 times).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ncpu=$(nproc)
if ((ncpu < 2)); then
  echo "SKIP: this process may use $ncpu CPU; placement needs two"
  exit 77
fi

# The single CPU an engine is pinned to, once it has pinned itself (it does
# so after its socket is up, so `uroce start` may return first); "" if it
# is not pinned within 20 s.
engine_cpu() {  # PID
  local i list
  for ((i = 0; i < 200; i++)); do
    list=$(awk '/^Cpus_allowed_list:/ {print $2}' "/proc/$1/status" 2>/dev/null || true)
    if [[ $list =~ ^[0-9]+$ ]]; then
      echo "$list"
      return 0
    fi
    sleep 0.1
  done
  echo ""
}
engine_pid() {  # DIR NAME
  cat "$1/$2.pid"
}
foreign_engines() {  # the live uroced processes not started by this test
  local p out=()
  for p in $(pgrep -x uroced || true); do
    [[ " ${ours[*]:-} " == *" $p "* ]] || out+=("$p")
  done
  echo "${out[*]:-}"
}

failures=0
ours=()
old_dir="$UROCE_TEST_DIR/old"
mkdir -p "$old_dir" && chmod 700 "$old_dir"

# One round: starts engines e1 and e2 (MODE: serial or together, each in DIR1
# and DIR2), checks their CPUs differ, stops them. 0 passed, 1 failed, 2
# disturbed by a foreign engine.
round() {  # LABEL MODE DIR1 DIR2
  local label=$1 mode=$2 d1=$3 d2=$4 before after p1 p2 c1 c2 s1
  before=$(foreign_engines)
  if [[ $mode == serial ]]; then
    UROCE_RUNTIME_DIR=$d1 uroce start --name e1 >/dev/null
    UROCE_RUNTIME_DIR=$d2 uroce start --name e2 >/dev/null
  else
    UROCE_RUNTIME_DIR=$d1 uroce start --name e1 >/dev/null &
    s1=$!
    UROCE_RUNTIME_DIR=$d2 uroce start --name e2 >/dev/null
    wait "$s1"
  fi
  p1=$(engine_pid "$d1" e1) p2=$(engine_pid "$d2" e2)
  ours+=("$p1" "$p2")
  c1=$(engine_cpu "$p1") c2=$(engine_cpu "$p2")
  after=$(foreign_engines)
  UROCE_RUNTIME_DIR=$d1 uroce stop --name e1 >/dev/null
  UROCE_RUNTIME_DIR=$d2 uroce stop --name e2 >/dev/null
  if [[ -z $c1 || -z $c2 ]]; then
    echo "FAIL $label: an engine did not pin itself (CPUs '$c1' '$c2')"
    return 1
  fi
  if [[ $c1 != "$c2" ]]; then
    echo "ok   $label: CPUs $c1 and $c2"
    return 0
  fi
  if [[ $before != "$after" ]]; then
    echo "note $label: both on CPU $c1 while other engines came or went ($before -> $after): again"
    return 2
  fi
  echo "FAIL $label: both engines on CPU $c1 (other engines: ${after:-none})"
  return 1
}

check() {  # LABEL MODE DIR1 DIR2
  local attempt rc
  for ((attempt = 1; attempt <= 5; attempt++)); do
    rc=0
    round "$@" || rc=$?
    ((rc == 2)) || break
  done
  ((rc == 0)) || failures=$((failures + 1))
}

dir_a="$UROCE_TEST_DIR/a" dir_b="$UROCE_TEST_DIR/b"
mkdir -p "$dir_a" "$dir_b" && chmod 700 "$dir_a" "$dir_b"
for d in "$dir_a" "$dir_b" "$old_dir"; do
  add_cleanup "UROCE_RUNTIME_DIR=$d timeout 30 $UROCE_BIN stop --all >/dev/null 2>&1 || true"
done

check "one after the other" serial "$UROCE_RUNTIME_DIR" "$UROCE_RUNTIME_DIR"
# At once: the race that the placement lock closes; several rounds, as a
# race may go either way.
for i in 1 2 3 4 5; do
  check "at once ($i)" together "$UROCE_RUNTIME_DIR" "$UROCE_RUNTIME_DIR"
done
check "one after the other, runtime directories of their own" serial "$dir_a" "$dir_b"
check "at once, runtime directories of their own" together "$dir_a" "$dir_b"

# An older engine pinned to CPU 0: the pair still parts.
UROCE_RUNTIME_DIR=$old_dir uroce start --name old0 -- --cpu 0 >/dev/null
old_pid=$(engine_pid "$old_dir" old0)
ours+=("$old_pid")
if [[ $(engine_cpu "$old_pid") != 0 ]]; then
  echo "FAIL uroced --cpu 0 is not on CPU 0"
  failures=$((failures + 1))
fi
sleep 0.1  # a clock tick: the pair starts strictly after it
check "one after the other, an older engine on CPU 0" serial "$dir_a" "$dir_b"
check "at once, an older engine on CPU 0" together "$UROCE_RUNTIME_DIR" "$UROCE_RUNTIME_DIR"
UROCE_RUNTIME_DIR=$old_dir uroce stop --name old0 >/dev/null

# --cpu none leaves the engine on every CPU it may use.
uroce start --name free -- --cpu none >/dev/null
free_pid=$(engine_pid "$UROCE_RUNTIME_DIR" free)
sleep 1
list=$(awk '/^Cpus_allowed_list:/ {print $2}' "/proc/$free_pid/status")
if [[ $list =~ ^[0-9]+$ ]]; then
  echo "FAIL --cpu none: pinned to $list"
  failures=$((failures + 1))
else
  echo "ok   --cpu none: CPUs $list"
fi
uroce stop --name free >/dev/null

((failures == 0)) || { echo "$failures failed"; exit 1; }
echo "all passed"
