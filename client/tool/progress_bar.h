// A progress bar on stderr, for uploads (and the random data generated
// before them) slow enough to need one.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/time/time.h"

namespace tally::client::tool {

// Draws nothing unless the stream is a terminal and the work has taken
// over a second; redraws at most ten times a second; Finish() (or the
// destructor) erases the line so the results print on a clean screen.
// `what` names the work: "uploading", "generating".
class ProgressBar {
 public:
  explicit ProgressBar(std::string what = "uploading", std::FILE* out = stderr);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // `done` of `total` bytes.
  void Update(std::uint64_t done, std::uint64_t total);
  void Finish();

 private:
  std::string what_;
  std::FILE* out_;
  bool enabled_;
  bool drawn_ = false;
  absl::Time start_;
  absl::Time last_draw_ = absl::InfinitePast();
};

}  // namespace tally::client::tool
