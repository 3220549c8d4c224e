#!/usr/bin/env bash
# `cmake --install` gives a uroce that works on its own (issue 15): uroce,
# uroced, the drop-in library in a private lib/uroce and the man page land in
# the prefix; the installed `uroce start` / `uroce run` run Debian's
# ibv_devices and ibv_rc_pingpong, as root and as an ordinary user with a
# per-user runtime directory.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

have_engine || { echo "install_test: uroced is not built" >&2; exit 1; }

# World-readable, so that the ordinary user below can run what is installed.
root_dir="$(mktemp -d /tmp/uroce-install.XXXXXX)"
chmod 755 "$root_dir"
add_cleanup "rm -rf '$root_dir'"
prefix="$root_dir/usr"
timeout 120 cmake --install "$UROCE_BUILD_DIR" --prefix "$prefix" >"$UROCE_LOG_DIR/install.log" 2>&1 ||
  { cat "$UROCE_LOG_DIR/install.log" >&2; echo "install_test: cmake --install failed" >&2; exit 1; }

for f in bin/uroce bin/uroced lib/uroce/libibverbs.so.1 share/man/man1/uroce.1 \
  share/uroce/bench/uroce_bench.py share/bash-completion/completions/uroce \
  bin/uroce-tag-pingpong bin/uroce-raw-udp-echo share/doc/uroce/examples/tag_pingpong.c share/man/man1/uroce-tag-pingpong.1; do
  [[ -e "$prefix/$f" ]] || { echo "install_test: $f is not installed" >&2; exit 1; }
done
# The drop-in librdmacm beside it (built where librdmacm-dev is installed).
have_rdmacm=0
if [[ -e "$UROCE_BUILD_DIR/provider/librdmacm.so.1" ]]; then
  have_rdmacm=1
  [[ -e "$prefix/lib/uroce/librdmacm.so.1" ]] || { echo "install_test: lib/uroce/librdmacm.so.1 is not installed" >&2; exit 1; }
fi
# The drop-in libmlx5 (mlx5 mode; built where <infiniband/mlx5dv.h> is).
if [[ -e "$UROCE_BUILD_DIR/provider/libmlx5.so.1" && ! -e "$prefix/lib/uroce/libmlx5.so.1" ]]; then
  echo "install_test: lib/uroce/libmlx5.so.1 is not installed" >&2
  exit 1
fi
# The drop-ins never land where the dynamic linker would find them by default.
if find "$prefix" -name 'libibverbs*' -o -name 'librdmacm*' -o -name 'libmlx5*' | grep -v "^$prefix/lib/uroce/"; then
  echo "install_test: a libibverbs or librdmacm outside lib/uroce" >&2
  exit 1
fi
if command -v man >/dev/null; then
  man -l "$prefix/share/man/man1/uroce.1" 2>/dev/null | grep -q "uroce run" ||
    { echo "install_test: the man page does not render" >&2; exit 1; }
fi

# The installed command, found from the prefix alone (no build tree).
UROCE_BIN="$prefix/bin/uroce"
[[ "$("$UROCE_BIN" env)" == *"LD_LIBRARY_PATH='$prefix/lib/uroce'"* ]] ||
  { "$UROCE_BIN" env >&2; echo "install_test: uroce env does not name lib/uroce" >&2; exit 1; }
start_engine uroce0
"$UROCE_BIN" run -- ibv_devices | grep -q uroce0 ||
  { echo "install_test: the installed uroce run does not list uroce0" >&2; exit 1; }
run_pair --label root 60 ibv_rc_pingpong -g 0 -n 200 -- ibv_rc_pingpong -g 0 -n 200 localhost
if ((have_rdmacm)) && command -v rping >/dev/null; then
  run_pair --label root-rping --forbid 'error|[Ff]ail' 60 rping -s -a 127.0.0.1 -C 5 -v -- rping -c -a 127.0.0.1 -C 5 -v
  grep -q 'rdma-ping-4' "$RUN_PAIR_CLIENT_LOG"
  echo "install_test: root: rping through the installed librdmacm"
fi
stop_all_engines
echo "install_test: root: ibv_devices and ibv_rc_pingpong through the installed uroce"

# An ordinary user: its own engine in its own runtime directory
# ($XDG_RUNTIME_DIR/uroce), no root anywhere.
if ((EUID != 0)) || ! command -v setpriv >/dev/null || ! id nobody >/dev/null 2>&1; then
  echo "install_test: not root (or no setpriv/nobody): the ordinary-user part is skipped"
  exit 0
fi
user_dir="$root_dir/xdg-nobody"
mkdir -p "$user_dir"
chown nobody "$user_dir"
chmod 700 "$user_dir"
as_nobody() {
  setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups \
    env -u UROCE_RUNTIME_DIR HOME=/ XDG_RUNTIME_DIR="$user_dir" "$@"
}
add_cleanup "as_nobody timeout 30 '$UROCE_BIN' stop --all >/dev/null 2>&1"
as_nobody timeout 30 "$UROCE_BIN" start >"$UROCE_LOG_DIR/nobody-start.log" 2>&1 ||
  { cat "$UROCE_LOG_DIR/nobody-start.log" >&2; echo "install_test: nobody: uroce start failed" >&2; exit 1; }
[[ -S "$user_dir/uroce/uroce0.sock" ]] ||
  { echo "install_test: nobody's engine is not in \$XDG_RUNTIME_DIR/uroce" >&2; exit 1; }
as_nobody timeout 30 "$UROCE_BIN" run -- ibv_devices | grep -q uroce0 ||
  { echo "install_test: nobody: uroce run does not list uroce0" >&2; exit 1; }
run_pair --as as_nobody --label nobody 60 ibv_rc_pingpong -g 0 -n 200 -- \
  ibv_rc_pingpong -g 0 -n 200 localhost ||
  { tail -n 30 "$user_dir/uroce/uroce0.log" >&2 || true; echo "install_test: nobody: ibv_rc_pingpong failed" >&2; exit 1; }
grep -q "bytes in" "$RUN_PAIR_CLIENT_LOG"
as_nobody timeout 30 "$UROCE_BIN" stop --all >/dev/null
echo "install_test: nobody: ibv_devices and ibv_rc_pingpong through the installed uroce"
