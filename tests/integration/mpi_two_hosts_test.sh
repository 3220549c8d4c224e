#!/usr/bin/env bash
# Open MPI across two engines: two network namespaces joined by a veth pair
# (as two_hosts_test.sh), engine hostA in one and hostB in the other, each on
# a DPDK net_af_packet port with a runtime directory of its own, as two
# machines have. mpirun runs in namespace A under `uroce run` and starts the
# rank of "host" B through an rsh agent that enters namespace B under
# `uroce run` (instead of ssh); Open MPI's own control traffic (orted, PMIx)
# crosses the veth over TCP, the ranks' traffic over RoCEv2 between the two
# engines. The ping-pong and all-reduce of mpi_pingpong (data checked) run
# over rc_verbs and over ud_verbs, then with both engines in mlx5 mode over
# rc_mlx5, ud_mlx5 and dc_mlx5 (UCX writing its WQEs and reading its CQEs
# itself; DC in uroce's wire format between the two engines);
# each rank's endpoints must be on its own host's device, and the wire ports
# must have carried the frames.
#
#   mpi_two_hosts_test.sh PATH/TO/mpi_pingpong
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=tests/integration/ucx_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/ucx_lib.sh"

program=${1:?usage: mpi_two_hosts_test.sh PATH/TO/mpi_pingpong}
need_commands mpirun ip
two_hosts_or_skip umpi 233
dir_a="$UROCE_TEST_DIR/hostA" dir_b="$UROCE_TEST_DIR/hostB"
mkdir -p "$dir_a" "$dir_b"

add_cleanup "$UROCE_BIN --runtime-dir $dir_a stop --all >&2; $UROCE_BIN --runtime-dir $dir_b stop --all >&2"
start_hosts() {  # [uroced flags...]
  "$UROCE_BIN" --runtime-dir "$dir_a" stop --all >&2
  "$UROCE_BIN" --runtime-dir "$dir_b" stop --all >&2
  ip netns exec "$ns_a" "$UROCE_BIN" --runtime-dir "$dir_a" start --name hostA \
    --port "net_af_packet0,iface=$veth_a" --ip "$eng_a" "$@"
  ip netns exec "$ns_b" "$UROCE_BIN" --runtime-dir "$dir_b" start --name hostB \
    --port "net_af_packet0,iface=$veth_b" --ip "$eng_b" "$@"
}

# Open MPI's rsh agent is called as "AGENT HOST COMMAND..." (as ssh would be).
agent="$UROCE_TEST_DIR/enter_host_b.sh"
cat >"$agent" <<AGENT
#!/bin/sh
shift
exec ip netns exec $ns_b $UROCE_BIN --runtime-dir $dir_b run -- sh -c "\$*"
AGENT
chmod +x "$agent"

as_root=()
[[ $(id -u) == 0 ]] && as_root=(--allow-run-as-root)
wire_rx() {
  "$UROCE_BIN" --runtime-dir "$1" stats | awk '$1 == "rx_packets" {print $2}'
}

failures=0
for tl in rc_verbs ud_verbs rc_mlx5 ud_mlx5 dc_mlx5; do
  case $tl in
    rc_verbs) tls=rc_verbs,ud_verbs && start_hosts ;;
    rc_mlx5) tls=rc_mlx5,ud_mlx5 && start_hosts --mlx5 ;;
    *) tls=$tl ;;
  esac
  log="$UROCE_LOG_DIR/mpi_two_hosts.$tl.log"
  before=$(wire_rx "$dir_b")
  rc=0
  timeout -k 5 120 ip netns exec "$ns_a" "$UROCE_BIN" --runtime-dir "$dir_a" run -- \
    mpirun "${as_root[@]}" -np 2 --host "$kern_a:1,$kern_b:1" --bind-to none \
    --mca plm_rsh_agent "$agent" --mca pml ucx --mca btl self \
    -x UCX_TLS="$tls" -x UCX_NET_DEVICES=hostA:1,hostB:1 -x UCX_LOG_LEVEL=info \
    "$program" </dev/null >"$log" 2>&1 || rc=$?
  after=$(wire_rx "$dir_b")
  if ((rc == 0)) && grep -q '^mpi_pingpong: ok$' "$log" &&
    expect_transport "$log" "$tl" hostA:1 hostB:1 && ((after - before > 1000)); then
    echo "ok: mpi across two engines over $tl: $((after - before)) frames received by hostB" >&2
    grep '^mpi_pingpong:' "$log" >&2
  else
    echo "FAIL: mpi across two engines over $tl: exit $rc, hostB received $((after - before)) frames" >&2
    grep -v ' DIAG ' "$log" | tail -n 40 >&2
    failures=$((failures + 1))
  fi
done

if ((failures > 0)); then
  for d in "$dir_a" "$dir_b"; do tail -n 20 "$d"/*.log >&2; done
  exit 1
fi
echo "mpi_two_hosts: all passed"
