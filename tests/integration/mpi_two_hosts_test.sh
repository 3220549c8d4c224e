#!/usr/bin/env bash
# Open MPI across two engines: two network namespaces joined by a veth pair
# (as two_hosts_test.sh), engine hostA in one and hostB in the other, each on
# a DPDK net_af_packet port with a runtime directory of its own, as two
# machines have. mpirun runs in namespace A under `uroce run` and starts the
# rank of "host" B through an rsh agent that enters namespace B under
# `uroce run` (instead of ssh); Open MPI's own control traffic (orted, PMIx)
# crosses the veth over TCP, the ranks' traffic over RoCEv2 between the two
# engines. The ping-pong and all-reduce of mpi_pingpong (data checked) run
# over rc_verbs and over ud_verbs; each rank's endpoints must be on its own
# host's device, and the wire ports must have carried the frames.
#
#   mpi_two_hosts_test.sh PATH/TO/mpi_pingpong
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=tests/integration/ucx_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/ucx_lib.sh"

program=${1:?usage: mpi_two_hosts_test.sh PATH/TO/mpi_pingpong}
need_commands mpirun ip
if ! ip netns add "uroce-probe-$$" 2>/dev/null; then
  echo "SKIP: cannot create network namespaces here"
  exit 77
fi
ip netns del "uroce-probe-$$"

id=$$
ns_a="umpi-a-$id" ns_b="umpi-b-$id"
veth_a="ma$id" veth_b="mb$id"
net=10.232.$((id % 200)).0
kern_a=${net%.0}.1 kern_b=${net%.0}.2  # kernel addresses: Open MPI's TCP control
eng_a=${net%.0}.11 eng_b=${net%.0}.12  # engine addresses: RoCE only
dir_a="$UROCE_TEST_DIR/hostA" dir_b="$UROCE_TEST_DIR/hostB"
mkdir -p "$dir_a" "$dir_b"

ip netns add "$ns_a"
ip netns add "$ns_b"
add_cleanup "ip netns del $ns_a 2>/dev/null; ip netns del $ns_b 2>/dev/null"
add_cleanup "$UROCE_BIN --runtime-dir $dir_a stop --all >&2; $UROCE_BIN --runtime-dir $dir_b stop --all >&2"
ip link add "$veth_a" type veth peer name "$veth_b"
ip link set "$veth_a" netns "$ns_a"
ip link set "$veth_b" netns "$ns_b"
for side in a b; do
  ns_var=ns_$side veth_var=veth_$side kern_var=kern_$side
  ip -n "${!ns_var}" link set lo up
  ip -n "${!ns_var}" link set "${!veth_var}" mtu 9000 up
  ip -n "${!ns_var}" addr add "${!kern_var}/24" dev "${!veth_var}"
done
ip netns exec "$ns_a" "$UROCE_BIN" --runtime-dir "$dir_a" start --name hostA \
  --port "net_af_packet0,iface=$veth_a" --ip "$eng_a"
ip netns exec "$ns_b" "$UROCE_BIN" --runtime-dir "$dir_b" start --name hostB \
  --port "net_af_packet0,iface=$veth_b" --ip "$eng_b"

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
for tl in rc_verbs ud_verbs; do
  tls=$tl
  [[ $tl == rc_verbs ]] && tls=rc_verbs,ud_verbs
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
