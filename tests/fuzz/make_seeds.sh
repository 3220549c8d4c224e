#!/usr/bin/env bash
# Makes the fuzzers' seed corpora (tests/fuzz/corpus/) from real traffic: an
# engine captures what Debian's RC/UC/UD/SRQ ping-pongs and perftest's READ,
# WRITE and atomic tests put on its loopback, and each distinct (opcode, size)
# frame becomes a seed. Run by hand when the wire format changes:
#   UROCE_BUILD_DIR=build tests/fuzz/make_seeds.sh
# The control target's seeds (corpus/control: a valid message of every
# operation) are written by the target itself, from the ABI structs:
#   UROCE_CONTROL_SEEDS=tests/fuzz/corpus/control build/fuzz/bin/uroce_fuzz_control
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../integration/lib.sh"
out="$UROCE_SRC_DIR/tests/fuzz/corpus"
pcap="$UROCE_TEST_DIR/seeds.pcap"
start_engine uroce0
uroce capture -w "$pcap" --seconds 60 &
cap=$!
sleep 0.5
run_pair 30 ibv_rc_pingpong -g 0 -n 3 -s 3000 -- ibv_rc_pingpong -g 0 -n 3 -s 3000 localhost
run_pair 30 ibv_uc_pingpong -g 0 -n 3 -- ibv_uc_pingpong -g 0 -n 3 localhost
run_pair 30 ibv_ud_pingpong -g 0 -n 3 -s 512 -- ibv_ud_pingpong -g 0 -n 3 -s 512 localhost
run_pair 30 ibv_srq_pingpong -g 0 -n 3 -- ibv_srq_pingpong -g 0 -n 3 localhost
for t in ib_read_bw ib_write_bw ib_send_bw; do
  run_pair 30 $t -x 0 -n 5 -s 2048 -- $t -x 0 -n 5 -s 2048 localhost
done
run_pair 30 ib_atomic_bw -x 0 -n 5 -- ib_atomic_bw -x 0 -n 5 localhost
run_pair 30 ib_atomic_bw -x 0 -n 5 -A CMP_AND_SWAP -- ib_atomic_bw -x 0 -n 5 -A CMP_AND_SWAP localhost
run_pair 30 ib_write_bw -x 0 -n 5 -s 64 --report_gbits -- ib_write_bw -x 0 -n 5 -s 64 --report_gbits localhost
kill -INT "$cap"; wait "$cap" || true
rm -rf "$out/frame_parser" "$out/device_rx"
mkdir -p "$out/frame_parser" "$out/device_rx"
python3 - "$pcap" "$out" <<'PY'
import hashlib, os, struct, sys
pcap, out = sys.argv[1], sys.argv[2]
data = open(pcap, 'rb').read()
off, seen, n, records = 24, set(), 0, []
while off + 16 <= len(data):
    _, _, incl, _ = struct.unpack_from('<IIII', data, off)
    frame = data[off + 16: off + 16 + incl]
    off += 16 + incl
    if len(frame) < 14 + 20 + 8 + 12:
        continue
    l3 = 14 + (4 if frame[12:14] == b'\x81\x00' else 0)
    bth = l3 + (40 if frame[l3] >> 4 == 6 else 20) + 8
    key = (frame[bth], len(frame) // 256)
    if key in seen:
        continue
    seen.add(key)
    name = hashlib.sha1(frame).hexdigest()[:16]
    open(os.path.join(out, 'frame_parser', name), 'wb').write(frame)
    # device_rx: one record [target QP][flags][length] + frame; aimed in
    # sequence, with work posted.
    rec = bytes([n % 8, 0x07, len(frame) >> 8, len(frame) & 0xff]) + frame
    records.append(rec)
    open(os.path.join(out, 'device_rx', name), 'wb').write(rec)
    n += 1
# And one input with them all in a row.
open(os.path.join(out, 'device_rx', 'all-in-a-row'), 'wb').write(b''.join(records))
print('seeds:', n)
PY
