// Opening .npy and raw files, and generating random arrays.
#include "tally/client/input.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tally/client/npy.h"
#include "tally/client/wire.h"

namespace tally::client {

absl::StatusOr<InputArray> InputArray::OpenNpy(const std::string& path) {
  absl::StatusOr<MappedFile> file = MappedFile::Open(path);
  if (!file.ok()) return file.status();
  absl::StatusOr<NpyHeader> header =
      ParseNpyHeader(std::span<const std::byte>(file->data(), file->size()));
  if (!header.ok()) {
    return absl::Status(header.status().code(), absl::StrCat(path, ": ", header.status().message()));
  }
  InputArray input;
  input.array_.dtype = header->dtype;
  input.array_.data = file->data() + header->data_offset;
  input.array_.length = header->elements();
  input.array_.row_length = header->row_length();
  input.description_ = absl::StrCat(path, " (", NameOf(header->dtype), ", shape ",
                                    absl::StrJoin(header->shape, "x"), ")");
  input.storage_ = *std::move(file);
  return input;
}

absl::StatusOr<InputArray> InputArray::OpenRaw(const std::string& path, DType dtype) {
  absl::StatusOr<MappedFile> file = MappedFile::Open(path);
  if (!file.ok()) return file.status();
  const std::uint64_t element = rules::SizeOf(dtype);
  if (file->size() % element != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": size ", file->size(),
                                                   " bytes is not a multiple of the ",
                                                   NameOf(dtype), " element size (",
                                                   element, " bytes)"));
  }
  InputArray input;
  input.array_.dtype = dtype;
  input.array_.data = file->data();
  input.array_.length = file->size() / element;
  input.description_ = absl::StrCat(path, " (raw ", NameOf(dtype), ", ",
                                    input.array_.length, " elements)");
  input.storage_ = *std::move(file);
  return input;
}

InputArray InputArray::Random(std::uint64_t length, DType dtype, std::uint64_t seed,
                              const FillProgress& progress) {
  HostBuffer buffer(length * rules::SizeOf(dtype));
  FillRandom(dtype, seed, buffer.data(), length, progress);
  InputArray input;
  input.array_.dtype = dtype;
  input.array_.data = buffer.data();
  input.array_.length = length;
  input.description_ =
      absl::StrCat("random ", NameOf(dtype), " (", length, " elements, seed ", seed, ")");
  input.storage_ = std::move(buffer);
  return input;
}

}  // namespace tally::client
