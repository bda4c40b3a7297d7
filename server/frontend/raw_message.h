// Parses a received protobuf message straight from gRPC's receive slices,
// leaving its one large bytes field where it arrived instead of copying it
// into a std::string: the array's bytes reach the backend uncopied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/message.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace tally {

// The bytes of one field as pieces of the slices they arrived in, in order.
// Holds references to those slices, so the pieces stay valid for as long as
// this object lives, whatever happens to the ByteBuffer they came from.
// Move-only: a copy would point into the original's slices. May be destroyed
// on any thread, gRPC's or not (see Release).
class SlicedBytes {
 public:
  SlicedBytes() = default;
  SlicedBytes(SlicedBytes&& other) noexcept;
  SlicedBytes& operator=(SlicedBytes&& other) noexcept;
  SlicedBytes(const SlicedBytes&) = delete;
  SlicedBytes& operator=(const SlicedBytes&) = delete;
  ~SlicedBytes() { Release(); }

  // In order; none is empty.
  const std::vector<std::span<const std::byte>>& pieces() const { return pieces_; }
  std::uint64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  friend absl::StatusOr<SlicedBytes> ParseWithBytesInPlace(const grpc::ByteBuffer& buffer, int bytes_field,
                                                           google::protobuf::Message* message);

  // Drops the references to the slices.
  void Release();

  // Small slices keep their bytes inline, inside grpc::Slice itself: the
  // pieces may point into this vector's elements, which a move of the vector
  // leaves where they are.
  std::vector<grpc::Slice> slices_;
  std::vector<std::span<const std::byte>> pieces_;
  std::uint64_t size_ = 0;
};

// Parses `buffer`, a serialized `message`, with one difference from
// protobuf's own parser: the singular bytes field numbered `bytes_field` is
// left in place. Its value (the last occurrence, unless a later member of its
// oneof cleared it) is returned as pieces of `buffer`'s slices, and in
// `message` the field is set as protobuf would set it (a oneof's case shows
// it), but empty.
// Every other field, unknown ones included, is parsed by protobuf exactly as
// in the whole message; only the top-level fields are walked here, to find
// where the big one lies. A field or varint may straddle slice boundaries.
//
// Malformed input gives INVALID_ARGUMENT naming the message type, the byte
// offset and what is wrong. Groups (wire types 3 and 4) are refused: tally's
// messages have none, though protobuf would keep one as an unknown field. A
// tag over 32 bits is refused too, where protobuf drops the excess bits.
// A `bytes_field` that is not a singular bytes field of `message` gives
// INTERNAL.
[[nodiscard]] absl::StatusOr<SlicedBytes> ParseWithBytesInPlace(const grpc::ByteBuffer& buffer, int bytes_field,
                                                                google::protobuf::Message* message);

}  // namespace tally
