#!/usr/bin/env bash
# ctest bench_quick: `uroce bench --quick` runs to the end without an error
# and writes a results.json with every expected key, a table and a plot. The
# figures are printed, never judged; the scale run's traffic must all pass.
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
# Traffic, unlike a figure, is judged: every pair of the scale run passed.
python3 - "$out/results.json" <<'PY'
import json, sys
sc = json.load(open(sys.argv[1]))["scale"]
if sc["pairs_ok"] != sc["pairs"]:
    sys.exit("FAIL: scale: %d of %d perftest pairs passed traffic (%s)" % (sc["pairs_ok"], sc["pairs"], sc["failures"]))
print("scale: all %d pairs passed traffic" % sc["pairs"])
PY

# The UCX part (not in --quick's default set): its rows come out with figures
# for every transport it names.
if command -v ucx_perftest >/dev/null 2>&1; then
  "$build/bin/uroce" bench --quick --only ucx --out "$out/ucx"
  python3 - "$out/ucx/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["ucx"]
want = {"rc_verbs": ("am_bw_1k", "put_bw_64k", "am_lat_8b"), "rc_mlx5": ("am_bw_1k", "put_bw_64k", "am_lat_8b"),
        "dc_mlx5": ("am_bw_1k", "put_bw_64k", "am_lat_8b"),
        "ud_verbs": ("am_bw_1k", "am_lat_8b"), "ud_mlx5": ("am_bw_1k", "am_lat_8b")}
missing = ["%s %s" % (tl, k) for tl, keys in want.items() for k in keys if not (r.get(tl) or {}).get(k, {}).get("msgs_per_s")]
if missing:
    sys.exit("FAIL: UCX rows without figures: " + ", ".join(missing))
print("UCX rows: all %d figures present" % sum(len(k) for k in want.values()))
PY
else
  echo "note: ucx-utils is not installed: the bench's UCX part not run"
fi
