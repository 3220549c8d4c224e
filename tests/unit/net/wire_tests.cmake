# Unit tests of net/'s wire building blocks: ARP, the pcap writer, the fault
# injector, the af_packet wakeup socket and the DPDK port's EAL arguments (no
# EAL is started here; the port itself is tests/integration/dpdk_port_test.sh). Included from
# tests/unit/CMakeLists.txt, whose uroce_unit_test() it uses.
# The af_packet tests send frames on lo and count what wakes their socket:
# one at a time, or another's RoCE frame wakes it (ctest -L unit -j2).
uroce_unit_test(uroce_net_wire_unit_test RESOURCE_LOCK loopback_interface
  net/arp_test.cc
  net/pcap_writer_test.cc
  net/fault_injector_test.cc
  net/dpdk_port_test.cc
  net/af_packet_wakeup_test.cc)

# ---- IPv6 and 802.1Q framing, IPv6 neighbour discovery (net/packet.cc, net/ndp.cc) ----
# The IPv6 codec tests join packet_test.cc's executable, the NDP tests arp_test.cc's.
target_sources(uroce_net_unit_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/net/packet_ipv6_test.cc)
target_sources(uroce_net_wire_unit_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/net/ndp_test.cc)
# ---- end IPv6 ----
