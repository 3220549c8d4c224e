#!/usr/bin/env bash
# Installs the Debian 12 packages uroce builds and tests with, if any are
# missing. Called by tools/demo.sh, tests/run_all.sh and .ci/run, so the
# README's two commands work on a fresh machine. Needs root (or sudo) only
# when something is missing.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libibverbs-dev librdmacm-dev ibverbs-utils rdmacm-utils perftest rdma-core infiniband-diags nlohmann-json3-dev libcli11-dev
  libboost-dev libgtest-dev libdpdk-dev
  iproute2 python3 python3-pyverbs zlib1g-dev tshark
  debhelper fakeroot lintian clang
  ucx-utils libucx0 openmpi-bin libopenmpi-dev util-linux libfabric-bin
  qemu-system-x86 busybox-static cpio
)

missing=()
for pkg in "${packages[@]}"; do
  # dpkg -s also succeeds for removed packages whose config files remain.
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$pkg")
  fi
done
((${#missing[@]})) || exit 0

sudo=()
if ((EUID != 0)); then
  if command -v sudo >/dev/null; then
    sudo=(sudo)
  else
    echo "uroce: missing packages: ${missing[*]}" >&2
    echo "uroce: as root: apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi
echo "uroce: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# tshark decodes the captures the two-host test writes; no setuid dumpcap.
echo "wireshark-common wireshark-common/install-setuid boolean false" | "${sudo[@]}" debconf-set-selections
"${sudo[@]}" apt-get update
"${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
