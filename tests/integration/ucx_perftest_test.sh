#!/usr/bin/env bash
# Debian's unmodified UCX (ucx_perftest) over uroce0, two processes under
# `uroce run` through one engine: UCT over rc_verbs (active messages, put and
# get with bcopy and zcopy, atomics) and ud_verbs (active messages) with UCX's
# default settings, then UCP tag matching (1 MiB: rendezvous) and streams with
# UCX_TLS=rc_verbs,ud_verbs on uroce0:1 only, checking the transport UCP
# reports for its endpoints. Iteration counts are small: this proves that the
# traffic flows and completes, not how fast.
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=tests/integration/ucx_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/ucx_lib.sh"

need_commands ucx_perftest ss
start_engine uroce0

failures=0
lat=(-n 1000 -w 100)
bw=(-n 200 -w 20)

# ---- UCT, one transport, UCX's defaults otherwise ----
uct_tests=(
  "rc_am_lat        -x rc_verbs -t am_lat ${lat[*]}"
  "rc_put_lat_bcopy -x rc_verbs -t put_lat -D bcopy -s 4096 ${lat[*]}"
  "rc_put_lat_zcopy -x rc_verbs -t put_lat -D zcopy -s 4096 ${lat[*]}"
  "rc_put_bw_bcopy  -x rc_verbs -t put_bw -D bcopy -s 4096 ${bw[*]}"
  "rc_put_bw_zcopy  -x rc_verbs -t put_bw -D zcopy -s 65536 ${bw[*]}"
  "rc_get_bcopy     -x rc_verbs -t get -D bcopy -s 4096 ${lat[*]}"
  "rc_get_zcopy     -x rc_verbs -t get -D zcopy -s 65536 ${bw[*]}"
  "rc_add_lat       -x rc_verbs -t add_lat ${lat[*]}"
  "rc_fadd          -x rc_verbs -t fadd ${lat[*]}"
  "rc_cswap         -x rc_verbs -t cswap ${lat[*]}"
  "ud_am_lat        -x ud_verbs -t am_lat ${lat[*]}"
  "ud_am_bw         -x ud_verbs -t am_bw -D bcopy -s 1024 ${bw[*]}"
)
for t in "${uct_tests[@]}"; do
  read -r -a words <<<"$t"
  perftest_pair "${words[0]}" -- -d uroce0:1 "${words[@]:1}" || failures=$((failures + 1))
done

# ---- UCP over rc_verbs and ud_verbs on uroce0:1, nothing else ----
ucp_env=(--env "UCX_TLS=rc_verbs,ud_verbs" --env UCX_NET_DEVICES=uroce0:1 --env UCX_LOG_LEVEL=info)
ucp_tests=(
  "tag_lat   rc_verbs -t tag_lat ${lat[*]}"
  "tag_bw    rc_verbs -t tag_bw -s 1048576 -n 20 -w 2"
  "stream_bw rc_verbs -t stream_bw -s 65536 ${bw[*]}"
)
for t in "${ucp_tests[@]}"; do
  read -r -a words <<<"$t"
  if perftest_pair "ucp_${words[0]}" "${ucp_env[@]}" -- "${words[@]:2}"; then
    expect_transport "$PERFTEST_CLIENT_LOG" "${words[1]}" || failures=$((failures + 1))
  else
    failures=$((failures + 1))
  fi
done
# UCP on ud_verbs alone: its datagrams carry the tag messages themselves.
if perftest_pair ucp_ud_tag_lat --env UCX_TLS=ud_verbs --env UCX_NET_DEVICES=uroce0:1 \
    --env UCX_LOG_LEVEL=info -- -t tag_lat "${lat[@]}"; then
  expect_transport "$PERFTEST_CLIENT_LOG" ud_verbs || failures=$((failures + 1))
else
  failures=$((failures + 1))
fi

if ((failures > 0)); then
  echo "ucx_perftest: $failures failed" >&2
  exit 1
fi
echo "ucx_perftest: all passed"
