#!/usr/bin/env bash
# Tests of the uroce command (tools/) and of lib.sh's run_pair. The engine part
# (start, status, stop of a real engine) runs when build/bin/uroced exists.
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

passed=0
failed=0
out=""
rc=0

# expect RC DESCRIPTION CMD [ARGS...]: runs CMD (bounded), keeps its output
# (stdout and stderr) in $out and checks its exit status.
expect() {
  local want=$1 desc=$2
  shift 2
  local -a cmd=("$@")
  [[ ${cmd[0]} == uroce ]] && cmd[0]=$UROCE_BIN
  rc=0
  if declare -F "${cmd[0]}" >/dev/null; then
    out=$("${cmd[@]}" 2>&1) || rc=$?  # run_pair: bounded by itself
  else
    out=$(timeout -k 5 30 "${cmd[@]}" 2>&1) || rc=$?
  fi
  if ((rc == want)); then
    pass "$desc"
  else
    flunk "$desc: exit $rc, expected $want"
  fi
}

# expect_out ERE DESCRIPTION: $out of the last command matches ERE.
expect_out() {
  if grep -qE -- "$1" <<<"$out"; then
    pass "$2"
  else
    flunk "$2: output does not match '$1'"
  fi
}

expect_no_out() {
  if grep -qE -- "$1" <<<"$out"; then
    flunk "$2: output matches '$1'"
  else
    pass "$2"
  fi
}

pass() {
  passed=$((passed + 1))
  echo "ok: $1"
}

flunk() {
  failed=$((failed + 1))
  echo "FAIL: $1"
  printf '%s\n' "$out" | sed 's/^/    | /'
}

# cpus_allowed PID|self: the CPUs a process may run on, as the kernel lists them.
cpus_allowed() {
  awk '/^Cpus_allowed_list/{print $2}' "/proc/$1/status"
}

# expand_cpus "0-2,5" -> "0 1 2 5"
expand_cpus() {
  local item lo hi list=()
  local IFS=,
  for item in $1; do
    lo=${item%-*} hi=${item#*-}
    for ((c = lo; c <= hi; c++)); do list+=("$c"); done
  done
  IFS=' '
  echo "${list[*]}"
}

# A provider directory for run/env that does not depend on verbs_provider/.
fake_provider="$UROCE_TEST_DIR/fake-provider"
mkdir -p "$fake_provider"

echo "# command line"
expect 0 "help" uroce help
expect_out '^usage: uroce' "help prints the usage"
expect 0 "--help" uroce --help
expect 2 "unknown command" uroce frobnicate
if [[ $out == "uroce: unknown command 'frobnicate' (see 'uroce help')" ]]; then
  pass "unknown command: one line"
else
  flunk "unknown command: one line"
fi
expect 2 "mistyped command" uroce statsu
expect_out "unknown command 'statsu'; did you mean 'stats'\?" "a mistyped command names the one meant"
expect 2 "mistyped command" uroce strat
expect_out "did you mean 'start'\?" "strat: start"
expect 2 "no command" uroce
expect 2 "capture without a file" uroce capture
expect_out '-w is required' "capture asks for the file"
expect 2 "fault with a bad setting" uroce fault drop
expect_out 'not key=value' "fault names the bad setting"
expect 2 "fault with an unknown key" uroce fault jitter=3
expect 2 "port without a state" uroce port
expect 2 "stop --name without a value" uroce stop --name
expect 2 "invalid engine name" uroce start --name 'a/b'
expect 0 "--version" uroce --version
expect_out '^uroce [0-9]+\.[0-9]+' "--version names the version"
expect 0 "help COMMAND" uroce help stats
expect_out '^Usage: uroce stats' "help stats shows the options of stats"
expect 2 "help of an unknown command" uroce help frobnicate

echo "# --help of every command names its options"
declare -A command_options=(
  [start]="--name --ip --mac --port --wait"
  [stop]="--name --all"
  [status]="--json"
  [stats]="--name --json --watch --interval --count"
  [run]="--all-cpus --without-engine --wait-listen CMD"
  [env]="--help"
  [fault]="--name --port KEY=VALUE"
  [capture]="--name -w --count --seconds"
  [port]="--name STATE"
  [bench]="--quick --out --no-two-hosts --keep --only"
  [help]="COMMAND"
)
for command in "${!command_options[@]}"; do
  expect 0 "$command --help" uroce "$command" --help
  expect_out "^Usage: uroce $command" "$command --help: the usage line"
  for option in ${command_options[$command]}; do
    expect_out "(^|[ ,])$option([ ,{:]|$)" "$command --help names $option"
  done
done
if have_engine; then
  expect 0 "uroced --help" "$UROCE_ENGINE_BIN" --help
  for option in --name --runtime-dir --ip --ip6 --mac --port --mtu --vlan --hugepages --no-hugepages --fault --cpu --delay-drop-timeout --cm-response-timeout --cm-retries; do
    expect_out "(^|[ ,])$option([ ,{:]|$)" "uroced --help names $option"
  done
fi

echo "# bad flags and missing values: CLI11's message on one line, exit 2"
# expect_usage_error COMMAND ARGS...: exit 2 and one line naming the command.
expect_usage_error() {
  local command=$1
  expect 2 "uroce $* is a usage error" uroce "$@"
  if [[ $out =~ ^uroce\ $command:\ [^$'\n']+\ \(see\ \'uroce\ $command\ --help\'\)$ ]]; then
    pass "uroce $*: one line naming $command"
  else
    flunk "uroce $*: not one line naming $command"
  fi
}
# A command line that is good but for --bogus (a missing -w, CMD or STATE
# would be named first).
declare -A good_args=([run]="true" [capture]="-w x.pcap" [port]="up")
for command in stop status stats run env fault capture port bench; do
  # shellcheck disable=SC2086
  expect_usage_error "$command" --bogus ${good_args[$command]:-}
  expect_out 'The following argument was not expected: --bogus \(see' "$command names the bad flag"
done
expect_usage_error stats --name
expect_out '--name: 1 required' "stats --name without a value says so"
expect_usage_error stats --name a b
expect_out 'not expected: b ' "stats takes one NAME per --name"
expect_usage_error stats --json --watch
expect_usage_error stats --interval 0.01 --watch
expect_usage_error stats --count 3
expect_usage_error status --runtime-dir /tmp
expect_usage_error stop --name x --all
expect_usage_error fault --port sideways
expect_usage_error port sideways
expect_usage_error run
expect_usage_error start --name
expect_usage_error start --wait 0
if have_engine; then
  expect 2 "uroced with a bad flag" "$UROCE_ENGINE_BIN" --bogus
  if [[ $out == "uroced: The following argument was not expected: --bogus (see 'uroced --help')" ]]; then
    pass "uroced: the same one-line form"
  else
    flunk "uroced: the same one-line form"
  fi
  expect 2 "uroced --mtu out of range" "$UROCE_ENGINE_BIN" --mtu 100
  expect 2 "uroced --delay-drop-timeout past mlx5's 100 ms" "$UROCE_ENGINE_BIN" --delay-drop-timeout 200000
  expect 2 "uroced --cm-retries past the REQ's 4-bit field" "$UROCE_ENGINE_BIN" --cm-retries 16
  expect 2 "uroced --ip without a value" "$UROCE_ENGINE_BIN" --ip
  expect 2 "uroced --mtu without a wire port" "$UROCE_ENGINE_BIN" --mtu 9000
  expect_out 'mtu applies to the wire port' "uroced says --mtu needs a wire port"
  expect 2 "uroced --vlan without a wire port" "$UROCE_ENGINE_BIN" --vlan 5
  expect 0 "the man pages and 'uroce help' agree with the command lines" \
    python3 "$UROCE_SRC_DIR/tests/integration/man_pages_check.py" "$UROCE_BIN" "$UROCE_ENGINE_BIN" "$UROCE_SRC_DIR/docs/man"
fi
expect 2 "fault off with a setting" uroce fault off drop=0.1
expect_out "'off' takes no other setting" "fault says off stands alone"

echo "# bash completion (tools/completion/uroce.bash)"
completion_script="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/tools/completion/uroce.bash"
# complete WORDS...: what the completion gives for the last word, one a line.
complete_words() {
  bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    _uroce; printf "%s\n" "${COMPREPLY[@]}"' sh "$completion_script" "$@"
}
out=$(complete_words uroce st | sort | tr '\n' ' ')
if [[ $out == "start stats status stop " ]]; then pass "completes commands"; else flunk "completes commands"; fi
out=$(complete_words uroce --runtime-dir /tmp "" | tr '\n' ' ')
if [[ $out == *"run "* && $out == *"capture "* && $out == *"help "* ]]; then
  pass "completes commands after --runtime-dir DIR"
else
  flunk "completes commands after --runtime-dir DIR"
fi
out=$(complete_words uroce fault --port "" | tr '\n' ' ')
if [[ $out == "loopback wire " ]]; then pass "completes fault --port"; else flunk "completes fault --port"; fi
out=$(complete_words uroce port --name x "" | tr '\n' ' ')
if [[ $out == "up down " ]]; then pass "completes port's state"; else flunk "completes port's state"; fi
out=$(complete_words uroce run -- bas | tr '\n' ' ')
if [[ " $out" == *" bash "* ]]; then pass "completes run's command"; else flunk "completes run's command"; fi
out=$(complete_words uroce run ls - | tr '\n' ' ')
if [[ $out != *--all-cpus* ]]; then pass "no uroce options after run's command"; else flunk "no uroce options after run's command"; fi
python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.bind(sys.argv[1])' "$UROCE_TEST_DIR/completion-engine.sock"
out=$(complete_words uroce --runtime-dir "$UROCE_TEST_DIR" stats --name "" | tr '\n' ' ')
if [[ $out == "completion-engine " ]]; then pass "completes engine names"; else flunk "completes engine names"; fi
rm -f "$UROCE_TEST_DIR/completion-engine.sock"
# Every option `uroce COMMAND --help` names is completed for COMMAND.
for command in "${!command_options[@]}"; do
  completed=" $(complete_words uroce "$command" - | tr '\n' ' ')"
  listed=$("$UROCE_BIN" "$command" --help | grep -oE '^ +-[-a-z0-9]+(, ?-[-a-z0-9]+)*' | tr ',' ' ')
  missing=""
  for option in $listed; do
    [[ $option == -h || $completed == *" $option "* ]] || missing+=" $option"
  done
  out="completed:$completed"
  if [[ -z $missing && -n $listed ]]; then
    pass "completion of $command has its options"
  else
    flunk "completion of $command lacks:$missing"
  fi
done

echo "# no engines: one wording, exit 3 where an engine is needed"
expect 3 "status without engines" uroce status
expect_out "^uroce: no engine running in $UROCE_RUNTIME_DIR" "status says no engine runs, and where"
expect 3 "status --json without engines" uroce status --json
expect_out '"engines": \[\]' "status --json: an empty list"
expect 3 "status of a missing runtime dir" uroce --runtime-dir "$UROCE_TEST_DIR/none" status
expect 0 "stop of an unknown engine" uroce stop --name nosuch
expect_out '^nosuch: not running$' "stop: not running"
expect 0 "stop --all without engines" uroce stop --all
expect 3 "stats of an unknown engine" uroce stats --name nosuch
expect_out "^uroce: nosuch: not running \(no engine nosuch in $UROCE_RUNTIME_DIR" "stats: not running, and where"
for command in "fault" "fault drop=0.1" "port down" "capture -w $UROCE_TEST_DIR/x.pcap"; do
  # shellcheck disable=SC2086
  expect 3 "$command of an engine that does not run" uroce $command --name nosuch
  expect_out "^uroce: nosuch: not running" "$command: the same wording"
done
expect 3 "run without an engine" uroce run -- true
expect_out "no engine running in $UROCE_RUNTIME_DIR: 'uroce start' starts one" "run says why it refuses"

echo "# stale files of a dead engine"
python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.bind(sys.argv[1])' "$UROCE_RUNTIME_DIR/ghost.sock"
echo 999999 >"$UROCE_RUNTIME_DIR/ghost.pid"
expect 3 "status with a stale socket" uroce status
expect_out '^ghost: not running \(stale files\)$' "status shows the stale engine"
expect 0 "stop of a stale engine" uroce stop --name ghost
expect_out '^ghost: not running \(removed its stale files\)$' "stop: not running, stale files removed"
if [[ -e "$UROCE_RUNTIME_DIR/ghost.sock" || -e "$UROCE_RUNTIME_DIR/ghost.pid" ]]; then
  flunk "stop removes the stale files"
else
  pass "stop removes the stale files"
fi

echo "# start waits --wait seconds for an engine that does not answer, then stops it"
# A uroced that never answers: start finds uroced beside itself.
slow_bin="$UROCE_TEST_DIR/slow-engine"
mkdir -p "$slow_bin"
cp "$UROCE_BIN" "$slow_bin/uroce"
printf '#!/bin/sh\necho $$ >"%s"\nexec sleep 60\n' "$slow_bin/pid" >"$slow_bin/uroced"
chmod +x "$slow_bin/uroced"
t0=$SECONDS
expect 1 "start of an engine that does not answer" "$slow_bin/uroce" start --name slow --wait 2
expect_out 'did not answer on .* within 2 s \(uroce start --wait\); stopping it' "start says how long it waited, and the flag"
if ((SECONDS - t0 >= 2 && SECONDS - t0 < 15)); then pass "start gave up after --wait"; else flunk "start gave up after $((SECONDS - t0)) s, not 2"; fi
if [[ ! -s $slow_bin/pid ]] || kill -0 "$(cat "$slow_bin/pid")" 2>/dev/null; then flunk "start stopped the engine that did not answer"; else pass "start stopped the engine that did not answer"; fi

echo "# run and env"
export UROCE_PROVIDER_DIR="$fake_provider"
expect 127 "run of a missing command" uroce run --without-engine -- uroce-no-such-command
expect_out 'command not found' "run says command not found"
expect 7 "run passes the exit status on" uroce run --without-engine -- sh -c 'exit 7'
expect 0 "run without --" uroce run --without-engine true
# shellcheck disable=SC2016
expect 0 "run -- CMD passes CMD's flags on" uroce run --without-engine -- sh -c 'printf "%s|" "$@"' sh -g 0 --help -- --all-cpus
if [[ $out == "-g|0|--help|--|--all-cpus|" ]]; then pass "run -- CMD -g 0: untouched"; else flunk "run -- CMD -g 0: untouched"; fi
expect 0 "run CMD passes CMD's flags on" uroce run --without-engine --all-cpus printf '%s|' -g 0 --help --all-cpus --version
if [[ $out == "-g|0|--help|--all-cpus|--version|" ]]; then pass "run CMD -g 0: untouched"; else flunk "run CMD -g 0: untouched"; fi
expect 0 "run of a command named like a uroce command" uroce run --without-engine -- env true
# --wait-listen: the command starts once something listens, not before.
listen_port=$((20000 + $$ % 20000))
(sleep 0.7; exec python3 -c 'import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1); time.sleep(3)' "$listen_port") &
listener=$!
t0=$(date +%s%N)
expect 0 "run --wait-listen" uroce run --without-engine --wait-listen "$listen_port" -- sh -c "ss -Hltn 'sport = :$listen_port' | grep -c LISTEN"
waited=$((($(date +%s%N) - t0) / 1000000))
if [[ $out == 1 ]] && ((waited >= 600)); then
  pass "run --wait-listen started the command once the port listened (${waited} ms)"
else
  flunk "run --wait-listen: ${waited} ms, output '$out'"
fi
kill "$listener" 2>/dev/null || true
wait "$listener" 2>/dev/null || true
# shellcheck disable=SC2016
expect 0 "run sets the environment" env LD_LIBRARY_PATH=/x/lib "$UROCE_BIN" run --without-engine -- \
  sh -c 'printf "%s\n%s\n" "$LD_LIBRARY_PATH" "$UROCE_RUNTIME_DIR"'
expect_out "^$fake_provider:/x/lib\$" "run puts the provider first in LD_LIBRARY_PATH"
expect_out "^$UROCE_RUNTIME_DIR\$" "run exports UROCE_RUNTIME_DIR"
expect 0 "env" uroce env
expect_out "^export LD_LIBRARY_PATH='$fake_provider'\$" "env exports LD_LIBRARY_PATH"
expect_out "^export UROCE_RUNTIME_DIR='$UROCE_RUNTIME_DIR'\$" "env exports UROCE_RUNTIME_DIR"
odd_dir="$UROCE_TEST_DIR/it's a dir"
# shellcheck disable=SC2016
expect 0 "env output evaluates in a shell" uroce --runtime-dir "$odd_dir" env
env_out=$(grep -v '^uroce: note:' <<<"$out")  # stderr: missing /dev/infiniband nodes
# shellcheck disable=SC2016
expect 0 "eval of env" sh -c 'eval "$1"; printf "%s\n" "$UROCE_RUNTIME_DIR"' sh "$env_out"
if [[ "$out" == "$odd_dir" ]]; then pass "env quotes for the shell"; else flunk "env quotes for the shell"; fi
unset UROCE_PROVIDER_DIR
if [[ -e "$UROCE_BUILD_DIR/provider/libibverbs.so.1" ]]; then
  expect 0 "env finds the provider of the build tree" uroce env
  expect_out "^export LD_LIBRARY_PATH='$UROCE_BUILD_DIR/provider'" "env names build/provider"
else
  expect 1 "env without a provider" uroce env
  expect_out 'cannot find' "env says the provider is missing"
fi

echo "# start failures (a uroce binary next to a stand-in uroced)"
fake_bin="$UROCE_TEST_DIR/fake-bin"
mkdir -p "$fake_bin"
cp "$UROCE_BIN" "$fake_bin/uroce"
expect 1 "start without uroced" "$fake_bin/uroce" start --name f1
expect_out 'cannot execute .*/uroced' "start says uroced is missing"
cat >"$fake_bin/uroced" <<'EOF'
#!/bin/sh
echo "stand-in uroced: refusing $*" >&2
exit 3
EOF
chmod +x "$fake_bin/uroced"
expect 1 "start of an engine that exits" "$fake_bin/uroce" start --name f2 --mac 02:00:00:00:00:01 --extra
expect_out 'exited with status 3' "start reports the exit status"
expect_out 'refusing --name f2 --runtime-dir /.* --mac 02:00:00:00:00:01 --extra' \
  "start shows the log with the arguments passed on"
expect 1 "start passes unknown flags on in order" "$fake_bin/uroce" start --cpu none --name f3 \
  --fault drop=0.1 -- --name x --help -g 0
expect_out 'refusing --name f3 --runtime-dir /[^ ]* --cpu none --fault drop=0.1 --name x --help -g 0$' \
  "start passes flags before and everything after -- on, without the --"

echo "# run_pair"
export UROCE_PROVIDER_DIR="$fake_provider"
RUN_PAIR_RUN_FLAGS=--without-engine  # no engine here: run_pair's own logic is tested
expect 0 "run_pair of two good sides" run_pair 10 sh -c 'echo server up' -- sh -c 'echo client up'
expect 1 "run_pair with a failing client" run_pair 10 true -- sh -c 'echo oops; exit 3'
expect_out 'client: exit 3' "run_pair names the failing side"
expect_out 'oops' "run_pair prints the client output"
expect 1 "run_pair with a forbidden pattern" \
  run_pair --forbid 'invalid data' 10 sh -c 'echo "invalid data at 0"' -- true
expect_out "server output matches forbidden pattern" "run_pair names the pattern"
expect 1 "run_pair with a client that hangs" run_pair 1 true -- sleep 20
expect_out 'client: timed out after 1 s' "run_pair reports the timeout"
expect 1 "run_pair with a server that hangs" run_pair --delay 0 1 sleep 20 -- true
expect_out 'server: timed out' "run_pair reports the server timeout"
unset UROCE_PROVIDER_DIR RUN_PAIR_RUN_FLAGS

echo "# a real engine"
if have_engine; then
  expect 0 "start" uroce start
  expect_out '^uroce0: started \(pid [0-9]+' "start prints the pid"
  expect 0 "status with an engine" uroce status
  expect_out 'uroce0' "status shows the engine"
  expect_no_out 'not running' "status shows it running"
  expect_out '^clients: 0$' "status does not count itself among the clients"
  expect 1 "start of a running engine" uroce start
  expect_out 'already running' "start says already running"
  expect 0 "stats" uroce stats --name uroce0
  expect_out '^ *delay_drop_timeout_us [0-9]+ ' "stats shows its last line"
  echo "# fault: shown, set, turned off"
  expect 0 "fault without a setting" uroce fault
  expect_out '^uroce0: loopback: off$' "fault shows the loopback port off"
  expect 0 "fault set" uroce fault --port loopback drop=0.25 delay=7
  expect_out '^uroce0: fault injection set on the loopback port$' "fault says what it set"
  expect 0 "fault shows it" uroce fault
  expect_out '^uroce0: loopback: drop=0.25 duplicate=0 reorder=0 corrupt=0 delay=7$' "fault shows the settings"
  expect 0 "status --json" uroce status --json
  expect_out '"drop": ?0.25' "status --json has the settings"
  expect 0 "fault off" uroce fault --port loopback off
  expect 0 "fault after off" uroce fault
  expect_out '^uroce0: loopback: off$' "off turned it off"
  expect 0 "stop" uroce stop
  expect_out '^uroce0: stopped' "stop says stopped"
  expect 3 "status after stop" uroce status
  expect_out '^uroce: no engine running in' "status shows no engines"
  expect 0 "stop of a stopped engine" uroce stop
  expect_out '^uroce0: not running$' "a second stop: not running"
  echo "# CPU placement (the polling threads' side: verbs_semantics Placement.*)"
  own_cpus=$(expand_cpus "$(cpus_allowed self)")
  expect 0 "start (--cpu auto)" uroce start
  engine_cpus=$(expand_cpus "$(cpus_allowed "$(<"$UROCE_RUNTIME_DIR/uroce0.pid")")")
  if [[ $own_cpus == *" "* ]]; then  # two or more CPUs
    expect 0 "status with a pinned engine" uroce status
    expect_out "^engine: polling on CPU $engine_cpus\$" "status names the engine's CPU"
    if [[ $engine_cpus =~ ^[0-9]+$ && " $own_cpus " == *" $engine_cpus "* ]]; then
      pass "the engine polls on one CPU of its own ($engine_cpus of $own_cpus)"
    else
      flunk "the engine polls on one CPU of its own: it may use '$engine_cpus' of '$own_cpus'"
    fi
  else
    if [[ $engine_cpus == "$own_cpus" ]]; then pass "one CPU: the engine is not pinned"; else flunk "one CPU: engine pinned to '$engine_cpus'"; fi
  fi
  # shellcheck disable=SC2016
  expect 0 "run" uroce run -- sh -c 'echo "placement=${UROCE_POLL_PLACEMENT:-} $(awk "/^Cpus_allowed_list/{print \$2}" /proc/self/status)"'
  if [[ $out == "placement=1 "* && $(expand_cpus "${out#placement=1 }") == "$own_cpus" ]]; then
    pass "run asks for polling threads to leave the engine's CPU and leaves the command's CPUs alone"
  else
    flunk "run: '$out' (own CPUs '$own_cpus')"
  fi
  # shellcheck disable=SC2016
  expect 0 "run --all-cpus" uroce run --all-cpus -- sh -c 'echo "placement=${UROCE_POLL_PLACEMENT:-}"'
  expect_out '^placement=$' "run --all-cpus does not ask for placement"
  expect 0 "env" uroce env
  expect_out '^export UROCE_POLL_PLACEMENT=1$' "env asks for placement as run does"
  expect 0 "stop" uroce stop
  expect 0 "start --cpu none" uroce start --cpu none
  engine_cpus=$(expand_cpus "$(cpus_allowed "$(<"$UROCE_RUNTIME_DIR/uroce0.pid")")")
  if [[ $engine_cpus == "$own_cpus" ]]; then pass "--cpu none leaves the engine unpinned"; else flunk "--cpu none: engine on '$engine_cpus'"; fi
  expect 0 "status with an unpinned engine" uroce status
  expect_out '^engine: polling on any CPU$' "status says the engine is not pinned"
  expect 0 "stats" uroce stats
  expect_out '^ *delay_drop_timeout_us 100000 ' "stats shows mlx5's delay-drop timeout by default"
  expect 0 "stop" uroce stop
  expect 0 "start --delay-drop-timeout 2500" uroce start --delay-drop-timeout 2500
  expect 0 "stats" uroce stats
  expect_out '^ *delay_drop_timeout_us 2500 ' "the engine takes --delay-drop-timeout"
  expect 0 "stop" uroce stop
  expect 2 "uroced --cpu with a bad value" "$UROCE_ENGINE_BIN" --cpu many
  expect_out 'takes a CPU number, auto or none' "uroced says what --cpu takes"
  expect 0 "start a second engine" uroce start --name uroce1
  expect 0 "stop --all" uroce stop --all
  expect_out '^uroce1: stopped' "stop --all stops it"
else
  echo "skipped: $UROCE_ENGINE_BIN is not built"
fi

echo "$passed passed, $failed failed"
((failed == 0))
