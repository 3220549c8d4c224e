#!/usr/bin/env bash
# The raw packet QP example (tools/examples/raw_udp_echo.c) on engine A of two
# hosts answers a plain UDP socket of host B's kernel: datagrams steered by
# its flow rule, answered through the wire with checksums the device filled
# (IBV_SEND_IP_CSUM; the kernel drops a datagram with a bad one).
#
#   raw_udp_echo_test.sh PATH/TO/raw_udp_echo
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
echo_bin=${1:?usage: $0 PATH/TO/raw_udp_echo}

two_hosts_or_skip rudp 233
ip netns exec "$ns_a" "$UROCE_BIN" start --name hostA --port "net_af_packet0,iface=$veth_a" --ip "$eng_a"
# The address the example serves: host B reaches it through a static
# neighbour entry (the example answers no ARP).
served=${net%.0}.50 served_mac=02:00:00:00:0a:50 port=7777 count=20
ip -n "$ns_b" neigh add "$served" lladdr $served_mac dev "$veth_b"
# veth trusts the checksums of what it carries unless told not to: host B's
# kernel checks them (and drops a datagram whose UDP checksum is wrong).
# (ethtool -K rx off, through its ioctl: ETHTOOL_SRXCSUM 0).
ip netns exec "$ns_b" python3 - "$veth_b" <<'PY'
import array, fcntl, socket, struct, sys
value = array.array("I", [0x15, 0])  # struct ethtool_value {ETHTOOL_SRXCSUM, 0}
ifreq = struct.pack("16sP", sys.argv[1].encode(), value.buffer_info()[0]).ljust(40, b"\0")
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
fcntl.ioctl(sock.fileno(), 0x8946, ifreq)  # SIOCETHTOOL
PY

log="$UROCE_LOG_DIR/raw_udp_echo.log"
ip netns exec "$ns_a" timeout -k 5 60 "$UROCE_BIN" run -- "$echo_bin" hostA "$served" $port $count \
  >"$log" 2>&1 &
echo_pid=$!
for _ in $(seq 50); do grep -q answering "$log" && break; sleep 0.1; done
rc=0
ip netns exec "$ns_b" timeout -k 5 60 python3 - "$served" $port $count <<'PY' || rc=$?
import socket, sys
host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2.0)
ok = 0
for i in range(count):
    msg = b"uroce raw %d " % i + bytes(range(i * 7 % 200))
    for attempt in range(5):  # a datagram may be lost; the answer must match
        s.sendto(msg, (host, port))
        try:
            data, peer = s.recvfrom(4096)
        except socket.timeout:
            continue
        if data != msg or peer != (host, port):
            print("wrong answer", data[:40], peer)
            sys.exit(1)
        ok += 1
        break
print("answers: %d of %d" % (ok, count))
sys.exit(0 if ok == count else 1)
PY
wait "$echo_pid" || rc=$?
cat "$log"
if ((rc != 0)); then
  dump_engine_logs
  echo "raw_udp_echo: FAILED"
  exit 1
fi
echo "raw_udp_echo: passed"
