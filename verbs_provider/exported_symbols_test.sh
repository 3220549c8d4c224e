#!/bin/sh
# Checks that our libibverbs.so.1 exports exactly the dynamic symbols of the
# system's rdma-core libibverbs.so.1: same names, same version nodes, same
# default (name@@VER) or hidden compat (name@VER) binding, same kind
# (function or object). Missing symbols break binaries and providers linked
# against rdma-core; extra ones are leaks of our internals.
#
# usage: exported_symbols_test.sh <our libibverbs.so.1> [system libibverbs.so.1]
# Exit 77 (skipped) when the system library or objdump is not there.
set -eu

ours=${1:?usage: $0 <our libibverbs.so.1> [system libibverbs.so.1]}
system=${2:-/usr/lib/x86_64-linux-gnu/libibverbs.so.1}

if [ ! -e "$system" ]; then
  echo "SKIP: no system library at $system"
  exit 77
fi
if ! command -v objdump >/dev/null 2>&1; then
  echo "SKIP: objdump (binutils) not installed"
  exit 77
fi
if [ ! -e "$ours" ]; then
  echo "FAIL: $ours does not exist"
  exit 1
fi

# One line per defined dynamic symbol: "name@@VER function", "name@VER object"
# (objdump -T prints hidden versions in parentheses). Undefined imports and
# the absolute version-node symbols are skipped.
exported() {
  objdump -T "$1" | awk '
    / D[FO] / && !/\*UND\*/ && !/\*ABS\*/ {
      name = $NF; ver = $(NF - 1)
      kind = / DO / ? "object" : "function"
      if (ver ~ /^\(.*\)$/) { gsub(/[()]/, "", ver); sep = "@" } else { sep = "@@" }
      print name sep ver " " kind
    }' | LC_ALL=C sort -u
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

exported "$system" >"$tmp/system"
exported "$ours" >"$tmp/ours"

if [ ! -s "$tmp/system" ]; then
  echo "FAIL: no symbols read from $system"
  exit 1
fi

LC_ALL=C comm -23 "$tmp/system" "$tmp/ours" >"$tmp/missing"
LC_ALL=C comm -13 "$tmp/system" "$tmp/ours" >"$tmp/extra"

status=0
if [ -s "$tmp/missing" ]; then
  echo "FAIL: exported by $system but not by $ours:"
  sed 's/^/  /' "$tmp/missing"
  status=1
fi
if [ -s "$tmp/extra" ]; then
  echo "FAIL: exported by $ours but not by $system:"
  sed 's/^/  /' "$tmp/extra"
  status=1
fi
if [ "$status" -eq 0 ]; then
  echo "OK: $(wc -l <"$tmp/ours") symbols match $system"
fi
exit "$status"
