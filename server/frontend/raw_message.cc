#include "server/frontend/raw_message.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"

namespace tally {
namespace {

// Protobuf's limits: a tag is a varint of at most 5 bytes; a length, at most
// 5 bytes and under 2 GiB; any other varint, at most 10 bytes.
constexpr int kMaxTagBytes = 5;
constexpr int kMaxLengthBytes = 5;
constexpr int kMaxVarintBytes = 10;
constexpr std::uint64_t kMaxLength = std::numeric_limits<std::int32_t>::max();

enum WireType : std::uint32_t {
  kVarint = 0,
  kFixed64 = 1,
  kLengthDelimited = 2,
  kStartGroup = 3,
  kEndGroup = 4,
  kFixed32 = 5,
};

// A position in a message that lies in a sequence of slices.
class SliceCursor {
 public:
  explicit SliceCursor(const std::vector<grpc::Slice>& slices) : slices_(&slices) { SkipExhausted(); }

  // Bytes from the start of the message.
  std::uint64_t offset() const { return offset_; }

  // False at the end of the message.
  bool Next(std::uint8_t* byte) {
    if (slice_ == slices_->size()) return false;
    *byte = (*slices_)[slice_].begin()[at_];
    ++at_;
    ++offset_;
    SkipExhausted();
    return true;
  }

  // Moves `n` bytes on (no further than the end), handing each contiguous
  // piece of them, never an empty one, to visit(std::span<const std::byte>).
  template <typename Visit>
  void Advance(std::uint64_t n, Visit&& visit) {
    while (n > 0) {
      const grpc::Slice& s = (*slices_)[slice_];
      const std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(n, s.size() - at_));
      visit(std::span<const std::byte>(reinterpret_cast<const std::byte*>(s.begin()) + at_, take));
      at_ += take;
      offset_ += take;
      n -= take;
      SkipExhausted();
    }
  }

 private:
  void SkipExhausted() {
    while (slice_ < slices_->size() && at_ == (*slices_)[slice_].size()) {
      ++slice_;
      at_ = 0;
    }
  }

  const std::vector<grpc::Slice>* slices_;
  std::size_t slice_ = 0;
  std::size_t at_ = 0;
  std::uint64_t offset_ = 0;
};

void AppendVarint(std::uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

// Walks the top-level fields of one message, copying every field but the big
// one into rest() and remembering where the big one's last occurrence lies.
class Splitter {
 public:
  Splitter(const std::vector<grpc::Slice>& slices, std::uint64_t size, int bytes_field,
           const google::protobuf::Message& message)
      : message_(message),
        bytes_field_(static_cast<std::uint32_t>(bytes_field)),
        size_(size),
        cursor_(slices),
        run_start_(slices),
        bytes_start_(slices) {}

  [[nodiscard]] absl::Status Walk() {
    while (cursor_.offset() < size_) {
      const SliceCursor tag_start = cursor_;
      std::uint64_t tag = 0;
      if (absl::Status s = ReadVarint(kMaxTagBytes, &tag, [] { return "the tag"; }); !s.ok()) return s;
      if (tag > std::numeric_limits<std::uint32_t>::max()) {
        return Malformed(tag_start.offset(), "the tag does not fit in 32 bits");
      }
      const auto field = static_cast<std::uint32_t>(tag >> 3);
      const auto wire_type = static_cast<std::uint32_t>(tag & 7);
      if (field == 0) return Malformed(tag_start.offset(), "the tag has field number 0, which protobuf does not allow");
      if (absl::Status s = SkipValue(tag_start, field, wire_type); !s.ok()) return s;
    }
    CopyRun(cursor_);
    return absl::OkStatus();
  }

  const std::string& rest() const { return rest_; }
  bool found() const { return found_; }
  const SliceCursor& bytes_start() const { return bytes_start_; }
  std::uint64_t bytes_size() const { return bytes_size_; }

  // "field 3 (aggregations)", or "field 17" for a field the message lacks.
  std::string FieldName(std::uint32_t field) const {
    const google::protobuf::FieldDescriptor* f = message_.GetDescriptor()->FindFieldByNumber(static_cast<int>(field));
    return f == nullptr ? absl::StrCat("field ", field) : absl::StrCat("field ", field, " (", f->name(), ")");
  }

 private:
  absl::Status Malformed(std::uint64_t offset, absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(message_.GetTypeName(), ": not a valid protobuf message: at byte ", offset, ", ", what, "."));
  }

  // Reads a varint of at most `max_bytes` bytes. Bits beyond 64 are dropped,
  // as protobuf drops them; callers that need a range check it. what() names
  // the varint for an error message, and is only called for one.
  template <typename What>
  absl::Status ReadVarint(int max_bytes, std::uint64_t* value, What&& what) {
    const std::uint64_t start = cursor_.offset();
    *value = 0;
    for (int i = 0; i < max_bytes; ++i) {
      std::uint8_t byte;
      if (!cursor_.Next(&byte)) return Malformed(start, absl::StrCat("the message ends inside ", what()));
      *value |= std::uint64_t{byte & 0x7fu} << (7 * i);
      if ((byte & 0x80) == 0) return absl::OkStatus();
    }
    return Malformed(start, absl::StrCat(what(), " is longer than ", max_bytes, " bytes"));
  }

  absl::Status SkipValue(const SliceCursor& tag_start, std::uint32_t field, std::uint32_t wire_type) {
    std::uint64_t n = 0;
    switch (wire_type) {
      case kVarint:
        return ReadVarint(kMaxVarintBytes, &n, [&] { return absl::StrCat("the varint of ", FieldName(field)); });
      case kFixed64:
        return SkipBytes(field, 8);
      case kFixed32:
        return SkipBytes(field, 4);
      case kLengthDelimited:
        break;
      case kStartGroup:
      case kEndGroup:
        return Malformed(tag_start.offset(), absl::StrCat(FieldName(field), " has wire type ", wire_type,
                                                          " (a group), which tally's messages never use"));
      default:
        return Malformed(tag_start.offset(),
                         absl::StrCat(FieldName(field), " has wire type ", wire_type, ", which does not exist"));
    }
    const std::uint64_t length_at = cursor_.offset();
    auto length_of = [&] { return absl::StrCat("the length of ", FieldName(field)); };
    if (absl::Status s = ReadVarint(kMaxLengthBytes, &n, length_of); !s.ok()) return s;
    if (n > kMaxLength) return Malformed(length_at, absl::StrCat(length_of(), ", ", n, " bytes, is 2 GiB or more"));
    if (field != bytes_field_) return SkipBytes(field, n);

    // The big field: the fields before it are copied, it stays in place, and
    // an empty occurrence stands in for it, so that protobuf still sees the
    // field where it was (a oneof's case depends on which field came last).
    const SliceCursor payload = cursor_;
    if (absl::Status s = SkipBytes(field, n); !s.ok()) return s;
    CopyRun(tag_start);
    AppendVarint(std::uint64_t{field} << 3 | kLengthDelimited, &rest_);
    rest_.push_back('\0');
    run_start_ = cursor_;
    found_ = true;
    bytes_start_ = payload;
    bytes_size_ = n;
    return absl::OkStatus();
  }

  absl::Status SkipBytes(std::uint32_t field, std::uint64_t n) {
    const std::uint64_t left = size_ - cursor_.offset();
    if (n > left) {
      return Malformed(cursor_.offset(), absl::StrCat(FieldName(field), " needs ", n, " bytes, but only ", left,
                                                      " are left in the message"));
    }
    cursor_.Advance(n, [](std::span<const std::byte>) {});
    return absl::OkStatus();
  }

  // Copies the bytes from the end of the last big field up to `end`.
  void CopyRun(const SliceCursor& end) {
    run_start_.Advance(end.offset() - run_start_.offset(), [this](std::span<const std::byte> piece) {
      rest_.append(reinterpret_cast<const char*>(piece.data()), piece.size());
    });
  }

  const google::protobuf::Message& message_;
  const std::uint32_t bytes_field_;
  const std::uint64_t size_;
  SliceCursor cursor_;
  SliceCursor run_start_;  // the first byte not yet copied into rest_
  std::string rest_;
  bool found_ = false;
  SliceCursor bytes_start_;
  std::uint64_t bytes_size_ = 0;
};

}  // namespace

SlicedBytes::SlicedBytes(SlicedBytes&& other) noexcept
    : slices_(std::move(other.slices_)), pieces_(std::move(other.pieces_)), size_(std::exchange(other.size_, 0)) {}

SlicedBytes& SlicedBytes::operator=(SlicedBytes&& other) noexcept {
  if (this != &other) {
    Release();
    slices_.swap(other.slices_);
    pieces_.swap(other.pieces_);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

// When the last reference to a receive slice goes, gRPC (1.51) returns its
// memory to the server's resource quota, which may wake the quota's
// reclaimer: that needs an ExecCtx on the calling thread. grpc::Slice's
// destructor (grpc_slice_unref) makes none, and on a thread gRPC did not
// start, such as the request and chunk workers, it crashed (SIGSEGV in
// grpc_core::ExecCtx::Run under malformed traffic against the quota);
// grpc_byte_buffer_destroy makes one. So a byte buffer takes references of
// its own first, and drops the last ones.
void SlicedBytes::Release() {
  if (!slices_.empty()) {
    const grpc::ByteBuffer last_references(slices_.data(), slices_.size());
    slices_.clear();
  }
  pieces_.clear();
  size_ = 0;
}

absl::StatusOr<SlicedBytes> ParseWithBytesInPlace(const grpc::ByteBuffer& buffer, int bytes_field,
                                                  google::protobuf::Message* message) {
  const google::protobuf::FieldDescriptor* field = message->GetDescriptor()->FindFieldByNumber(bytes_field);
  if (field == nullptr || field->type() != google::protobuf::FieldDescriptor::TYPE_BYTES || field->is_repeated()) {
    return absl::InternalError(
        absl::StrCat(message->GetTypeName(), " has no singular bytes field numbered ", bytes_field, "."));
  }
  SlicedBytes bytes;
  // Dump() takes references to the slices, never copies of their bytes. An
  // invalid buffer holds a message of no bytes.
  if (buffer.Valid()) {
    if (grpc::Status s = buffer.Dump(&bytes.slices_); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(message->GetTypeName(), ": the received message could not be read: ", s.error_message()));
    }
  }
  std::uint64_t size = 0;
  for (const grpc::Slice& s : bytes.slices_) size += s.size();

  Splitter splitter(bytes.slices_, size, bytes_field, *message);
  if (absl::Status s = splitter.Walk(); !s.ok()) return s;
  if (!message->ParseFromString(splitter.rest())) {
    return absl::InvalidArgumentError(absl::StrCat(message->GetTypeName(),
                                                   ": not a valid protobuf message: the fields other than ",
                                                   splitter.FieldName(static_cast<std::uint32_t>(bytes_field)),
                                                   " do not parse."));
  }
  // A later member of the field's oneof clears it, as protobuf would have.
  const bool cleared = field->has_presence() && !message->GetReflection()->HasField(*message, field);
  if (splitter.found() && !cleared) {
    SliceCursor at = splitter.bytes_start();
    at.Advance(splitter.bytes_size(), [&bytes](std::span<const std::byte> piece) { bytes.pieces_.push_back(piece); });
    bytes.size_ = splitter.bytes_size();
  }
  return bytes;
}

}  // namespace tally
