#!/bin/sh
# The container's entry point: starts the engine (default uroce0, or
# $UROCE_DEVICE) unless it already answers, then runs the command, so that
#   docker run IMAGE uroce run -- ib_write_bw ...
# finds a device. No /dev/infiniband, no kernel module, no privileges.
set -eu
device="${UROCE_DEVICE:-uroce0}"
if ! uroce start --name "$device" >/dev/null 2>&1; then
  uroce status 2>/dev/null | grep -q "^== $device " || {
    echo "entrypoint: cannot start engine $device:" >&2
    uroce start --name "$device" >&2 || true
    exit 1
  }
fi
if [ "$#" -eq 0 ]; then set -- bash; fi
exec "$@"
