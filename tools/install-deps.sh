#!/usr/bin/env bash
# Installs the Debian 12 packages uroce needs, if any are missing:
#
#   tools/install-deps.sh [build|lab|test]...      (default: test)
#
#   build  building and installing uroce without its tests
#          (cmake -DUROCE_BUILD_TESTS=OFF): compilers and -dev packages
#   lab    the teaching lab (docs/lab): build, and the tools it uses
#   test   the whole test suite: every real consumer it runs (perftest,
#          UCX, Open MPI, libfabric, pyverbs, qemu for the kernel peer, ...)
#
# Called by tools/demo.sh, tests/run_all.sh and .ci/run (test), the CI
# recipe and action (build), the lab (lab), so the README's two commands work
# on a fresh machine. Needs root (or sudo) only when something is missing.
set -euo pipefail

build_packages=(
  build-essential cmake pkg-config
  libibverbs-dev librdmacm-dev nlohmann-json3-dev libcli11-dev libboost-dev libdpdk-dev libisal-dev zlib1g-dev
  iproute2
)
lab_packages=(
  "${build_packages[@]}"
  ibverbs-utils perftest rdmacm-utils infiniband-diags tshark python3 python3-pyverbs
)
test_packages=(
  "${lab_packages[@]}"
  rdma-core libgtest-dev python3-yaml
  debhelper fakeroot lintian clang
  ucx-utils libucx0 openmpi-bin libopenmpi-dev util-linux libfabric-bin qperf
  qemu-system-x86 busybox-static cpio
)

packages=()
(($#)) || set -- test
for set_name in "$@"; do
  case $set_name in
    build) packages+=("${build_packages[@]}") ;;
    lab) packages+=("${lab_packages[@]}") ;;
    test) packages+=("${test_packages[@]}") ;;
    -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install-deps.sh: unknown set '$set_name' (build, lab or test)" >&2; exit 2 ;;
  esac
done

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
