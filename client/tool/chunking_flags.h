// --stream-threshold and --chunk, which aggregate and bench share: how an
// array is cut for AggregateStream.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "flags.h"
#include "tally/client/client.h"

namespace tally::client::tool {

struct ChunkingFlags {
  std::optional<std::uint64_t> stream_threshold, chunk;

  bool given() const { return stream_threshold || chunk; }
  // Sets the fields of `call` that were given.
  void ApplyTo(CallOptions& call) const;
};

// Declares them on `app`: `auto_mode` is the flag that lets the threshold
// choose ("--stream=auto"), `chunk_text` says what --chunk cuts.
void AddChunkingFlags(CLI::App& app, ChunkingFlags& flags, const std::string& auto_mode,
                      const std::string& chunk_text);

}  // namespace tally::client::tool
