#!/usr/bin/env bash
# Debian's Open MPI (mpirun, pml ucx) through uroce0: a ping-pong (8 B to
# 1 MiB, data checked) and an all-reduce between two ranks under `uroce run`,
# once with UCX on rc_verbs and once on ud_verbs, each on uroce0:1 only.
# Proof that the ranks used uroce0 and not shared memory or TCP: UCP reports
# each endpoint's transports (UCX_LOG_LEVEL=info), Open MPI's own shared
# memory and TCP are switched off (--mca btl self), and the engine counts the
# frames of the run.
#
#   mpi_test.sh PATH/TO/mpi_pingpong
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=tests/integration/ucx_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/ucx_lib.sh"

program=${1:?usage: mpi_test.sh PATH/TO/mpi_pingpong}
need_commands mpirun
start_engine uroce0

as_root=()
[[ $(id -u) == 0 ]] && as_root=(--allow-run-as-root)

rx_packets() {
  "$UROCE_BIN" stats --name uroce0 | awk '$1 == "rx_packets" {print $2}'
}

failures=0
for tl in rc_verbs ud_verbs; do
  tls=$tl
  [[ $tl == rc_verbs ]] && tls=rc_verbs,ud_verbs  # UCP wires RC up over UD
  log="$UROCE_LOG_DIR/mpi.$tl.log"
  before=$(rx_packets)
  rc=0
  timeout -k 5 120 "$UROCE_BIN" run -- mpirun "${as_root[@]}" -np 2 --oversubscribe --bind-to none \
    --mca pml ucx --mca btl self \
    -x UCX_TLS="$tls" -x UCX_NET_DEVICES=uroce0:1 -x UCX_LOG_LEVEL=info \
    "$program" </dev/null >"$log" 2>&1 || rc=$?
  after=$(rx_packets)
  if ((rc == 0)) && grep -q '^mpi_pingpong: ok$' "$log" && expect_transport "$log" "$tl" &&
    ((after - before > 1000)); then
    echo "ok: mpi over $tl: $(grep -c 'ep_cfg' "$log") endpoint configurations on $tl/uroce0:1," \
      "$((after - before)) frames through the engine" >&2
    grep '^mpi_pingpong:' "$log" >&2
  else
    echo "FAIL: mpi over $tl: exit $rc, engine frames $((after - before))" >&2
    tail -n 40 "$log" >&2
    failures=$((failures + 1))
  fi
done

if ((failures > 0)); then
  dump_engine_logs
  exit 1
fi
echo "mpi: all passed"
