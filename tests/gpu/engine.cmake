# The CUDA engine's GPU tests (server/engine/cuda), label gpu; each test skips
# with a message where no CUDA device is visible. Included from
# tests/gpu/CMakeLists.txt: include(${CMAKE_CURRENT_LIST_DIR}/engine.cmake)
if(NOT TALLY_HAVE_CUDA OR NOT TARGET tally_cuda_backend OR TARGET tally_engine_gpu_tests)
  return()
endif()
find_package(GTest REQUIRED)
include(GoogleTest)
add_executable(tally_engine_gpu_tests
  ${CMAKE_CURRENT_LIST_DIR}/engine_results_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/engine_lifecycle_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/engine_resident_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/engine_group_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/engine_exact_sum_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/pinned_pool_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/kept_streams_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/engine_test_util.h)
target_include_directories(tally_engine_gpu_tests PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(tally_engine_gpu_tests PRIVATE
  tally_cuda_backend tally_cpu_backend tally_engine tally_core CUDA::cudart
  GTest::gtest GTest::gtest_main)
gtest_discover_tests(tally_engine_gpu_tests DISCOVERY_MODE PRE_TEST PROPERTIES LABELS gpu)
