// Fuzzes the client's .npy reader: the fuzz input is a whole file. An
// accepted header must describe exactly the bytes the file holds, in a
// dtype, order and shape tally takes, so the client never reads past the
// mapping it sends from.
#include <span>

#include "tally/client/npy.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data), size);
  absl::StatusOr<tally::client::NpyHeader> header = tally::client::ParseNpyHeader(file);
  if (!header.ok()) {
    TALLY_FUZZ_CHECK(header.status().code() == absl::StatusCode::kInvalidArgument, header.status().ToString());
    return 0;
  }
  TALLY_FUZZ_CHECK(header->shape.size() == 1 || header->shape.size() == 2, "1-D or 2-D");
  TALLY_FUZZ_CHECK(header->data_offset >= 10 && header->data_offset <= size, "the data starts inside the file");
  const std::uint64_t elements = header->elements();
  const std::uint64_t element_size = tally::rules::SizeOf(header->dtype);
  TALLY_FUZZ_CHECK(elements <= (size - header->data_offset) / element_size, "the elements fit in the file");
  TALLY_FUZZ_CHECK(header->data_offset + elements * element_size == size, "the data runs to the end of the file");
  if (header->shape.size() == 2) {
    TALLY_FUZZ_CHECK(header->row_length() == header->shape[1], "rows are the second dimension");
    TALLY_FUZZ_CHECK(header->row_length() != 0 || elements == 0, "no rows of zero elements");
  } else {
    TALLY_FUZZ_CHECK(header->row_length() == 0, "a 1-D array has no rows");
  }
  return 0;
}
