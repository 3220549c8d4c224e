#!/usr/bin/env bash
# ctest bench_quick: `uroce bench --quick` runs to the end without an error
# and writes a results.json with every expected key, a table and a plot. The
# figures are printed, never judged.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${UROCE_BUILD_DIR:-$here/../../build}"
out="$(mktemp -d "${TMPDIR:-/tmp}/uroce-bench-quick.XXXXXX")"
trap 'rm -rf "$out"' EXIT

start=$SECONDS
"$build/bin/uroce" bench --quick --out "$out"
elapsed=$((SECONDS - start))
echo "bench --quick took ${elapsed} s"
((elapsed <= 120)) || echo "note: --quick should finish in under 120 s (machine busy?)"
for f in results.json table.md bench.svg; do
  [[ -s "$out/$f" ]] || { echo "FAIL: $f not written"; exit 1; }
done
grep -q '</svg>' "$out/bench.svg" || { echo "FAIL: bench.svg is incomplete"; exit 1; }
python3 "$here/check_results.py" "$out/results.json"
