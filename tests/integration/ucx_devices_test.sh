#!/usr/bin/env bash
# UCX finds uroce0 under `uroce run` on a machine without /dev/infiniband, as
# root and as an unprivileged user, and the host's /dev stays as it was.
#
# UCX (uct_ib_device_is_accessible) lists an ibverbs device only if
# /dev/infiniband/<dev_name> is a character device the user may read and
# write; `uroce run` provides it in a private mount namespace
# (tools/device_nodes.h). Checked: `ucx_info -d` lists rc_verbs and ud_verbs
# on uroce0:1; the node is a readable and writable character device for the
# command, for every engine of the runtime directory; nothing appears on the
# host; `uroce env` says what a shell will miss; an unprivileged user (nobody,
# with an engine of its own) gets the node too and its two ucx_perftest
# processes move data through its engine (process_vm_readv and the engine's
# SO_PEERCRED checks across the user namespace); where namespaces are not
# allowed, the command still runs and uroce says why the node is missing.
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=tests/integration/ucx_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/ucx_lib.sh"

need_commands ucx_info ucx_perftest ss

failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
ok() { echo "ok: $*" >&2; }

host_had_ib_dir=no
[[ -e /dev/infiniband ]] && host_had_ib_dir=yes

# ucx_info -d output: the transports listed on uroce0:1.
uroce0_transports() {
  awk '/Transport:/ {tl=$3} /Device: uroce0:1/ {print tl}' "$1" | sort -u | tr '\n' ' '
}

check_ucx_info() {
  local who=$1 log=$2
  local tls
  tls=$(uroce0_transports "$log")
  if [[ " $tls" == *" rc_verbs "* && " $tls" == *" ud_verbs "* ]]; then
    ok "$who: ucx_info -d lists uroce0:1 with $tls"
  else
    fail "$who: ucx_info -d lists uroce0:1 with '$tls', not rc_verbs and ud_verbs"
    tail -n 30 "$log" >&2
  fi
}

start_engine uroce0
start_engine second

# ---- root ----
log="$UROCE_LOG_DIR/ucx_info.root.log"
timeout -k 5 60 "$UROCE_BIN" run -- ucx_info -d >"$log" 2>&1 || fail "root: ucx_info -d exit $?"
check_ucx_info root "$log"

# shellcheck disable=SC2016
nodes=$(timeout -k 5 30 "$UROCE_BIN" run -- sh -c \
  'for n in uverbs-uroce0 uverbs-second; do f=/dev/infiniband/$n; [ -c $f ] && [ -r $f ] && [ -w $f ] && echo $n; done' 2>&1)
if [[ $(tr '\n' ' ' <<<"$nodes") == "uverbs-uroce0 uverbs-second " ]]; then
  ok "root: a read-write character node for each engine"
else
  fail "root: nodes for the command: '$nodes'"
fi
# The rest of /dev is the host's: the null device and a pts mount still work.
if timeout -k 5 30 "$UROCE_BIN" run -- sh -c 'echo x >/dev/null && [ -c /dev/zero ] && [ -d /dev/pts ] && [ -e /dev/fd/0 ]'; then
  ok "root: the command's /dev keeps the host's entries"
else
  fail "root: the command's /dev lost host entries"
fi
if [[ $host_had_ib_dir == no && -e /dev/infiniband ]]; then
  fail "the host has a /dev/infiniband now"
else
  ok "the host's /dev is untouched"
fi

# `uroce env` cannot give a shell a namespace: it says what the shell misses.
if [[ ! -c /dev/infiniband/uverbs-uroce0 ]]; then
  env_err=$("$UROCE_BIN" env 2>&1 >/dev/null)
  if grep -q "no node /dev/infiniband/uverbs-uroce0 here\|no /dev/infiniband nodes here" <<<"$env_err"; then
    ok "env notes the missing node"
  else
    fail "env: '$env_err'"
  fi
fi

# A machine with a /dev/infiniband of its own (here made in a mount namespace
# of the test's: a tmpfs /dev with the null device and a uverbs0 node): `run`
# covers only that directory, keeps its nodes and adds uroce's.
if [[ $(id -u) == 0 ]] && command -v unshare >/dev/null; then
  orig_dev="$UROCE_TEST_DIR/orig-dev"
  mkdir "$orig_dev"
  # shellcheck disable=SC2016
  out=$(timeout -k 5 30 unshare --mount --propagation private sh -c '
    mount --rbind /dev "$1" && mount -t tmpfs tmpfs /dev &&
    touch /dev/null && mount --bind "$1/null" /dev/null &&
    mkdir /dev/infiniband && touch /dev/infiniband/uverbs0 &&
    mount --bind "$1/null" /dev/infiniband/uverbs0 &&
    "$2" run -- sh -c "echo \$(ls /dev/infiniband); echo \$(ls /dev)" &&
    echo "after:" $(ls /dev/infiniband)' sh "$orig_dev" "$UROCE_BIN" 2>&1) || true
  if [[ $(head -n 1 <<<"$out") == "uverbs-second uverbs-uroce0 uverbs0" && $(sed -n 2p <<<"$out") == "infiniband null" ]] &&
    grep -qx 'after: uverbs0' <<<"$out"; then
    ok "an existing /dev/infiniband keeps its nodes, gets uroce's, and only for the command"
  else
    fail "existing /dev/infiniband: '$out'"
  fi
fi

# Where no namespace may be made (here: a user namespace that allows no more
# mount namespaces, its /dev a private tmpfs so the host is not touched), the
# command runs all the same and uroce says what is missing and why.
if [[ $(id -u) == 0 ]] && command -v unshare >/dev/null; then
  # shellcheck disable=SC2016
  out=$(timeout -k 5 30 unshare --mount --propagation private sh -c '
    mount -t tmpfs tmpfs /dev &&
    unshare --user --map-root-user sh -c "echo 0 >/proc/sys/user/max_mnt_namespaces &&
      echo 0 >/proc/sys/user/max_user_namespaces && \"\$0\" run -- echo command-ran" "$1"' sh "$UROCE_BIN" 2>&1) || true
  if grep -q '^command-ran$' <<<"$out" && grep -q 'cannot provide /dev/infiniband/uverbs-uroce0.*: unshare' <<<"$out"; then
    ok "without namespaces: the command runs and uroce says why"
  else
    fail "without namespaces: '$out'"
  fi
fi

# Root without CAP_SYS_ADMIN (as in a docker container: no namespaces) gets
# the node made on /dev, and is told so; here that /dev is a tmpfs of a mount
# namespace of the test's, so the host's stays untouched.
if [[ $(id -u) == 0 ]] && command -v unshare >/dev/null && command -v setpriv >/dev/null; then
  dev_copy="$UROCE_TEST_DIR/dev-copy"
  mkdir "$dev_copy"
  # shellcheck disable=SC2016
  out=$(timeout -k 5 30 unshare --mount --propagation private sh -c '
    mount --rbind /dev "$1" && mount -t tmpfs tmpfs /dev &&
    touch /dev/null && mount --bind "$1/null" /dev/null &&
    setpriv --bounding-set=-sys_admin "$2" run -- echo command-ran &&
    echo "after: $(stat -c "%F %t:%T %a" /dev/infiniband/uverbs-uroce0)"' sh "$dev_copy" "$UROCE_BIN" 2>&1) || true
  if grep -q '^command-ran$' <<<"$out" &&
    grep -q '^uroce: created /dev/infiniband/uverbs-uroce0 .* on this host (the null device, 1:3): no private mount namespace' <<<"$out" &&
    grep -qx 'after: character special file 1:3 666' <<<"$out"; then
    ok "root without CAP_SYS_ADMIN: the node is made on /dev, and uroce says so"
  else
    fail "root without CAP_SYS_ADMIN: '$out'"
  fi
fi

# ---- an unprivileged user with an engine of its own ----
user=nobody
group=$(id -gn "$user" 2>/dev/null || echo nogroup)
if [[ $(id -u) != 0 ]] || ! command -v setpriv >/dev/null || ! id "$user" >/dev/null 2>&1; then
  echo "not root or no setpriv/$user: the unprivileged part is skipped" >&2
elif ! setpriv --reuid="$user" --regid="$group" --clear-groups test -x "$UROCE_BIN"; then
  echo "$user cannot run $UROCE_BIN (build tree not readable): the unprivileged part is skipped" >&2
else
  user_dir=$(mktemp -d /tmp/uroce-user.XXXXXX)
  chown "$user:$group" "$user_dir"
  chmod 700 "$user_dir"
  as_user=(setpriv --reuid="$user" --regid="$group" --clear-groups env UROCE_RUNTIME_DIR="$user_dir")
  add_cleanup "timeout -k 5 30 ${as_user[*]} $UROCE_BIN stop --all >&2; rm -rf $user_dir"
  timeout -k 5 30 "${as_user[@]}" "$UROCE_BIN" start >&2 || fail "$user: uroce start"
  log="$UROCE_LOG_DIR/ucx_info.$user.log"
  timeout -k 5 60 "${as_user[@]}" "$UROCE_BIN" run -- sh -c 'id -un; ucx_info -d' >"$log" 2>&1 ||
    fail "$user: ucx_info -d exit $?"
  [[ $(head -n 1 "$log") == "$user" ]] || fail "$user: the command ran as $(head -n 1 "$log")"
  check_ucx_info "$user" "$log"
  UCX_AS=("${as_user[@]}")
  perftest_pair "${user}_rc_am_lat" -- -d uroce0:1 -x rc_verbs -t am_lat -n 1000 -w 100 || fail "$user: rc am_lat"
  perftest_pair "${user}_rc_put_bw" -- -d uroce0:1 -x rc_verbs -t put_bw -D zcopy -s 65536 -n 200 -w 20 ||
    fail "$user: rc put_bw zcopy"
  # Without shared pages every byte goes through the engine's process_vm_*
  # into a process of the user namespace.
  perftest_pair "${user}_rc_get_process_vm" --env UROCE_SHARED_MR=0 -- -d uroce0:1 -x rc_verbs -t get -D zcopy \
    -s 65536 -n 200 -w 20 || fail "$user: rc get zcopy without shared pages"
  perftest_pair "${user}_ud_am_lat" -- -d uroce0:1 -x ud_verbs -t am_lat -n 1000 -w 100 || fail "$user: ud am_lat"
  UCX_AS=()
fi

if ((failures > 0)); then
  echo "ucx_devices: $failures failed" >&2
  exit 1
fi
echo "ucx_devices: all passed"
