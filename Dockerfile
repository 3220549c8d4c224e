# uroce in a container: a Debian 12 image whose verbs programs see an RDMA
# device (uroce0) with no RDMA NIC, no kernel module, no --privileged and no
# /dev/infiniband:
#
#   docker build -t uroce .
#   docker run --rm uroce uroce run -- ibv_devinfo
#   docker run --rm uroce sh -c 'uroce run -- ib_write_bw -x 0 & sleep 1; uroce run -- ib_write_bw -x 0 localhost'
#
# The build stage makes the Debian package (debian/), the image installs it.
FROM debian:12 AS build
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake pkg-config debhelper fakeroot \
      libibverbs-dev libboost-dev libcli11-dev libdpdk-dev libisal-dev zlib1g-dev nlohmann-json3-dev
COPY . /src/uroce
RUN rm -rf /src/uroce/build && cd /src/uroce && dpkg-buildpackage -b -us -uc -j"$(nproc)"

FROM debian:12
COPY --from=build /src/uroce_*.deb /tmp/
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      /tmp/uroce_*_"$(dpkg --print-architecture)".deb ibverbs-utils perftest \
    && rm -rf /var/lib/apt/lists/* /tmp/*.deb
COPY tools/container/entrypoint.sh /usr/local/bin/uroce-entrypoint
ENTRYPOINT ["/usr/local/bin/uroce-entrypoint"]
CMD ["bash"]
