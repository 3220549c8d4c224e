#!/usr/bin/env bash
# The Debian package (debian/, issue 15): dpkg-buildpackage builds it from a
# scratch copy of the source tree; lintian finds no error or warning; apt can
# install it on this Debian 12 (its dependencies resolve); its files, unpacked
# into a scratch root, start an engine and run Debian's ibv_rc_pingpong as an
# ordinary user; its systemd unit is well-formed.
#
# Skips (exit 77) without dpkg-buildpackage/debhelper/lintian, which
# tools/install-deps.sh installs.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

for tool in dpkg-buildpackage dh lintian fakeroot; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed"; exit 77; }
done

work="$(mktemp -d /tmp/uroce-package.XXXXXX)"
chmod 755 "$work"
add_cleanup "rm -rf '$work'"
src="$work/uroce"
mkdir -p "$src"
# The tracked files only (a clean checkout), never the build tree.
if git -C "$UROCE_SRC_DIR" rev-parse --git-dir >/dev/null 2>&1; then
  (cd "$UROCE_SRC_DIR" && git ls-files -z --cached --others --exclude-standard |
    xargs -0 cp --parents -t "$src" 2>/dev/null) || true
else
  (cd "$UROCE_SRC_DIR" && tar --exclude=./build -cf - .) | tar -C "$src" -xf -
fi
[[ -f "$src/debian/control" ]] || { echo "package_test: no debian/ in the source" >&2; exit 1; }

log="$UROCE_LOG_DIR/dpkg-buildpackage.log"
# noopt (debian/rules): -O0, half the compile time; the packaging, its
# contents and a device running from them are what this test checks.
if ! (cd "$src" && DEB_BUILD_OPTIONS=noopt timeout 900 dpkg-buildpackage -b -us -uc -j2) >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  echo "package_test: dpkg-buildpackage failed" >&2
  exit 1
fi
deb=$(ls "$work"/uroce_*.deb)
echo "package_test: built $(basename "$deb")"

lintian_log="$UROCE_LOG_DIR/lintian.log"
lintian --allow-root "$deb" >"$lintian_log" 2>&1 || true
if grep -E '^[EW]: ' "$lintian_log"; then
  echo "package_test: lintian reports the lines above" >&2
  exit 1
fi
echo "package_test: lintian: no errors, no warnings"

contents=$(dpkg-deb -c "$deb" | awk '{print $6}')
for f in ./usr/bin/uroce ./usr/bin/uroced ./usr/lib/uroce/libibverbs.so.1 ./usr/lib/uroce/libmlx5.so.1 \
  ./usr/share/man/man1/uroce.1.gz ./usr/share/man/man8/uroced.8.gz \
  ./usr/share/doc/uroce/copyright ./lib/systemd/system/uroced@.service \
  ./usr/share/bash-completion/completions/uroce ./usr/bin/uroce-tag-pingpong ./usr/bin/uroce-raw-udp-echo \
  ./usr/share/doc/uroce/examples/tag_pingpong.c; do
  grep -qxF "$f" <<<"$contents" || { echo "package_test: $f is not in the package" >&2; exit 1; }
done
if grep -E 'libibverbs' <<<"$contents" | grep -v '^\./usr/lib/uroce/'; then
  echo "package_test: a libibverbs outside /usr/lib/uroce" >&2
  exit 1
fi

# apt would install it here: every dependency resolves (simulated: the
# test leaves the system's packages alone).
if ((EUID == 0)); then
  apt-get install -s "$deb" >"$UROCE_LOG_DIR/apt-simulate.log" 2>&1 ||
    { cat "$UROCE_LOG_DIR/apt-simulate.log" >&2; echo "package_test: apt cannot install it" >&2; exit 1; }
  grep -q '^Inst uroce ' "$UROCE_LOG_DIR/apt-simulate.log" ||
    { cat "$UROCE_LOG_DIR/apt-simulate.log" >&2; echo "package_test: apt would not install uroce" >&2; exit 1; }
  echo "package_test: apt-get install resolves its dependencies"
fi

unit="$work/root/lib/systemd/system/uroced@.service"
dpkg-deb -x "$deb" "$work/root"
grep -q '^ExecStart=/usr/bin/uroced --name %i ' "$unit" ||
  { echo "package_test: the unit does not start uroced" >&2; exit 1; }
if command -v systemd-analyze >/dev/null; then
  cp "$unit" "$work/uroced@test.service"
  sed -i "s|/usr/bin/uroced|$work/root/usr/bin/uroced|" "$work/uroced@test.service"
  systemd-analyze verify --man=no "$work/uroced@test.service" >"$UROCE_LOG_DIR/unit.log" 2>&1 ||
    { cat "$UROCE_LOG_DIR/unit.log" >&2; echo "package_test: systemd-analyze rejects the unit" >&2; exit 1; }
fi

# The packaged uroce (unpacked, as installed but under a scratch root) runs
# a device for an ordinary user.
uroce_pkg="$work/root/usr/bin/uroce"
runner=()
if ((EUID == 0)) && command -v setpriv >/dev/null && id nobody >/dev/null 2>&1; then
  runner=(setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups)
fi
rt="$work/rt"
mkdir -p "$rt"
((${#runner[@]})) && chown nobody "$rt"
chmod 700 "$rt"
as_user() { "${runner[@]}" env UROCE_RUNTIME_DIR="$rt" HOME=/ "$@"; }
add_cleanup "[[ ! -x '$uroce_pkg' ]] || as_user timeout 30 '$uroce_pkg' stop --all >/dev/null 2>&1"
as_user timeout 30 "$uroce_pkg" start >"$UROCE_LOG_DIR/pkg-start.log" 2>&1 ||
  { cat "$UROCE_LOG_DIR/pkg-start.log" >&2; echo "package_test: uroce start failed" >&2; exit 1; }
UROCE_BIN="$uroce_pkg"  # run_pair's uroce: the packaged one
run_pair --as as_user --label pkg 60 ibv_rc_pingpong -g 0 -n 100 -- \
  ibv_rc_pingpong -g 0 -n 100 localhost ||
  { tail -n 30 "$rt/uroce0.log" >&2 || true; echo "package_test: ibv_rc_pingpong through the packaged uroce failed" >&2; exit 1; }
as_user timeout 30 "$uroce_pkg" stop --all >/dev/null
user_name=$(id -un)
((${#runner[@]})) && user_name=nobody
echo "package_test: the packaged uroce ran ibv_rc_pingpong as $user_name"

# The GitHub Action (action.yml) on this clean copy, as a project's CI runs
# it: its one step, GITHUB_ACTION_PATH the copy, the device checked by a
# command under it, the engine stopped after. From source: the build it
# makes in RUNNER_TEMP/uroce-build is the tree dpkg-buildpackage just made
# of the same copy, configured without the tests as the recipe configures
# (a built tree is used as it is, so it is installed, not built twice). From
# the .deb (as root): apt-get installs it, it runs, dpkg removes it.
if type -P uroce >/dev/null; then
  echo "package_test: the action not run: a uroce is installed on PATH, the action would use it"
  exit 0
fi
step="$work/action-step.sh"
action_step "$src/action.yml" "$step"
obj=$(ls -d "$src"/obj-*/ | head -n 1)
grep -q '^UROCE_BUILD_TESTS:BOOL=OFF$' "$obj/CMakeCache.txt" ||
  { echo "package_test: the package's build tree has the tests" >&2; exit 1; }
mkdir -p "$work/runner"
ln -sfn "$obj" "$work/runner/uroce-build"
check='ibv_devinfo -d uroce0 | grep -q PORT_ACTIVE'
run_action() {  # LABEL DEB
  (cd "$work" && timeout 300 env GITHUB_ACTION_PATH="$src" RUNNER_TEMP="$work/runner" UROCE_ACTION_RUN="$check" \
    UROCE_ACTION_DEVICE=uroce0 UROCE_ACTION_ENGINE_ARGS="--cpu none" UROCE_ACTION_DEB="$2" \
    UROCE_ACTION_PREFIX="$work/action-prefix" bash -e "$step") >"$UROCE_LOG_DIR/action-$1.log" 2>&1 ||
    { tail -n 30 "$UROCE_LOG_DIR/action-$1.log" >&2; echo "package_test: the action ($1) failed" >&2; exit 1; }
}
run_action source ""
[[ -x "$work/action-prefix/bin/uroce" ]] || { echo "package_test: the action installed no uroce" >&2; exit 1; }
grep -q "^== uroce0" <<<"$("$work/action-prefix/bin/uroce" status 2>/dev/null)" &&
  { echo "package_test: the action left its engine running" >&2; exit 1; }
echo "package_test: the action ran from the clean copy (built without tests, installed, engine up, stopped)"
if ((EUID == 0)) && [[ ${CI:-} == true || -n ${UROCE_TEST_INSTALL_DEB:-} ]]; then
  add_cleanup "dpkg -r uroce >/dev/null 2>&1"
  run_action deb "$deb"
  [[ $(type -P uroce) == /usr/bin/uroce ]] || { echo "package_test: the action did not install the .deb" >&2; exit 1; }
  dpkg -r uroce >"$UROCE_LOG_DIR/dpkg-remove.log" 2>&1 ||
    { cat "$UROCE_LOG_DIR/dpkg-remove.log" >&2; echo "package_test: dpkg -r uroce failed" >&2; exit 1; }
  echo "package_test: the action installed the .deb, ran under it and it was removed"
fi
