# Included by the top-level CMakeLists.txt with TALLY_BUILD_FUZZERS, before
# any target: every target of a fuzz build is instrumented for ASan and
# UBSan, and for libFuzzer's coverage feedback. Only clang has libFuzzer.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "TALLY_BUILD_FUZZERS needs clang (libFuzzer); configure with "
                      "CXX=clang++-14 or use scripts/fuzz.sh")
endif()
# UBSan stops at the first report, as ASan does, so libFuzzer sees a crash.
set(TALLY_SANITIZE -fsanitize=address,undefined -fno-sanitize-recover=all)
add_compile_options(${TALLY_SANITIZE} -fsanitize=fuzzer-no-link -fno-omit-frame-pointer -g)
add_link_options(${TALLY_SANITIZE})
# scripts/fuzz-coverage.sh: clang's source-based coverage as well, so that
# replaying a corpus shows which lines the fuzzers reach.
option(TALLY_FUZZ_COVERAGE "Fuzz build: add source-based coverage (llvm-cov)" OFF)
if(TALLY_FUZZ_COVERAGE)
  add_compile_options(-fprofile-instr-generate -fcoverage-mapping)
  add_link_options(-fprofile-instr-generate)
endif()
