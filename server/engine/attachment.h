// Memory a client shares with the server, made readable to a backend once,
// at registration, for any number of requests: a mapped shared-memory file
// (pinned by the cuda backend, read in place by the cpu backend) or a CUDA
// IPC allocation opened on its GPU. Destroying the Attachment undoes what
// attaching did (cudaHostUnregister, cudaIpcCloseMemHandle); the mapping
// itself belongs to whoever made it (server/engine/regions/).
#pragma once

#include <cstddef>
#include <span>

#include "server/engine/source.h"

namespace tally {

class Attachment {
 public:
  virtual ~Attachment() = default;
  // The shared bytes, where the backend reads them.
  virtual Extent extent() const = 0;
};

// Host bytes read as they lie: what a backend with nothing to register does.
class PlainHostAttachment final : public Attachment {
 public:
  explicit PlainHostAttachment(std::span<const std::byte> bytes) : bytes_(bytes) {}
  Extent extent() const override { return Extent::PageableHost(bytes_); }

 private:
  std::span<const std::byte> bytes_;
};

}  // namespace tally
