// The flags that cut arrays into stream messages.
#include "chunking_flags.h"

#include "tally/client/sizes.h"

namespace tally::client::tool {

void AddChunkingFlags(CLI::App& app, ChunkingFlags& f, const std::string& auto_mode,
                      const std::string& chunk_text) {
  const CallOptions defaults;
  AddSizeFlag(app, "--stream-threshold", f.stream_threshold, "BYTES",
              "with " + auto_mode + ", arrays over this many bytes go by AggregateStream, smaller ones in one "
              "unary call",
              SizeText(defaults.stream_threshold_bytes));
  AddSizeFlag(app, "--chunk", f.chunk, "BYTES", chunk_text, SizeText(defaults.chunk_bytes));
}

void ChunkingFlags::ApplyTo(CallOptions& call) const {
  if (stream_threshold) call.stream_threshold_bytes = *stream_threshold;
  if (chunk) call.chunk_bytes = *chunk;
}

}  // namespace tally::client::tool
