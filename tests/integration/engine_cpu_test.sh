#!/usr/bin/env bash
# CPU placement of engines (uroced --cpu auto, include/uroce/cpu_placement.h):
# an engine takes a CPU no engine is pinned to only while that leaves
# another such CPU for the clients; else it shares the CPU of the youngest
# engine. So two engines started one after the other, or at the same
# moment, poll on different CPUs when at least three CPUs are free of
# engines before them, else on one CPU together; and a CPU free of engines
# before them stays free. Checked for engines in one runtime directory and
# in two, and with an older engine pinned to CPU 0 (which, when engines
# were spread by count, put both ends of a two-namespace test on CPU 1, the
# older one alone on CPU 0). Loopback engines: the choice does not depend on
# the port (DPDK's EAL leaves the thread on every CPU, net/dpdk_port.cc);
# two_hosts_test.sh checks its own pair.
#
# Engines of other tests on the machine count too: each round predicts from
# those pinned before it, and a round during which they came or went proves
# nothing and is run again (at most 5 times).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ncpu=$(nproc)
if ((ncpu < 2)); then
  echo "SKIP: this process may use $ncpu CPU; placement needs two"
  exit 77
fi
mapfile -t my_cpus < <(taskset -pc $$ | awk '{print $NF}' | tr ',' '\n' |
  awk -F- '{ if (NF == 2) for (c = $1; c <= $2; c++) print c; else print $1 }')

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
pinned_cpu() {  # PID: its single CPU, or ""
  local list
  list=$(awk '/^Cpus_allowed_list:/ {print $2}' "/proc/$1/status" 2>/dev/null || true)
  [[ $list =~ ^[0-9]+$ ]] && echo "$list" || echo ""
}
foreign_engines() {  # "pid:cpu" of the live uroced processes not started by this test
  local p out=() state
  for p in $(pgrep -x uroced || true); do
    # Zombies do not count (is_live_engine in include/uroce/cpu_placement.h).
    state=$(sed 's/.*) \(.\).*/\1/' "/proc/$p/stat" 2>/dev/null || echo X)
    [[ $state == [ZX] ]] && continue
    [[ " ${ours[*]:-} " == *" $p "* ]] || out+=("$p:$(pinned_cpu "$p")")
  done
  echo "${out[*]:-}"
}
# CPUs of this process's set with no engine pinned, given "pid:cpu" lists.
free_cpus() {  # ENGINES...
  local c e n=0
  for c in "${my_cpus[@]}"; do
    for e in $*; do [[ ${e#*:} == "$c" ]] && continue 2; done
    n=$((n + 1))
  done
  echo "$n"
}

failures=0
ours=()
old_dir="$UROCE_TEST_DIR/old" dir_a="$UROCE_TEST_DIR/a" dir_b="$UROCE_TEST_DIR/b"
mkdir -p "$old_dir" "$dir_a" "$dir_b" && chmod 700 "$old_dir" "$dir_a" "$dir_b"
for d in "$dir_a" "$dir_b" "$old_dir"; do
  add_cleanup "UROCE_RUNTIME_DIR=$d timeout 30 $UROCE_BIN stop --all >/dev/null 2>&1 || true"
done

# One round: starts engines e1 and e2 (MODE: serial or together, in DIR1
# and DIR2), checks their CPUs against the rule, stops them. 0 passed, 1
# failed, 2 disturbed by another test's engine.
round() {  # LABEL MODE DIR1 DIR2
  local label=$1 mode=$2 d1=$3 d2=$4 before after p1 p2 c1 c2 s1 free0 free1 want
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
  p1=$(cat "$d1/e1.pid") p2=$(cat "$d2/e2.pid")
  ours+=("$p1" "$p2")
  c1=$(engine_cpu "$p1") c2=$(engine_cpu "$p2")
  after=$(foreign_engines)
  UROCE_RUNTIME_DIR=$d1 uroce stop --name e1 >/dev/null
  UROCE_RUNTIME_DIR=$d2 uroce stop --name e2 >/dev/null
  if [[ -z $c1 || -z $c2 ]]; then
    echo "FAIL $label: an engine did not pin itself (CPUs '$c1' '$c2')"
    return 1
  fi
  free0=$(free_cpus "$before")
  free1=$(free_cpus "$before" "$p1:$c1" "$p2:$c2")
  if ((free0 >= 3)); then want=apart; else want=together; fi
  if [[ $want == apart && $c1 != "$c2" || $want == together && $c1 == "$c2" ]] &&
     ((free1 >= (free0 < 1 ? free0 : 1))); then
    echo "ok   $label: CPUs $c1 and $c2 ($free0 CPUs free of engines before, $free1 after)"
    return 0
  fi
  if [[ $before != "$after" ]]; then
    echo "note $label: CPUs $c1 and $c2 while other engines came or went ($before -> $after): again"
    return 2
  fi
  echo "FAIL $label: CPUs $c1 and $c2, $free0 CPUs free of engines before, $free1 after (want $want; other engines: ${after:-none})"
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

check "one after the other" serial "$UROCE_RUNTIME_DIR" "$UROCE_RUNTIME_DIR"
# At once: two engines choosing before either is pinned would both take a
# free CPU (the placement lock makes them choose one at a time); several
# rounds, as a race may go either way.
for i in 1 2 3 4 5; do
  check "at once ($i)" together "$UROCE_RUNTIME_DIR" "$UROCE_RUNTIME_DIR"
done
check "one after the other, runtime directories of their own" serial "$dir_a" "$dir_b"
check "at once, runtime directories of their own" together "$dir_a" "$dir_b"

# An older engine pinned to CPU 0.
UROCE_RUNTIME_DIR=$old_dir uroce start --name old0 -- --cpu 0 >/dev/null
old_pid=$(cat "$old_dir/old0.pid")
if [[ $(engine_cpu "$old_pid") != 0 ]]; then
  echo "FAIL uroced --cpu 0 is not on CPU 0"
  failures=$((failures + 1))
fi
# The test's own, but not in "ours": the rounds count it as an engine
# pinned before them.
check "one after the other, an older engine on CPU 0" serial "$dir_a" "$dir_b"
check "at once, an older engine on CPU 0" together "$UROCE_RUNTIME_DIR" "$UROCE_RUNTIME_DIR"
UROCE_RUNTIME_DIR=$old_dir uroce stop --name old0 >/dev/null
ours+=("$old_pid")

# --cpu none leaves the engine on every CPU it may use.
uroce start --name free -- --cpu none >/dev/null
free_pid=$(cat "$UROCE_RUNTIME_DIR/free.pid")
ours+=("$free_pid")
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
