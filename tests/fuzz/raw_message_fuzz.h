// The differential check behind the two ParseWithBytesInPlace harnesses:
// the fuzz input, cut into slices as gRPC might have received it, must parse
// exactly as protobuf parses the whole message (with the big bytes field
// left in the slices), or be refused where protobuf refuses it too, or where
// raw_message.h says tally is stricter.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/match.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "server/frontend/raw_message.h"
#include "tests/fuzz/fuzz_check.h"

namespace tally::fuzz {

// Cuts `wire` into slices the way `how` says: one slice; slices of 1 to 16 or
// 1 to 512 bytes at pseudo-random points; or a byte each (short messages).
inline std::vector<grpc::Slice> Cut(std::string_view wire, std::uint8_t how) {
  std::vector<grpc::Slice> slices;
  std::uint32_t state = how * 2654435761u + 1;
  const int mode = how & 3;
  std::size_t at = 0;
  while (at < wire.size()) {
    std::size_t n = wire.size() - at;
    state = state * 1664525u + 1013904223u;
    if (mode == 1) n = 1 + (state >> 28);
    if (mode == 2) n = 1 + (state >> 23);
    if (mode == 3) n = wire.size() <= 512 ? 1 : 1 + (state >> 28);
    n = std::min(n, wire.size() - at);
    slices.emplace_back(wire.data() + at, n);
    at += n;
  }
  return slices;
}

inline std::string Joined(const SlicedBytes& bytes) {
  std::string joined;
  for (std::span<const std::byte> piece : bytes.pieces()) {
    TALLY_FUZZ_CHECK(!piece.empty(), "no piece is empty");
    joined.append(reinterpret_cast<const char*>(piece.data()), piece.size());
  }
  TALLY_FUZZ_CHECK(joined.size() == bytes.size(), "size() is the pieces' total");
  return joined;
}

// Parses input[1:] (cut as input[0] says) as a `Message` with field
// `bytes_field` in place, checks the answer against protobuf's, and hands an
// accepted message and its big field's size to `then`.
template <typename Message, typename Then>
void CheckAgainstProtobuf(const std::uint8_t* data, std::size_t size, int bytes_field, Then&& then) {
  if (size == 0) return;
  const std::string_view wire(reinterpret_cast<const char*>(data) + 1, size - 1);
  Message got;
  SlicedBytes bytes;
  absl::Status status;
  {
    std::vector<grpc::Slice> slices = Cut(wire, data[0]);
    grpc::ByteBuffer buffer(slices.data(), slices.size());
    absl::StatusOr<SlicedBytes> parsed = ParseWithBytesInPlace(buffer, bytes_field, &got);
    status = parsed.status();
    if (parsed.ok()) bytes = std::move(*parsed);
  }  // the pieces must outlive the buffer and its slices

  Message reference;
  const bool protobuf_ok = reference.ParseFromArray(wire.data(), static_cast<int>(wire.size()));
  if (!status.ok()) {
    TALLY_FUZZ_CHECK(status.code() == absl::StatusCode::kInvalidArgument, status.ToString());
    TALLY_FUZZ_CHECK(absl::StrContains(status.message(), reference.GetTypeName()), status.ToString());
    // Where protobuf is more lenient, the refusal says which rule it broke.
    TALLY_FUZZ_CHECK(!protobuf_ok || absl::StrContains(status.message(), "(a group)") ||
                         absl::StrContains(status.message(), "does not fit in 32 bits"),
                     status.ToString());
    return;
  }
  TALLY_FUZZ_CHECK(protobuf_ok, "a message tally accepts, protobuf accepts");
  const google::protobuf::FieldDescriptor* field = Message::descriptor()->FindFieldByNumber(bytes_field);
  const google::protobuf::Reflection* reflection = reference.GetReflection();
  std::string expected;
  if (reflection->HasField(reference, field)) {
    expected = reflection->GetString(reference, field);
    reflection->SetString(&reference, field, std::string());  // present, and empty, as in `got`
  }
  TALLY_FUZZ_CHECK(Joined(bytes) == expected, "the big field's bytes are protobuf's");
  // Compared as bytes: MessageDifferencer would find a NaN ddof unequal to itself.
  TALLY_FUZZ_CHECK(got.SerializeAsString() == reference.SerializeAsString(),
                   got.DebugString() + " vs " + reference.DebugString());
  then(got, bytes.size());
}

}  // namespace tally::fuzz
