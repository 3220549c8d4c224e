#!/usr/bin/env bash
# The container recipe (Dockerfile, tools/container/entrypoint.sh; issue 15)
# without docker: what the image holds (uroce installed into a prefix) and its
# entry point, run as a rootless container runs: an ordinary user made root
# of a user namespace of its own, in a PID namespace of its own, with no
# capability on the host and no /dev/infiniband. The entry point starts the
# engine; Debian's ib_write_bw runs between two processes through it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

have_engine || { echo "container_test: uroced is not built" >&2; exit 1; }
command -v unshare >/dev/null || { echo "SKIP: no unshare"; exit 77; }
command -v ib_write_bw >/dev/null || { echo "SKIP: no perftest"; exit 77; }
grep -q '^ENTRYPOINT \["/usr/local/bin/uroce-entrypoint"\]' "$UROCE_SRC_DIR/Dockerfile" ||
  { echo "container_test: the Dockerfile does not use the entry point" >&2; exit 1; }

root_dir="$(mktemp -d /tmp/uroce-container.XXXXXX)"
chmod 755 "$root_dir"
add_cleanup "rm -rf '$root_dir'"
prefix="$root_dir/usr"
timeout 120 cmake --install "$UROCE_BUILD_DIR" --prefix "$prefix" >"$UROCE_LOG_DIR/install.log" 2>&1 ||
  { cat "$UROCE_LOG_DIR/install.log" >&2; exit 1; }
install -m 755 "$UROCE_SRC_DIR/tools/container/entrypoint.sh" "$prefix/bin/uroce-entrypoint"

user=()
if ((EUID == 0)) && command -v setpriv >/dev/null && id nobody >/dev/null 2>&1; then
  user=(setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups)
fi
rt="$root_dir/run"
mkdir -p "$rt"
((${#user[@]})) && chown nobody "$rt"
chmod 700 "$rt"
# Root inside, nobody outside: what `docker run` (rootless) gives a process.
container() {
  "${user[@]}" env -i PATH="$prefix/bin:/usr/bin:/bin" HOME=/ UROCE_RUNTIME_DIR="$rt" \
    unshare --user --map-root-user --pid --fork --mount-proc "$@"
}
if ! container true 2>"$UROCE_LOG_DIR/unshare.log"; then
  cat "$UROCE_LOG_DIR/unshare.log"
  echo "SKIP: user namespaces are not available here"
  exit 77
fi

log="$UROCE_LOG_DIR/container.log"
rc=0
container timeout -k 5 120 uroce-entrypoint sh -c '
  [ ! -e /dev/infiniband ] || echo "note: this host has /dev/infiniband"
  uroce run -- ibv_devices
  cd "$UROCE_RUNTIME_DIR"
  uroce run -- ib_write_bw -x 0 -n 200 -s 65536 >server.out 2>&1 &
  server=$!
  sleep 1
  ok=1
  for i in 1 2 3 4 5; do
    if uroce run -- ib_write_bw -x 0 -n 200 -s 65536 localhost; then ok=0; break; fi
    sleep 1
  done
  wait $server; s=$?
  cat server.out
  uroce stop --all
  exit $((ok + s))' >"$log" 2>&1 || rc=$?
cat "$log"
((rc == 0)) || { echo "container_test: the container run failed (exit $rc)" >&2; exit 1; }
grep -q "uroce0" "$log" || { echo "container_test: ibv_devices did not list uroce0" >&2; exit 1; }
(($(grep -cE '^ *65536 +200 ' "$log") >= 2)) ||
  { echo "container_test: ib_write_bw did not report on both sides" >&2; exit 1; }
echo "container_test: the entry point started uroce0 and ib_write_bw ran, unprivileged, in namespaces of its own"
