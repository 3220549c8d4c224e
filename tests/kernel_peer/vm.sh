# shellcheck shell=bash
# The kernel as the peer: Debian 12's own kernel running rdma_rxe in a qemu
# virtual machine, its NIC a tap device beside a uroce engine. Source it
# after tests/integration/lib.sh:
#
#   source tests/kernel_peer/vm.sh
#   kernel_peer_prepare                 # the kernel and the initramfs, cached
#   kernel_peer_boot NS TAP ADDR/PREFIX [ADDR6/PREFIX]
#   guest_run LABEL TIMEOUT CMD...      # CMD in the guest; its status
#   guest_start LABEL TIMEOUT CMD...    # the same in the background
#   guest_wait LABEL                    # its status; output in $GUEST_OUT
#   guest_stop LABEL                    # SIGTERM to a job still running
#
# The kernel comes from the linux-image package that linux-image-amd64
# depends on, downloaded with apt-get and extracted (never installed); the
# initramfs is busybox-static and that kernel's modules for virtio, 9p and
# the RDMA stack. The guest's userland is the host's root, shared read-only
# over 9p (guest_init.sh), so the guest runs Debian's libibverbs with its rxe
# provider and the host's binaries. Plain emulation (TCG), which boots in
# about 5-10 s; KVM only when KERNEL_PEER_ACCEL=kvm (see kernel_peer_boot).
#
# Both directions of the guest's NIC are captured (qemu's filter-dump) into
# $UROCE_LOG_DIR/kernel_peer.pcap (the first 512 bytes of each frame: the
# headers and whole MADs), kept with the test's files on failure. (Without vnet_hdr=off
# on the tap, filter-dump writes each frame behind its virtio-net header.)
#
# Environment:
#   UROCE_KERNEL_PEER_CACHE  where the kernel and initramfs are kept
#                            (default: <build>/kernel-peer)

KERNEL_PEER_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KERNEL_PEER_CACHE="${UROCE_KERNEL_PEER_CACHE:-$UROCE_BUILD_DIR/kernel-peer}"

# The guest's kernel and initramfs, in $KERNEL_PEER_CACHE: sets
# kernel_peer_vmlinuz and kernel_peer_initrd. Prints why and returns 1 when
# they cannot be had.
kernel_peer_prepare() {
  local cache=$KERNEL_PEER_CACHE pkg deb release root
  mkdir -p "$cache"
  for tool in qemu-system-x86_64 busybox cpio; do
    command -v "$tool" >/dev/null || {
      echo "kernel peer: $tool is missing (packages qemu-system-x86, busybox-static, cpio)" >&2
      return 1
    }
  done
  local depends=(apt-cache depends linux-image-amd64)
  pkg=$("${depends[@]}" 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
  if [[ -z $pkg && $EUID == 0 ]]; then  # package lists never fetched here
    apt-get update -qq >/dev/null 2>&1 || true
    pkg=$("${depends[@]}" 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
  fi
  if [[ -z $pkg ]]; then
    deb=$(ls "$cache"/linux-image-*.deb 2>/dev/null | tail -1)
    [[ -n $deb ]] || {
      echo "kernel peer: apt-cache knows no linux-image-amd64 (run apt-get update)" >&2
      return 1
    }
  else
    deb=$(ls "$cache/${pkg}"_*.deb 2>/dev/null | tail -1)
    if [[ -z $deb ]]; then
      (cd "$cache" && timeout 300 apt-get download "$pkg" >"$cache/download.log" 2>&1) || {
        cat "$cache/download.log" >&2
        echo "kernel peer: apt-get download $pkg failed" >&2
        return 1
      }
      deb=$(ls "$cache/${pkg}"_*.deb | tail -1)
    fi
  fi
  root="$cache/${deb##*/}.root"
  if [[ ! -d $root/boot ]]; then
    rm -rf "$root.tmp"
    dpkg-deb -x "$deb" "$root.tmp" || return 1
    mv "$root.tmp" "$root"
  fi
  release=$(ls "$root/lib/modules" | head -1)
  kernel_peer_vmlinuz="$root/boot/vmlinuz-$release"
  kernel_peer_initrd="$cache/initrd-$release.gz"
  local stamp
  stamp=$(cat "$KERNEL_PEER_DIR/guest_init.sh" "$(command -v busybox)" | md5sum | cut -c1-12)
  [[ -s $kernel_peer_initrd && -e $kernel_peer_initrd.$stamp ]] && return 0

  # The initramfs: busybox, /init, and the modules with their dependencies
  # (busybox's depmod writes the modules.dep its modprobe reads).
  local stage="$cache/initrd.stage" m dep
  rm -rf "$stage"
  mkdir -p "$stage"/{bin,dev,proc,sys,host,lib/modules/"$release"}
  cp "$(command -v busybox)" "$stage/bin/busybox"
  cp "$KERNEL_PEER_DIR/guest_init.sh" "$stage/init"
  chmod 755 "$stage/init"
  [[ -s $root/lib/modules/$release/modules.dep ]] || busybox depmod -b "$root" "$release" || return 1
  local -A want=()
  local -a queue=(virtio_pci virtio_net 9pnet_virtio 9p crc32_generic rdma_rxe rdma_ucm ib_umad)
  while ((${#queue[@]})); do
    m=${queue[0]}
    queue=("${queue[@]:1}")
    dep=$(grep -E "(^|/)${m//_/[_-]}\.ko(\.xz)?:" "$root/lib/modules/$release/modules.dep") || {
      echo "kernel peer: module $m not in $release" >&2
      return 1
    }
    local path=${dep%%:*}
    [[ -n ${want[$path]:-} ]] && continue
    want[$path]=1
    local d
    for d in ${dep#*:}; do
      d=${d##*/}
      queue+=("${d%%.ko*}")
    done
  done
  for m in "${!want[@]}"; do
    mkdir -p "$stage/lib/modules/$release/${m%/*}"
    cp "$root/lib/modules/$release/$m" "$stage/lib/modules/$release/$m"
  done
  busybox depmod -b "$stage" "$release" || return 1
  (cd "$stage" && find . | cpio -o -H newc --quiet | gzip -1) >"$kernel_peer_initrd.tmp" || return 1
  mv "$kernel_peer_initrd.tmp" "$kernel_peer_initrd"
  rm -f "$kernel_peer_initrd".*
  : >"$kernel_peer_initrd.$stamp"
  rm -rf "$stage"
}

# kernel_peer_boot NS TAP ADDR/PREFIX [ADDR6/PREFIX]: boots the guest with its
# NIC on TAP, a tap device of namespace NS this makes (the host end has no
# address: the caller gives it one), and waits until rxe0 is up (120 s at
# most). Sets kernel_peer_jobs (the job directory) and kernel_peer_pid.
kernel_peer_boot() {
  local ns=$1 tap=$2 addr=$3 addr6=${4:-}
  _kernel_peer_args=("$@")
  kernel_peer_jobs="$UROCE_TEST_DIR/guest"
  mkdir -p "$kernel_peer_jobs/jobs"
  rm -f "$kernel_peer_jobs/ready"
  if ! ip -n "$ns" link show "$tap" >/dev/null 2>&1; then  # not when booted again
    ip -n "$ns" tuntap add dev "$tap" mode tap || return 1
  fi
  ip -n "$ns" link set "$tap" up || return 1
  # TCG unless KERNEL_PEER_ACCEL=kvm: on these VMs /dev/kvm can be there
  # and still hang a stock kernel before its first console line (seen with
  # Debian's 6.1.0-57: no output in 120 s under KVM, ready in 5 s under TCG),
  # and a functional test does not need KVM's speed.
  local accel=(-accel tcg)
  if [[ ${KERNEL_PEER_ACCEL:-tcg} == kvm ]]; then
    accel=(-accel kvm)
  fi
  local append="console=ttyS0 panic=-1 loglevel=${KERNEL_PEER_LOGLEVEL:-4} uroce.ip=$addr"
  [[ -n $addr6 ]] && append+=" uroce.ip6=$addr6"
  # -cpu max: the guest also runs uroce's own engine (sysfs_on_a_nic), built
  # for the host's instruction set; qemu64 has too little of it (SIGILL).
  # Each boot its own console log and capture (KERNEL_PEER_PCAPS: all of
  # them, comma-separated, oldest first).
  _kernel_peer_boots=$((${_kernel_peer_boots:-0} + 1))
  local n=""
  ((_kernel_peer_boots == 1)) || n=".$_kernel_peer_boots"
  KERNEL_PEER_CONSOLE="$UROCE_LOG_DIR/kernel_peer$n.console.log"
  KERNEL_PEER_PCAP="$UROCE_LOG_DIR/kernel_peer$n.pcap"
  KERNEL_PEER_PCAPS+="${KERNEL_PEER_PCAPS:+,}$KERNEL_PEER_PCAP"
  ip netns exec "$ns" qemu-system-x86_64 "${accel[@]}" -machine q35 -cpu max -m 1024 -smp 1 \
    -nographic -no-reboot -nodefaults -serial "file:$KERNEL_PEER_CONSOLE" \
    -kernel "$kernel_peer_vmlinuz" -initrd "$kernel_peer_initrd" -append "$append" \
    -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap" \
    -virtfs "local,path=$kernel_peer_jobs,mount_tag=job,security_model=none" \
    -netdev "tap,id=n0,ifname=$tap,script=no,downscript=no,vnet_hdr=off" \
    -device "virtio-net-pci,netdev=n0,mac=52:54:00:12:34:56" \
    -object "filter-dump,id=dump0,netdev=n0,file=$KERNEL_PEER_PCAP,maxlen=512" \
    </dev/null >"$UROCE_LOG_DIR/kernel_peer.qemu.log" 2>&1 &
  kernel_peer_pid=$!
  add_cleanup "kill $kernel_peer_pid 2>/dev/null; wait $kernel_peer_pid 2>/dev/null"
  local i
  for ((i = 0; i < 1200; i++)); do
    if [[ -s $kernel_peer_jobs/ready ]]; then
      if grep -q '^ready' "$kernel_peer_jobs/ready"; then
        return 0
      fi
      break
    fi
    kill -0 "$kernel_peer_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "kernel peer: the guest did not come up; qemu:" >&2
  cat "$UROCE_LOG_DIR/kernel_peer.qemu.log" >&2
  echo "console (last 40 lines):" >&2
  tail -n 40 "$KERNEL_PEER_CONSOLE" >&2
  return 1
}

# kernel_peer_reboot: the guest stopped and booted again as before, on the
# same tap (which keeps the host's addresses), a new console log and capture.
kernel_peer_reboot() {
  kill "$kernel_peer_pid" 2>/dev/null
  wait "$kernel_peer_pid" 2>/dev/null
  kernel_peer_boot "${_kernel_peer_args[@]}"
}

_guest_job=0
declare -A _guest_jobs=()
# guest_start LABEL TIMEOUT CMD...: CMD (words quoted for bash) in the guest,
# limited to TIMEOUT seconds there.
guest_start() {
  local label=$1 limit=$2
  shift 2
  _guest_job=$((_guest_job + 1))
  local n="$kernel_peer_jobs/jobs/$_guest_job"
  _guest_jobs[$label]=$n
  {
    echo "cd /tmp"
    printf 'exec timeout -k 5 %q' "$limit"
    printf ' %q' "$@"
    echo
  } >"$n.tmp"
  mv "$n.tmp" "$n.cmd"
}

# guest_wait LABEL [SECONDS]: waits for the job (its own limit plus 30 s, or
# SECONDS) and returns its exit status; its output is in $GUEST_OUT.
guest_wait() {
  local n=${_guest_jobs[$1]} limit=${2:-600} i
  GUEST_OUT="$n.out"
  for ((i = 0; i < limit * 10; i++)); do
    if [[ -e $n.rc ]]; then
      return "$(cat "$n.rc")"
    fi
    sleep 0.1
  done
  echo "guest job $1: no exit status after $limit s" >&2
  return 124
}

guest_stop() {
  local n=${_guest_jobs[$1]}
  [[ -e $n.rc ]] || : >"$n.kill"
}

# guest_run LABEL TIMEOUT CMD...: guest_start and guest_wait.
guest_run() {
  guest_start "$@"
  guest_wait "$1" "$(($2 + 30))"
}
