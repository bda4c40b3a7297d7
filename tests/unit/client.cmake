# Unit tests of the client library (tally_client), label unit. Included from
# tests/unit/CMakeLists.txt, after GTest is found and GoogleTest included.
foreach(name aggregations datasets format npy reference roundtrip sizes)
  add_executable(tally_client_${name}_test ${CMAKE_CURRENT_LIST_DIR}/client_${name}_test.cc)
  target_link_libraries(tally_client_${name}_test PRIVATE tally_client GTest::gtest GTest::gtest_main)
  gtest_discover_tests(tally_client_${name}_test PROPERTIES LABELS unit)
endforeach()

# The tool's flag parsing and --help (tally_tool, the commands behind the
# `tally` executable).
add_executable(tally_cli_flags_test ${CMAKE_CURRENT_LIST_DIR}/cli_flags_test.cc)
target_link_libraries(tally_cli_flags_test PRIVATE tally_tool GTest::gtest GTest::gtest_main)
gtest_discover_tests(tally_cli_flags_test PROPERTIES LABELS unit)
