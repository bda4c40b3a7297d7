// An upload progress bar on stderr, for uploads slow enough to need one.
#pragma once

#include <cstdint>
#include <cstdio>

#include "absl/time/time.h"

namespace tally::client::tool {

// Draws nothing unless the stream is a terminal and the upload has taken
// over a second; redraws at most ten times a second; Finish() (or the
// destructor) erases the line so the results print on a clean screen.
class ProgressBar {
 public:
  explicit ProgressBar(std::FILE* out = stderr);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void Update(std::uint64_t sent, std::uint64_t total);
  void Finish();

 private:
  std::FILE* out_;
  bool enabled_;
  bool drawn_ = false;
  absl::Time start_;
  absl::Time last_draw_ = absl::InfinitePast();
};

}  // namespace tally::client::tool
