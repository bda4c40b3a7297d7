// The one CUDA error header of tally: status-returning checks that record
// where a call failed (file, line, cudaGetErrorName), and a no-throw variant
// for destructors. Plain C++: usable from .cc files built by g++.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

namespace tally::cuda {

// Where the last failed check on this thread was, e.g.
// "cudaErrorInvalidValue at kernels/src/api.cc:120: cudaMemsetAsync(...)",
// the innermost failing call first and each check that passed it on after
// it ("; from group/dense_groups.cu:195"). Callers that turn a cudaError_t
// into a user-visible status read it once.
inline std::string& LastErrorWhere() {
  thread_local std::string where;
  return where;
}

// How many failures this thread has recorded: a check that sees the count
// move while its expression ran is passing on an inner failure.
inline unsigned long long& RecordedFailures() {
  thread_local unsigned long long count = 0;
  return count;
}

inline cudaError_t Record(cudaError_t err, const char* expr, const char* file, int line,
                          unsigned long long failures_before) {
  if (err == cudaSuccess) return err;
  if (RecordedFailures() != failures_before) {
    LastErrorWhere() += std::string("; from ") + file + ":" + std::to_string(line);
  } else {
    LastErrorWhere() = std::string(cudaGetErrorName(err)) + " at " + file + ":" + std::to_string(line) + ": " + expr;
  }
  ++RecordedFailures();
  return err;
}

inline cudaError_t Record(cudaError_t err, const char* expr, const char* file, int line) {
  return Record(err, expr, file, line, RecordedFailures());
}

}  // namespace tally::cuda

// Evaluates a cudaError_t expression; on failure records where and returns
// the error from the enclosing function.
#define TALLY_CUDA_TRY(expr)                                                                     \
  do {                                                                                           \
    const unsigned long long tally_cuda_failures_ = ::tally::cuda::RecordedFailures();           \
    const cudaError_t tally_cuda_err_ = (expr);                                                  \
    if (tally_cuda_err_ != cudaSuccess)                                                          \
      return ::tally::cuda::Record(tally_cuda_err_, #expr, __FILE__, __LINE__, tally_cuda_failures_); \
  } while (0)

// After every kernel launch (CUB's dispatch does the same): a launch error
// shows here; an asynchronous fault shows at the next synchronization.
#define TALLY_CUDA_CHECK_LAUNCH() TALLY_CUDA_TRY(cudaPeekAtLastError())

// For destructors and other places that cannot return a status: prints the
// failure to stderr and carries on.
#define TALLY_CUDA_CHECK_NOTHROW(expr)                                                \
  do {                                                                                \
    const cudaError_t tally_cuda_err_ = (expr);                                       \
    if (tally_cuda_err_ != cudaSuccess)                                               \
      std::fprintf(stderr, "tally: %s at %s:%d: %s\n", cudaGetErrorName(tally_cuda_err_), \
                   __FILE__, __LINE__, #expr);                                        \
  } while (0)
