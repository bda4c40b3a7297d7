// Unit tests of ParseWithBytesInPlace: on random messages cut into random
// slices it must give protobuf's own answer, with the big bytes field's value
// left in the slices, and it must refuse malformed messages.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "google/protobuf/util/field_comparator.h"
#include "google/protobuf/util/message_differencer.h"
#include "server/frontend/raw_message.h"
#include "tally/v1/tally.pb.h"
#include "tests/unit/test_seed.h"

namespace tally {
namespace {

using Rng = std::mt19937_64;
using google::protobuf::util::MessageDifferencer;

constexpr int kHeaderField = v1::AggregateStreamRequest::kHeaderFieldNumber;
constexpr int kChunkField = v1::AggregateStreamRequest::kChunkFieldNumber;
constexpr int kSpecField = v1::AggregateRequest::kSpecFieldNumber;
constexpr int kDataField = v1::AggregateRequest::kDataFieldNumber;
constexpr int kAggregationsField = v1::AggregateRequest::kAggregationsFieldNumber;

std::uint64_t Uniform(Rng& rng, std::uint64_t lo, std::uint64_t hi) {
  return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
}

std::string RandomBytes(Rng& rng, std::size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// A varint, padded with `pad` redundant bytes (protobuf accepts those).
std::string Varint(std::uint64_t value, int pad = 0) {
  std::string out;
  while (value >= 0x80 || pad > 0) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
    if (value == 0 && pad > 0) {
      while (--pad > 0) out.push_back(static_cast<char>(0x80));
      break;
    }
  }
  out.push_back(static_cast<char>(value));
  return out;
}

int VarintSize(std::uint64_t value) { return static_cast<int>(Varint(value).size()); }

// Mostly canonical, sometimes padded up to `max_bytes` in all.
std::string RandomVarint(Rng& rng, std::uint64_t value, int max_bytes) {
  const int room = max_bytes - VarintSize(value);
  return Varint(value, room > 0 && Uniform(rng, 0, 3) == 0 ? static_cast<int>(Uniform(rng, 1, room)) : 0);
}

std::string Tag(Rng& rng, std::uint32_t field, std::uint32_t wire_type) {
  return RandomVarint(rng, std::uint64_t{field} << 3 | wire_type, 5);
}

std::string LengthDelimited(Rng& rng, std::uint32_t field, const std::string& payload) {
  return Tag(rng, field, 2) + RandomVarint(rng, payload.size(), 5) + payload;
}

std::string RandomChunk(Rng& rng) {
  switch (Uniform(rng, 0, 9)) {
    case 0: return "";
    case 1: return RandomBytes(rng, Uniform(rng, 4096, 100000));
    default: return RandomBytes(rng, Uniform(rng, 1, 300));
  }
}

v1::ArraySpec RandomSpec(Rng& rng) {
  v1::ArraySpec spec;
  spec.set_dtype(static_cast<v1::DType>(Uniform(rng, 0, 7)));
  if (Uniform(rng, 0, 1)) spec.set_length(Uniform(rng, 0, 1) ? Uniform(rng, 0, 100) : rng());
  if (Uniform(rng, 0, 1)) spec.set_row_length(Uniform(rng, 0, 50));
  return spec;
}

v1::Aggregation RandomAggregation(Rng& rng) {
  v1::Aggregation a;
  a.set_op(static_cast<v1::Op>(Uniform(rng, 0, 12)));
  if (Uniform(rng, 0, 1)) a.set_ddof(static_cast<double>(Uniform(rng, 0, 3)) / 2);
  if (Uniform(rng, 0, 2) == 0) {
    a.mutable_histogram()->set_bins(static_cast<std::uint32_t>(Uniform(rng, 1, 100)));
    a.mutable_histogram()->set_lo(-1.5);
    a.mutable_histogram()->set_hi(static_cast<double>(Uniform(rng, 0, 9)));
  }
  return a;
}

std::string RandomHeader(Rng& rng) {
  v1::AggregateStreamRequest::Header header;
  if (Uniform(rng, 0, 3) > 0) *header.mutable_spec() = RandomSpec(rng);
  for (int i = static_cast<int>(Uniform(rng, 0, 3)); i > 0; --i) *header.add_aggregations() = RandomAggregation(rng);
  return header.SerializeAsString();
}

// A field the message does not know, or a known number with a wire type that
// does not match its field (protobuf keeps both as unknown fields).
std::string RandomUnknownField(Rng& rng, std::uint32_t known_fields) {
  static const std::uint32_t kNumbers[] = {4, 5, 15, 16, 100, 2047, 2048, 19000, (1u << 29) - 1};
  std::uint32_t field = kNumbers[Uniform(rng, 0, std::size(kNumbers) - 1)];
  static const std::uint32_t kWireTypes[] = {0, 1, 2, 5};
  std::uint32_t wire_type = kWireTypes[Uniform(rng, 0, 3)];
  if (Uniform(rng, 0, 3) == 0) {
    field = static_cast<std::uint32_t>(Uniform(rng, 1, known_fields));
    wire_type = Uniform(rng, 0, 1) ? 0 : 5;
  }
  switch (wire_type) {
    case 0: return Tag(rng, field, 0) + RandomVarint(rng, rng() >> Uniform(rng, 0, 63), 10);
    case 1: return Tag(rng, field, 1) + RandomBytes(rng, 8);
    case 2: return LengthDelimited(rng, field, RandomBytes(rng, Uniform(rng, 0, 40)));
    default: return Tag(rng, field, 5) + RandomBytes(rng, 4);
  }
}

// Random AggregateStreamRequest wire bytes: headers, chunks and unknown
// fields in any order and number, so either member of the oneof may win.
std::string RandomStreamMessage(Rng& rng) {
  std::string wire;
  for (int i = static_cast<int>(Uniform(rng, 0, 7)); i > 0; --i) {
    switch (Uniform(rng, 0, 6)) {
      case 0:
      case 1: wire += LengthDelimited(rng, kHeaderField, RandomHeader(rng)); break;
      case 2:
      case 3:
      case 4: wire += LengthDelimited(rng, kChunkField, RandomChunk(rng)); break;
      default: wire += RandomUnknownField(rng, 2); break;
    }
  }
  return wire;
}

// Random AggregateRequest wire bytes, data repeated or missing at times.
std::string RandomUnaryMessage(Rng& rng) {
  std::string wire;
  for (int i = static_cast<int>(Uniform(rng, 0, 7)); i > 0; --i) {
    switch (Uniform(rng, 0, 6)) {
      case 0: wire += LengthDelimited(rng, kSpecField, RandomSpec(rng).SerializeAsString()); break;
      case 1:
      case 2: wire += LengthDelimited(rng, kAggregationsField, RandomAggregation(rng).SerializeAsString()); break;
      case 3:
      case 4: wire += LengthDelimited(rng, kDataField, RandomChunk(rng)); break;
      default: wire += RandomUnknownField(rng, 3); break;
    }
  }
  return wire;
}

// Cuts `wire` into slices: 0: one slice; 1: one byte each; 2: 1 to 16 bytes;
// 3: 1 to 4096 bytes; 4: at least 64 bytes each (no slice small enough to be
// stored inline in grpc::Slice).
std::vector<grpc::Slice> Cut(const std::string& wire, int mode, Rng& rng) {
  std::vector<grpc::Slice> slices;
  std::size_t at = 0;
  while (at < wire.size()) {
    std::size_t n = wire.size() - at;
    switch (mode) {
      case 0: break;
      case 1: n = 1; break;
      case 2: n = Uniform(rng, 1, 16); break;
      case 3: n = Uniform(rng, 1, 4096); break;
      default:
        n = Uniform(rng, 64, 512);
        if (wire.size() - at < n + 64) n = wire.size() - at;  // no short slice at the end either
        break;
    }
    n = std::min(n, wire.size() - at);
    slices.emplace_back(wire.data() + at, n);
    at += n;
  }
  return slices;
}

constexpr int kCutModes = 5;

std::string Joined(const SlicedBytes& bytes) {
  std::string joined;
  for (std::span<const std::byte> piece : bytes.pieces()) {
    EXPECT_FALSE(piece.empty());
    joined.append(reinterpret_cast<const char*>(piece.data()), piece.size());
  }
  return joined;
}

// Splits `wire` cut every way and checks the result against `reference`
// (protobuf's parse with the big field emptied) and `expected` (protobuf's
// value of the big field).
template <typename Message>
void ExpectProtobufsAnswer(const std::string& wire, int field, const Message& reference, const std::string& expected,
                           Rng& rng) {
  for (int mode = 0; mode < kCutModes; ++mode) {
    SCOPED_TRACE(::testing::Message() << "cut mode " << mode << ", " << wire.size() << " bytes");
    Message got;
    got.GetReflection()->MutableUnknownFields(&got)->AddVarint(999, 1);  // parsing must replace this
    std::deque<SlicedBytes> queue;
    {
      std::vector<grpc::Slice> slices = Cut(wire, mode, rng);
      grpc::ByteBuffer buffer(slices.data(), slices.size());
      absl::StatusOr<SlicedBytes> bytes = ParseWithBytesInPlace(buffer, field, &got);
      ASSERT_TRUE(bytes.ok()) << bytes.status();
      queue.push_back(std::move(*bytes));
    }
    // The buffer is gone and the pieces moved: they must still be good.
    SlicedBytes bytes = std::move(queue.front());
    queue.pop_front();
    EXPECT_EQ(got.SerializeAsString(), reference.SerializeAsString());
    EXPECT_TRUE(MessageDifferencer::Equals(got, reference)) << got.DebugString() << "\nvs\n" << reference.DebugString();
    EXPECT_EQ(bytes.size(), expected.size());
    EXPECT_EQ(bytes.empty(), expected.empty());
    const std::string joined = Joined(bytes);
    ASSERT_EQ(joined.size(), expected.size());
    EXPECT_TRUE(joined == expected) << "the big field's bytes differ";
  }
}

void CheckStreamMessage(const std::string& wire, Rng& rng) {
  v1::AggregateStreamRequest reference;
  ASSERT_TRUE(reference.ParseFromString(wire));
  std::string expected;
  if (reference.payload_case() == v1::AggregateStreamRequest::kChunk) {
    expected = reference.chunk();
    reference.set_chunk("");  // still the oneof's case
  }
  ExpectProtobufsAnswer(wire, kChunkField, reference, expected, rng);
}

void CheckUnaryMessage(const std::string& wire, Rng& rng) {
  v1::AggregateRequest reference;
  ASSERT_TRUE(reference.ParseFromString(wire));
  const std::string expected = reference.data();
  reference.clear_data();
  ExpectProtobufsAnswer(wire, kDataField, reference, expected, rng);
}

TEST(ParseWithBytesInPlace, RandomStreamMessagesGiveProtobufsAnswer) {
  TALLY_SEEDED_RNG(rng);
  int chunks = 0, headers = 0;
  for (int i = 0; i < 400; ++i) {
    const std::string wire = RandomStreamMessage(rng);
    v1::AggregateStreamRequest parsed;
    ASSERT_TRUE(parsed.ParseFromString(wire));
    chunks += parsed.payload_case() == v1::AggregateStreamRequest::kChunk;
    headers += parsed.payload_case() == v1::AggregateStreamRequest::kHeader;
    CheckStreamMessage(wire, rng);
    if (HasFatalFailure()) return;
  }
  // Both cases of the oneof were exercised.
  EXPECT_GT(chunks, 50);
  EXPECT_GT(headers, 50);
}

// GroupByStream's chunks carry number fields beside the bytes, before
// them (the Python client writes them so) or after (protobuf's order).
TEST(ParseWithBytesInPlace, GroupByStreamChunksKeepTheirColumnEitherSide) {
  TALLY_SEEDED_RNG(rng);
  for (const std::uint32_t column : {0u, 1u, 300u, 70000u}) {
    for (const bool validity : {false, true}) {
      v1::GroupByStreamRequest m;
      m.set_column(column);
      m.set_validity(validity);
      m.set_chunk(std::string(static_cast<std::size_t>(rng() % 5000), 'x'));
      const std::string chunk_first = m.SerializeAsString();
      v1::GroupByStreamRequest numbers = m;
      numbers.clear_payload();
      v1::GroupByStreamRequest bytes_only;
      bytes_only.set_chunk(m.chunk());
      const std::string numbers_first = numbers.SerializeAsString() + bytes_only.SerializeAsString();
      v1::GroupByStreamRequest reference = m;
      reference.set_chunk("");  // still the oneof's case
      for (const std::string& wire : {chunk_first, numbers_first}) {
        ExpectProtobufsAnswer(wire, v1::GroupByStreamRequest::kChunkFieldNumber, reference, m.chunk(), rng);
      }
    }
  }
}

TEST(ParseWithBytesInPlace, RandomUnaryMessagesGiveProtobufsAnswer) {
  TALLY_SEEDED_RNG(rng);
  for (int i = 0; i < 400; ++i) {
    CheckUnaryMessage(RandomUnaryMessage(rng), rng);
    if (HasFatalFailure()) return;
  }
}

TEST(ParseWithBytesInPlace, TheLastOccurrenceDecides) {
  Rng rng(1);
  v1::AggregateStreamRequest::Header header;
  header.mutable_spec()->set_length(7);
  const std::string h = Tag(rng, kHeaderField, 2) + Varint(header.ByteSizeLong()) + header.SerializeAsString();
  const std::string c1 = Tag(rng, kChunkField, 2) + Varint(3) + "abc";
  const std::string c2 = Tag(rng, kChunkField, 2) + Varint(2) + "de";
  struct Case {
    std::string wire;
    v1::AggregateStreamRequest::PayloadCase payload;
    std::string chunk;
  };
  const Case cases[] = {
      {c1 + c2, v1::AggregateStreamRequest::kChunk, "de"},
      {c2 + c1, v1::AggregateStreamRequest::kChunk, "abc"},
      {h + c1, v1::AggregateStreamRequest::kChunk, "abc"},
      {c1 + h, v1::AggregateStreamRequest::kHeader, ""},
      {c1 + h + c2, v1::AggregateStreamRequest::kChunk, "de"},
      {h + c1 + h, v1::AggregateStreamRequest::kHeader, ""},
      {"", v1::AggregateStreamRequest::PAYLOAD_NOT_SET, ""},
  };
  for (const Case& c : cases) {
    for (int mode = 0; mode < kCutModes; ++mode) {
      std::vector<grpc::Slice> slices = Cut(c.wire, mode, rng);
      grpc::ByteBuffer buffer(slices.data(), slices.size());
      v1::AggregateStreamRequest message;
      absl::StatusOr<SlicedBytes> chunk = ParseWithBytesInPlace(buffer, kChunkField, &message);
      ASSERT_TRUE(chunk.ok()) << chunk.status();
      EXPECT_EQ(message.payload_case(), c.payload);
      EXPECT_EQ(message.chunk(), "");
      EXPECT_EQ(Joined(*chunk), c.chunk);
      if (c.payload == v1::AggregateStreamRequest::kHeader) {
        EXPECT_EQ(message.header().spec().length(), 7u);
      }
    }
  }
}

TEST(ParseWithBytesInPlace, ThePiecesPointIntoTheReceivedSlices) {
  TALLY_SEEDED_RNG(rng);
  const std::string data = RandomBytes(rng, 100000);
  v1::AggregateRequest request;
  *request.mutable_spec() = RandomSpec(rng);
  request.set_data(data);
  *request.add_aggregations() = RandomAggregation(rng);
  const std::string wire = request.SerializeAsString();
  std::vector<grpc::Slice> slices = Cut(wire, 4, rng);
  grpc::ByteBuffer buffer(slices.data(), slices.size());
  v1::AggregateRequest message;
  absl::StatusOr<SlicedBytes> bytes = ParseWithBytesInPlace(buffer, kDataField, &message);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(Joined(*bytes), data);
  EXPECT_GT(bytes->pieces().size(), data.size() / 512);
  for (std::span<const std::byte> piece : bytes->pieces()) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(piece.data());
    bool inside = false;
    for (const grpc::Slice& s : slices) inside |= p >= s.begin() && p + piece.size() <= s.end();
    EXPECT_TRUE(inside) << "a piece of " << piece.size() << " bytes is a copy";
  }
}

TEST(ParseWithBytesInPlace, AnEmptyOrMissingMessageHasNoFields) {
  v1::AggregateStreamRequest message;
  message.mutable_header();
  absl::StatusOr<SlicedBytes> bytes = ParseWithBytesInPlace(grpc::ByteBuffer(), kChunkField, &message);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(message.payload_case(), v1::AggregateStreamRequest::PAYLOAD_NOT_SET);
  EXPECT_TRUE(bytes->empty());
  EXPECT_TRUE(bytes->pieces().empty());
}

TEST(ParseWithBytesInPlace, OnlyASingularBytesFieldCanStayInPlace) {
  grpc::ByteBuffer empty;
  v1::AggregateStreamRequest stream;
  EXPECT_EQ(ParseWithBytesInPlace(empty, kHeaderField, &stream).status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(ParseWithBytesInPlace(empty, 9, &stream).status().code(), absl::StatusCode::kInternal);
  v1::AggregateRequest unary;
  EXPECT_EQ(ParseWithBytesInPlace(empty, kAggregationsField, &unary).status().code(), absl::StatusCode::kInternal);
}

struct Malformed {
  const char* name;
  std::string wire;
  const char* says;
  bool protobuf_refuses;  // false where protobuf is more lenient (see raw_message.h)
};

std::string operator""_b(const char* s, std::size_t n) { return std::string(s, n); }

TEST(ParseWithBytesInPlace, MalformedMessagesAreRefused) {
  const std::string ten_continuations(10, static_cast<char>(0x80));
  const Malformed cases[] = {
      {"tag cut off", "\x80"_b, "at byte 0, the message ends inside the tag", true},
      {"tag cut off after a field", "\x12\x01x\x92"_b, "at byte 3, the message ends inside the tag", true},
      {"tag of six bytes", "\x80\x80\x80\x80\x80\x01\x00"_b, "the tag is longer than 5 bytes", true},
      {"tag over 32 bits", "\x92\x80\x80\x80\x10\x00"_b, "the tag does not fit in 32 bits", false},
      {"field number 0", "\x00"_b, "field number 0", true},
      {"field number 0, wire type 2", "\x02\x00"_b, "field number 0", true},
      {"varint cut off", "\x18\x80\x80"_b, "the message ends inside the varint of field 3", true},
      {"varint of eleven bytes", "\x18"_b + ten_continuations + "\x01"_b, "varint of field 3 is longer than 10 bytes",
       true},
      {"fixed64 cut off", "\x19\x01\x02\x03"_b, "field 3 needs 8 bytes, but only 3 are left", true},
      {"fixed32 cut off", "\x15\x01"_b, "field 2 (chunk) needs 4 bytes, but only 1 are left", true},
      {"length cut off", "\x12\x80"_b, "the message ends inside the length of field 2 (chunk)", true},
      {"length of six bytes", "\x12\x83\x80\x80\x80\x80\x00xyz"_b, "the length of field 2 (chunk) is longer than 5",
       true},
      {"length of 2 GiB", "\x12\x80\x80\x80\x80\x08"_b, "is 2 GiB or more", true},
      {"chunk past the end", "\x12\x05" "abc"_b, "at byte 2, field 2 (chunk) needs 5 bytes, but only 3 are left", true},
      {"chunk one byte short", "\x12\x04" "abc"_b, "field 2 (chunk) needs 4 bytes, but only 3 are left", true},
      {"unknown field past the end", "\x2a\x05" "ab"_b, "field 5 needs 5 bytes, but only 2", true},
      {"header past the end", "\x0a\x7f"_b, "field 1 (header) needs 127 bytes, but only 0", true},
      {"wire type 6", "\x1e"_b, "field 3 has wire type 6, which does not exist", true},
      {"wire type 7", "\x12\x00\x0f"_b, "at byte 2, field 1 (header) has wire type 7", true},
      {"end group", "\x1c"_b, "wire type 4 (a group)", true},
      {"group", "\x1b\x08\x01\x1c"_b, "field 3 has wire type 3 (a group)", false},
      {"bad header contents", "\x0a\x02\x0a\x05"_b, "the fields other than field 2 (chunk) do not parse", true},
      {"bad header after a chunk", "\x12\x01x\x0a\x01\x80"_b, "the fields other than field 2 (chunk) do not parse",
       true},
  };
  TALLY_SEEDED_RNG(rng);
  for (const Malformed& bad : cases) {
    SCOPED_TRACE(bad.name);
    v1::AggregateStreamRequest reference;
    EXPECT_EQ(!reference.ParseFromString(bad.wire), bad.protobuf_refuses);
    // Wherever the slices are cut, the answer is the same.
    for (int mode = 0; mode < kCutModes; ++mode) {
      std::vector<grpc::Slice> slices = Cut(bad.wire, mode, rng);
      grpc::ByteBuffer buffer(slices.data(), slices.size());
      v1::AggregateStreamRequest message;
      absl::StatusOr<SlicedBytes> bytes = ParseWithBytesInPlace(buffer, kChunkField, &message);
      ASSERT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument) << bytes.status();
      EXPECT_NE(bytes.status().message().find(bad.says), absl::string_view::npos) << bytes.status();
      EXPECT_NE(bytes.status().message().find("tally.v1.AggregateStreamRequest"), absl::string_view::npos);
    }
  }
}

// A message cut short anywhere, or with a byte changed, is refused exactly
// when protobuf refuses it (but for groups and over-long tags, which protobuf
// lets through), and otherwise parsed as protobuf parses it.
TEST(ParseWithBytesInPlace, DamagedMessagesGiveProtobufsAnswer) {
  TALLY_SEEDED_RNG(rng);
  int refused = 0, accepted = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string wire = Uniform(rng, 0, 1) ? RandomStreamMessage(rng) : RandomUnaryMessage(rng);
    if (wire.empty()) continue;
    if (Uniform(rng, 0, 1)) {
      wire.resize(Uniform(rng, 0, wire.size() - 1));
    } else {
      // Mostly within the first bytes, where the tags and lengths are.
      const std::size_t at = Uniform(rng, 0, std::min<std::size_t>(wire.size() - 1, Uniform(rng, 0, 1) ? 8 : 1 << 20));
      wire[at] = static_cast<char>(rng());
    }
    const bool stream = Uniform(rng, 0, 1);
    std::unique_ptr<google::protobuf::Message> reference, got;
    if (stream) {
      reference = std::make_unique<v1::AggregateStreamRequest>();
      got = std::make_unique<v1::AggregateStreamRequest>();
    } else {
      reference = std::make_unique<v1::AggregateRequest>();
      got = std::make_unique<v1::AggregateRequest>();
    }
    const int field = stream ? kChunkField : kDataField;
    std::vector<grpc::Slice> slices = Cut(wire, static_cast<int>(Uniform(rng, 0, kCutModes - 1)), rng);
    grpc::ByteBuffer buffer(slices.data(), slices.size());
    absl::StatusOr<SlicedBytes> bytes = ParseWithBytesInPlace(buffer, field, got.get());
    if (!reference->ParseFromString(wire)) {
      ++refused;
      EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument) << bytes.status();
      continue;
    }
    if (!bytes.ok()) {
      const bool lenient = bytes.status().message().find("a group") != absl::string_view::npos ||
                           bytes.status().message().find("32 bits") != absl::string_view::npos;
      EXPECT_TRUE(lenient) << "protobuf parses what was refused: " << bytes.status();
      continue;
    }
    ++accepted;
    if (stream) {
      auto& r = static_cast<v1::AggregateStreamRequest&>(*reference);
      const std::string expected = r.payload_case() == v1::AggregateStreamRequest::kChunk ? r.chunk() : "";
      if (r.payload_case() == v1::AggregateStreamRequest::kChunk) r.set_chunk("");
      EXPECT_TRUE(Joined(*bytes) == expected);
    } else {
      auto& r = static_cast<v1::AggregateRequest&>(*reference);
      EXPECT_TRUE(Joined(*bytes) == r.data());
      r.clear_data();
    }
    // A damaged byte can make a double NaN (ddof, a histogram edge): both
    // parsers then hold the same NaN, which the default comparison calls
    // unequal.
    google::protobuf::util::DefaultFieldComparator nan_equal;
    nan_equal.set_treat_nan_as_equal(true);
    MessageDifferencer differ;
    differ.set_field_comparator(&nan_equal);
    EXPECT_TRUE(differ.Compare(*got, *reference)) << got->DebugString() << "\nvs\n" << reference->DebugString();
    if (HasFailure()) return;
  }
  // Both outcomes were exercised.
  EXPECT_GT(refused, 300);
  EXPECT_GT(accepted, 300);
}

}  // namespace
}  // namespace tally
