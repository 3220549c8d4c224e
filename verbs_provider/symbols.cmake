# Symbol-table half of the drop-in libibverbs.so.1: the sources that define
# rdma-core's non-core exports, the version script binding every export to
# its rdma-core 44 version node, and the tests that hold us to it.
#
# Use from verbs_provider/CMakeLists.txt:
#   include(${CMAKE_CURRENT_SOURCE_DIR}/symbols.cmake)
#   add_library(uroce_verbs SHARED ${core_sources} ${UROCE_PROVIDER_SYMBOL_SOURCES})
#   uroce_use_symbol_version_script(uroce_verbs)
#   uroce_add_symbol_tests(uroce_verbs)

set(UROCE_PROVIDER_SYMBOL_SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/compat.cc
    ${CMAKE_CURRENT_LIST_DIR}/private_stubs.cc
    ${CMAKE_CURRENT_LIST_DIR}/util_verbs.cc)

set(UROCE_PROVIDER_VERSION_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/libibverbs.map)

# Functions run in their caller's scope, so remember where the scripts are.
set(UROCE_PROVIDER_SYMBOLS_DIR ${CMAKE_CURRENT_LIST_DIR} CACHE INTERNAL
    "Directory of verbs_provider/symbols.cmake")

# Links target with the version script and relinks it when the script
# changes. compat.cc does not link without it: its name@IBVERBS_1.0 symbols
# need the version nodes the script defines.
function(uroce_use_symbol_version_script target)
  target_link_options(${target} PRIVATE
      "LINKER:--version-script=${UROCE_PROVIDER_VERSION_SCRIPT}")
  set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS
      ${UROCE_PROVIDER_VERSION_SCRIPT})
endfunction()

# Registers the ctest tests for the library built by target, which must be
# named libibverbs.so.1 in its output directory. Both tests report "skipped"
# (exit 77) on machines without rdma-core's libraries.
function(uroce_add_symbol_tests target)
  set(dir ${UROCE_PROVIDER_SYMBOLS_DIR})
  add_test(NAME provider_exported_symbols
      COMMAND sh ${dir}/exported_symbols_test.sh
          $<TARGET_FILE_DIR:${target}>/libibverbs.so.1)
  add_test(NAME provider_vendor_libs_load
      COMMAND sh ${dir}/vendor_libs_load_test.sh $<TARGET_FILE_DIR:${target}>)
  set_tests_properties(provider_exported_symbols provider_vendor_libs_load
      PROPERTIES SKIP_RETURN_CODE 77 LABELS provider)
endfunction()
