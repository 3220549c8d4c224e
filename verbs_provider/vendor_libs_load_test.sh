#!/bin/sh
# Checks that the system's rdma-core libraries which get loaded next to
# libibverbs (the mlx5 and efa providers, which perftest links directly, and
# librdmacm) resolve every symbol they import from our libibverbs.so.1, and
# that the installed verbs tools do too.
#
# usage: vendor_libs_load_test.sh <directory holding our libibverbs.so.1>
# Exit 77 (skipped) when none of the vendor libraries is installed.
set -eu

provider_dir=${1:?usage: $0 <directory holding our libibverbs.so.1>}
libdir=/usr/lib/x86_64-linux-gnu

if [ ! -e "$provider_dir/libibverbs.so.1" ]; then
  echo "FAIL: $provider_dir/libibverbs.so.1 does not exist"
  exit 1
fi
# Absolute and symlink-free, so that it compares equal to what ldd prints.
provider_dir=$(cd "$provider_dir" && pwd -P)
ours="$provider_dir/libibverbs.so.1"
if ! command -v python3 >/dev/null 2>&1; then
  echo "SKIP: python3 not installed"
  exit 77
fi

LD_LIBRARY_PATH="$provider_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
# A sanitizer build's provider (tests/sanitize.sh) links the ASan runtime,
# which must come first in a program not built with it: it is preloaded for
# python3, as `uroce run` does for the programs it runs (tools/uroce.cc), and
# python3's own leaks at exit are not ours.
asan_runtime=$(ldd "$ours" 2>/dev/null | awk '$1 ~ /^libasan\.so/ {print $3; exit}')
python3_loading() {
  if [ -n "$asan_runtime" ]; then
    LD_PRELOAD="$asan_runtime${LD_PRELOAD:+:$LD_PRELOAD}" \
      ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" python3 "$@"
  else
    python3 "$@"
  fi
}
status=0
loaded=0

# dlopen with RTLD_NOW, so every import is bound at once, then make sure the
# libibverbs the process mapped is ours and not the system one.
for lib in libmlx5.so.1 libefa.so.1 librdmacm.so.1; do
  path="$libdir/$lib"
  if [ ! -e "$path" ]; then
    echo "note: $path not installed, not checked"
    continue
  fi
  loaded=$((loaded + 1))
  if python3_loading - "$path" "$ours" <<'EOF'
import ctypes, os, sys
path, ours = sys.argv[1], os.path.realpath(sys.argv[2])
try:
    ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
except OSError as e:  # ctypes reports dlerror() here
    print(f"FAIL: dlopen({path}): {e}")
    sys.exit(1)
with open("/proc/self/maps") as maps:
    # The mapping shows the real file (libibverbs.so.1.14.44.0), not the soname link.
    mapped = {os.path.realpath(l.split()[-1]) for l in maps
              if os.path.basename(l.split()[-1]).startswith("libibverbs.so.1")}
if mapped != {ours}:
    print(f"FAIL: {path} bound to {sorted(mapped)}, expected {ours}")
    sys.exit(1)
print(f"OK: {path} loads against {ours}")
EOF
  then :; else status=1; fi
done

if [ "$loaded" -eq 0 ]; then
  echo "SKIP: none of the vendor libraries is installed"
  exit 77
fi

# ldd -r performs every relocation of the executable and its libraries and
# prints "undefined symbol" / "version ... not found" for what is missing.
for tool in ib_send_bw ib_write_bw ib_read_bw ib_atomic_bw ib_send_lat ib_write_lat \
    ib_read_lat ib_atomic_lat ibv_devinfo ibv_devices ibv_rc_pingpong ibv_ud_pingpong; do
  bin=$(command -v "$tool" 2>/dev/null) || continue
  out=$(ldd -r "$bin" 2>&1) || true
  if ! printf '%s\n' "$out" | grep -qF "libibverbs.so.1 => $ours"; then
    echo "FAIL: $bin does not resolve libibverbs.so.1 to $provider_dir"
    printf '%s\n' "$out" | grep libibverbs | sed 's/^/  /'
    status=1
    continue
  fi
  bad=$(printf '%s\n' "$out" | grep -E 'undefined symbol|not found|not defined' || true)
  if [ -n "$bad" ]; then
    echo "FAIL: ldd -r $bin:"
    printf '%s\n' "$bad" | sed 's/^/  /'
    status=1
  else
    echo "OK: ldd -r $bin"
  fi
done

exit "$status"
