#!/usr/bin/env bash
# The documentation's examples, run verbatim: every fenced sh block that a
# `<!-- doc-example -->` line precedes in README.md and docs/*.md, and the
# EXAMPLES of uroce(1), each in a runtime directory of its own with
# `build/bin/uroce` and `uroce` meaning the build under test. A copy-paste
# example that races (a client before its server listens) or drifted from
# the command line fails here.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

work="$UROCE_TEST_DIR/doc-examples"
mkdir -p "$work"
ln -sfn "$UROCE_BUILD_DIR" "$work/build"
export PATH="$UROCE_BUILD_DIR/bin:$PATH"
blocks="$work/blocks"
rm -rf "$blocks" && mkdir -p "$blocks"
python3 - "$UROCE_SRC_DIR" "$blocks" <<'PY'
import glob, os, re, sys
src, out = sys.argv[1], sys.argv[2]
n = 0
def emit(label, text):
    global n
    n += 1
    with open(os.path.join(out, f"{n:02d}.sh"), "w") as f:
        f.write(f"# {label}\n{text}")
for path in [os.path.join(src, "README.md")] + sorted(glob.glob(os.path.join(src, "docs", "*.md"))):
    text = open(path).read()
    for m in re.finditer(r"<!-- doc-example -->\n```sh\n(.*?)```", text, re.S):
        line = text[: m.start()].count("\n") + 1
        emit(f"{os.path.relpath(path, src)}:{line}", m.group(1))
man = open(os.path.join(src, "docs", "man", "uroce.1")).read()
m = re.search(r"^\.SH EXAMPLES\n\.nf\n(.*?)^\.fi", man, re.S | re.M)
emit("docs/man/uroce.1 EXAMPLES", m.group(1).replace("\\-", "-"))
PY

failures=0 count=0
for block in "$blocks"/*.sh; do
  count=$((count + 1))
  label=$(head -1 "$block" | cut -c3-)
  name=$(basename "$block" .sh)
  rt="$work/run-$name"
  mkdir -p "$rt" && chmod 700 "$rt"
  log="$UROCE_LOG_DIR/doc-example-$name.log"
  rc=0
  (cd "$work" && UROCE_RUNTIME_DIR=$rt timeout -k 5 180 bash -euo pipefail "$block") >"$log" 2>&1 || rc=$?
  UROCE_RUNTIME_DIR=$rt "$UROCE_BIN" stop --all >/dev/null 2>&1 || true
  # `wait` does not pass a server's failure on: its output is checked
  # (the counter lines of `uroce stats`, "name value    # what", aside).
  if ((rc == 0)) && ! grep -v '    # ' "$log" | grep -qiE "couldn't|[^_]error|failed|invalid data|not found"; then
    echo "ok   $label"
  else
    echo "FAIL $label (exit $rc)"
    sed 's/^/    | /' "$log" | tail -n 25
    failures=$((failures + 1))
  fi
done
((count >= 5)) || { echo "FAIL: only $count examples found"; exit 1; }
if ((failures)); then
  echo "doc_examples: $failures of $count failed"
  exit 1
fi
echo "doc_examples: all $count passed"
