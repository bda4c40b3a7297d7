// Memory a backend keeps an array in between requests (a resident dataset):
// filled once, in order, by an upload, then read in place by any number of
// reductions at once through its Extent. The cpu backend holds host memory,
// the cuda backend memory of one GPU. Who may read it, for how long, and
// when it goes is the dataset store's business (server/engine/datasets/).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "server/engine/source.h"

namespace tally {

class ResidentMemory {
 public:
  virtual ~ResidentMemory() = default;

  // Appends the next bytes of the array (pieces of any size, in order; the
  // upload's receive buffers, or any other Extent).
  [[nodiscard]] virtual absl::Status Append(const Extent& piece) = 0;
  // Waits until every appended byte is in place; after it, extent() may be
  // read. Called once, after the last Append().
  [[nodiscard]] virtual absl::Status Seal() = 0;
  // The whole allocation, where it lies.
  virtual Extent extent() const = 0;
};

// One place resident memory can live, with its own byte budget: the host
// for the cpu backend, each GPU for the cuda backend.
struct ResidentPlace {
  int index = 0;          // passed back to Backend::AllocateResident
  std::string label;      // metrics label and messages: "host", "cuda:0"
};

}  // namespace tally
