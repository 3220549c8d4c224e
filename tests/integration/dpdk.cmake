# DPDK port smoke test (tests/integration/dpdk_port_test.sh): two network
# namespaces joined by a veth pair, one dpdk_port_probe (net::DpdkPort over
# net_af_packet) in each, one process per EAL (STYLE.md 19). Included from
# tests/CMakeLists.txt; needs uroce_net built with DPDK.
if(UROCE_HAVE_DPDK)
  add_executable(dpdk_port_probe integration/dpdk_port_probe.cc)
  target_link_libraries(dpdk_port_probe PRIVATE uroce_net)
  add_test(NAME dpdk_port
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/dpdk_port_test.sh
            $<TARGET_FILE:dpdk_port_probe>)
  set_tests_properties(dpdk_port PROPERTIES
    TIMEOUT 120
    SKIP_RETURN_CODE 77
    RUN_SERIAL TRUE)
endif()
