# Unit tests of the client library (tally_client). Included from
# tests/unit/CMakeLists.txt; needs GTest found and GoogleTest included.
foreach(name aggregations format npy reference roundtrip sizes)
  add_executable(client_${name}_test ${CMAKE_CURRENT_LIST_DIR}/client_${name}_test.cc)
  target_link_libraries(client_${name}_test PRIVATE tally_client GTest::gtest_main)
  gtest_discover_tests(client_${name}_test PROPERTIES LABELS unit)
endforeach()
