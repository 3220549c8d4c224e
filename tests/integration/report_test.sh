#!/usr/bin/env bash
# `uroce status --json`, `uroce stats --json` and `uroce stats --watch`
# (issue 15) against a real engine with traffic: the JSON parses and holds
# the counters, the QPs and the clients; --watch shows the rates moving.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
have_engine || { echo "report_test: uroced is not built" >&2; exit 1; }

[[ "$(uroce stats --json)" == *'"engines": []'* ]] ||
  { echo "report_test: no engine should be an empty list" >&2; exit 1; }
start_engine uroce0
json="$UROCE_LOG_DIR/before.json"
uroce stats --json >"$json"
python3 - "$json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
r = d["engines"][0]["report"]
assert d["engines"][0]["name"] == "uroce0", d
assert r["device"] == "uroce0" and r["port"]["state"] == "ACTIVE", r["port"]
for c in ("rx_packets", "tx_packets", "retransmits", "memory_faults"):
    assert c in r["counters"], c
assert r["engine"]["pid"] > 0 and "drops" in r
PY

# Traffic for a few seconds; the reports must see it.
uroce_run ib_write_bw -x 0 -D 4 >"$UROCE_LOG_DIR/server.log" 2>&1 &
server=$!
sleep 0.5
uroce_run ib_write_bw -x 0 -D 4 localhost >"$UROCE_LOG_DIR/client.log" 2>&1 &
client=$!
sleep 1.5
uroce status --json >"$UROCE_LOG_DIR/during.json"
timeout 20 "$UROCE_BIN" stats --watch --interval 0.5 --count 3 >"$UROCE_LOG_DIR/watch.log"
wait "$client" "$server"
python3 - "$UROCE_LOG_DIR/during.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["engines"][0]["report"]
assert r["counters"]["rx_packets"] > 0, r["counters"]
assert len(r["qps"]) == 2 and {q["type"] for q in r["qps"]} == {"RC"}, r["qps"]
assert len(r["clients"]) >= 2, r["clients"]
PY
cat "$UROCE_LOG_DIR/watch.log"
(($(grep -c '^== uroce0' "$UROCE_LOG_DIR/watch.log") == 3)) ||
  { echo "report_test: --count 3 did not give three refreshes" >&2; exit 1; }
grep -qE 'rx [0-9.]+ [kMG]pkt/s' "$UROCE_LOG_DIR/watch.log" ||
  { echo "report_test: --watch never showed traffic" >&2; exit 1; }
grep -qE '^ +[0-9]+ RC +RTS' "$UROCE_LOG_DIR/watch.log" ||
  { echo "report_test: --watch did not list the QPs" >&2; exit 1; }

# Bad combinations are usage errors.
if uroce stats --json --watch >/dev/null 2>&1; then
  echo "report_test: --json --watch was accepted" >&2
  exit 1
fi
if uroce status --watch >/dev/null 2>&1; then
  echo "report_test: status --watch was accepted" >&2
  exit 1
fi
echo "report_test: passed"
