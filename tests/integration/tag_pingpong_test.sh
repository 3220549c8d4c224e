#!/usr/bin/env bash
# uroce-tag-pingpong (tools/examples/tag_pingpong.c) between two processes on one
# engine: tagged messages of mixed sizes both ways, eager below the threshold
# and rendezvous above it, received out of order and through wildcard masks,
# every byte checked. The engine's tag-matching counters must show it.
#
#   tag_pingpong_test.sh PATH/TO/uroce-tag-pingpong
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
prog=${1:?usage: $0 PATH/TO/uroce-tag-pingpong}

start_engine uroce0 >/dev/null
port=$((19600 + $$ % 300))
run_pair --label tag_pingpong 60 "$prog" -p "$port" -n 16 -- "$prog" -p "$port" -n 16 127.0.0.1
cat "$RUN_PAIR_CLIENT_LOG"
# Its stream mode (-B): eager 64 B and rendezvous 1 MiB, one way.
run_pair --label tag_stream_eager 60 "$prog" -p "$((port + 1))" -B 5000 -s 64 -- \
  "$prog" -p "$((port + 1))" -B 5000 -s 64 127.0.0.1
cat "$RUN_PAIR_SERVER_LOG"
run_pair --label tag_stream_rndv 60 "$prog" -p "$((port + 2))" -B 100 -s 1048576 -w 16 -- \
  "$prog" -p "$((port + 2))" -B 100 -s 1048576 -w 16 127.0.0.1
cat "$RUN_PAIR_SERVER_LOG"
# uroce bench's layout (-P): every tagged buffer and every rendezvous send
# buffer the same one, as perftest's, bytes unchecked; every message and FIN
# must still be accounted for, in order.
run_pair --label tag_stream_rndv_one_buffer 60 "$prog" -p "$((port + 4))" -B 100 -s 1048576 -w 16 -P -- \
  "$prog" -p "$((port + 4))" -B 100 -s 1048576 -w 16 -P 127.0.0.1
cat "$RUN_PAIR_SERVER_LOG"
if ! grep -q 'stream: received 100 rendezvous messages .*one buffer as perftest' "$RUN_PAIR_SERVER_LOG" ||
  ! grep -q 'stream: sent 100 rendezvous messages .*one buffer as perftest' "$RUN_PAIR_CLIENT_LOG"; then
  echo "FAIL: the one-buffer stream did not report 100 rendezvous messages on both sides"
  exit 1
fi
# Under loss, duplication and reordering (the engine's fault injector): the
# device's READs and FINs are retransmitted like any WQE, every byte arrives.
uroce fault --name uroce0 drop=0.02 duplicate=0.01 reorder=0.05 >/dev/null
run_pair --label tag_pingpong_faults 90 "$prog" -p "$((port + 3))" -n 6 -s 65536 -- \
  "$prog" -p "$((port + 3))" -n 6 -s 65536 127.0.0.1
cat "$RUN_PAIR_CLIENT_LOG"
uroce fault --name uroce0 off >/dev/null
stats=$(uroce stats --name uroce0)
if ! grep -qE '^ *retransmits [1-9]' <<<"$stats"; then
  echo "FAIL: no retransmission under the fault injector"
  exit 1
fi
for c in tm_matched tm_rndv_reads tm_no_tag; do
  if ! grep -qE "^ *$c [1-9]" <<<"$stats"; then
    echo "FAIL: uroce stats counted no $c"
    grep -E '^ *tm_' <<<"$stats"
    exit 1
  fi
done
if grep -qE '^ *tm_(unexpected|rndv_software|rndv_errors) [1-9]' <<<"$stats"; then
  echo "FAIL: a message was unexpected or a rendezvous not offloaded"
  grep -E '^ *tm_' <<<"$stats"
  exit 1
fi
grep -E '^ *tm_(matched|rndv_reads)' <<<"$stats"
