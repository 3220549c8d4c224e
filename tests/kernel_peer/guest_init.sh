#!/bin/busybox sh
# /init of the kernel peer's initramfs (tests/kernel_peer/vm.sh builds it).
#
# Debian's own kernel boots with busybox and the modules rdma_rxe and the
# rdma_cm need; the guest's userland is the host's root, shared read-only
# over 9p, so it runs Debian's libibverbs with its rxe provider and the very
# ibverbs-utils, perftest, rdmacm-utils, libfabric and UCX binaries of the
# host. A second 9p share (tag "job", read-write) is how the host talks to it:
#   ready          written once rxe0 is up: "ready <guest address>"
#   jobs/N.cmd     a bash script the host wants run; the guest renames it
#                  N.run, runs it in the host root (chroot), its output in
#                  N.out and, when it ends, its exit status in N.rc
#   jobs/N.kill    the host wants job N stopped (SIGTERM to its group)
# The kernel command line gives the address: uroce.ip=A.B.C.D/PREFIX and,
# optionally, uroce.ip6=ADDR/PREFIX.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev

say() { echo "uroce-guest: $*" >/dev/console; }
die() {
  say "$*"
  [ -d /host/mnt ] && echo "failed: $*" >/host/mnt/ready
  poweroff -f
}

ip4="" ip6=""
for arg in $(cat /proc/cmdline); do
  case $arg in
    uroce.ip=*) ip4=${arg#uroce.ip=} ;;
    uroce.ip6=*) ip6=${arg#uroce.ip6=} ;;
  esac
done

# rxe computes its ICRC with the crypto API's crc32 (rxe_icrc.c), a module here.
for m in virtio_pci virtio_net 9pnet_virtio 9p crc32_generic rdma_rxe rdma_ucm ib_umad; do
  modprobe "$m" || die "modprobe $m failed"
done

mkdir -p /host
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=262144 hostroot /host ||
  die "cannot mount the host's root (9p tag hostroot)"
# The guest's own kernel filesystems and scratch space over the host's.
mount -t proc proc /host/proc
mount -t sysfs sys /host/sys
mount -t devtmpfs dev /host/dev
mkdir -p /host/dev/pts /host/dev/shm
mount -t devpts devpts /host/dev/pts
mount -t tmpfs shm /host/dev/shm
for d in tmp run var/tmp root; do
  mount -t tmpfs -o mode=1777 tmp "/host/$d" || die "tmpfs on /$d"
done
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 job /host/mnt || die "cannot mount the job share"

ip link set lo up
ip link set eth0 up || die "no eth0"
[ -n "$ip4" ] && { ip addr add "$ip4" dev eth0 || die "ip addr add $ip4"; }
# No duplicate address detection (busybox's ip has no nodad): the address,
# and the GID that follows it, at once.
echo 0 >/proc/sys/net/ipv6/conf/eth0/accept_dad
[ -n "$ip6" ] && { ip -6 addr add "$ip6" dev eth0 || die "ip addr add $ip6"; }
# rxe as an administrator adds it: iproute2's rdma tool, from the host's root.
chroot /host /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin rdma link add rxe0 type rxe netdev eth0 ||
  die "rdma link add rxe0 failed"
echo "ready ${ip4%/*}" >/host/mnt/ready
say "ready: rxe0 on eth0 ${ip4%/*}"

jobs=/host/mnt/jobs
mkdir -p "$jobs"
while :; do
  for cmd in "$jobs"/*.cmd; do
    [ -e "$cmd" ] || continue
    n=${cmd%.cmd}
    mv "$cmd" "$n.run" || continue
    (
      setsid chroot /host /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp TERM=dumb \
        /bin/bash "/mnt/jobs/${n##*/}.run" >"$n.out" 2>&1 </dev/null &
      pid=$!
      echo "$pid" >"$n.pid"
      wait "$pid"
      echo $? >"$n.rc.tmp"
      mv "$n.rc.tmp" "$n.rc"
    ) &
  done
  for kill in "$jobs"/*.kill; do
    [ -e "$kill" ] || continue
    n=${kill%.kill}
    rm -f "$kill"
    [ -e "$n.pid" ] && kill -TERM -- "-$(cat "$n.pid")" 2>/dev/null
  done
  sleep 0.2
done
