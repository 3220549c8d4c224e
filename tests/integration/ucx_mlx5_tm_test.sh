#!/usr/bin/env bash
# Hardware tag matching through Debian's unmodified UCX (rc_mlx5 with
# UCX_RC_MLX5_TM_ENABLE=y) on an engine in mlx5 mode: UCX makes a TM-SRQ,
# takes it in mlx5's format (mlx5dv_init_obj), posts its tagged buffers as
# TAG_MATCHING WQEs on a command QP of its own and reads mlx5's tag-matching
# CQEs (src/uct/ib/rc/accel/rc_mlx5_common.c, rc_mlx5.inl). Proof that the
# device matched and did not just carry the messages: the engine's counters
# of matched messages and of rendezvous READs it issued grow in each run.
#   1. ucx_perftest tag_lat at 4 KiB (above UCX_TM_THRESH: eager messages
#      into posted tagged buffers) and tag_bw at 1 MiB (rendezvous: the
#      device READs the sender's buffer and sends the FIN);
#   2. Open MPI's ping-pong (8 B to 1 MiB, every byte checked) over it.
#
#   ucx_mlx5_tm_test.sh [PATH/TO/mpi_pingpong]
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=tests/integration/ucx_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/ucx_lib.sh"

mpi_program=${1:-}
need_commands ucx_perftest ss

failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

start_engine uroce0 --mlx5
counter() {
  "$UROCE_BIN" stats --name uroce0 | awk -v n="$1" '$1 == n {print $2}'
}

tm_env=(--env UCX_RC_MLX5_TM_ENABLE=y --env UCX_TLS=rc_mlx5,ud_mlx5 --env UCX_NET_DEVICES=uroce0:1
  --env UCX_LOG_LEVEL=info)
tm_run() {  # LABEL COUNTER CLIENT_ARGS...
  local label=$1 name=$2 before after
  shift 2
  before=$(counter "$name")
  if ! perftest_pair "$label" "${tm_env[@]}" -- "$@"; then
    fail "ucx_perftest $* with hardware tag matching"
    return
  fi
  grep -q 'ep_cfg\[0\]: tag(rc_mlx5/uroce0:1)' "$PERFTEST_CLIENT_LOG" ||
    fail "$label: UCP's tag lane is not rc_mlx5: $(grep -o 'ep_cfg.*' "$PERFTEST_CLIENT_LOG" | head -2)"
  after=$(counter "$name")
  if ((after > before)); then
    echo "ok: $label: $name $before -> $after" >&2
  else
    fail "$label: the device did not match ($name stayed $before)"
  fi
}
tm_run tm_eager_expected tm_matched -w 5 -n 200 -t tag_lat -s 4096
tm_run tm_rendezvous tm_rndv_reads -w 5 -n 100 -t tag_bw -s 1048576

if [[ -n $mpi_program ]] && command -v mpirun >/dev/null; then
  as_root=()
  [[ $(id -u) == 0 ]] && as_root=(--allow-run-as-root)
  log="$UROCE_LOG_DIR/mpi.tm.log"
  before=$(counter tm_matched)
  rc=0
  timeout -k 5 120 "$UROCE_BIN" run -- mpirun "${as_root[@]}" -np 2 --oversubscribe --bind-to none \
    --mca pml ucx --mca btl self -x UCX_RC_MLX5_TM_ENABLE=y -x UCX_TLS=rc_mlx5,ud_mlx5 \
    -x UCX_NET_DEVICES=uroce0:1 -x UCX_LOG_LEVEL=info "$mpi_program" </dev/null >"$log" 2>&1 || rc=$?
  after=$(counter tm_matched)
  if ((rc == 0)) && grep -q '^mpi_pingpong: ok$' "$log" && grep -q 'ep_cfg\[0\]: tag(rc_mlx5/uroce0:1)' "$log" &&
    ((after > before)); then
    echo "ok: mpi over rc_mlx5 with hardware tag matching: tm_matched $before -> $after" >&2
  else
    fail "mpi over rc_mlx5 with hardware tag matching: exit $rc, tm_matched $before -> $after"
    tail -n 40 "$log" >&2
  fi
else
  echo "note: no MPI program or mpirun: the MPI run is skipped" >&2
fi

if ((failures)); then
  dump_engine_counters
  dump_engine_logs
  exit 1
fi
echo "ucx_mlx5_tm: all passed"
