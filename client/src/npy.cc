// The .npy header parser. The header is a Python dict literal, e.g.
// {'descr': '<f4', 'fortran_order': False, 'shape': (1000, 256), }
// so this is a tiny parser for exactly the literals numpy writes there.
#include "tally/client/npy.h"

#include <cstring>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/strings/str_cat.h"

namespace tally::client {
namespace {

constexpr absl::string_view kMagic = "\x93NUMPY";

absl::Status Malformed(absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("malformed .npy header: ", why));
}

// One value of the header dict.
struct Value {
  enum class Kind { kString, kBool, kTuple } kind = Kind::kString;
  std::string text;
  bool boolean = false;
  std::vector<std::uint64_t> tuple;
};

class DictParser {
 public:
  explicit DictParser(absl::string_view text) : s_(text) {}

  // Calls on_item(key, value) for each item; stops at the first error.
  template <typename OnItem>
  absl::Status Parse(OnItem on_item) {
    SkipSpace();
    if (!Consume('{')) return Malformed("expected '{'");
    while (true) {
      SkipSpace();
      if (Consume('}')) break;
      absl::StatusOr<std::string> key = ParseString();
      if (!key.ok()) return key.status();
      SkipSpace();
      if (!Consume(':')) return Malformed(absl::StrCat("expected ':' after '", *key, "'"));
      SkipSpace();
      absl::StatusOr<Value> value = ParseValue(*key);
      if (!value.ok()) return value.status();
      if (absl::Status s = on_item(*key, *value); !s.ok()) return s;
      SkipSpace();
      if (Consume('}')) break;
      if (!Consume(',')) return Malformed("expected ',' or '}' in the header dict");
    }
    SkipSpace();
    if (i_ != s_.size()) return Malformed("text after the header dict");
    return absl::OkStatus();
  }

 private:
  void SkipSpace() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  bool Consume(char c) {
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool ConsumeWord(absl::string_view w) {
    if (s_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }

  absl::StatusOr<std::string> ParseString() {
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) return Malformed("expected a quoted string");
    const char quote = s_[i_++];
    const size_t end = s_.find(quote, i_);
    if (end == absl::string_view::npos) return Malformed("unterminated string");
    std::string out(s_.substr(i_, end - i_));
    i_ = end + 1;
    return out;
  }

  absl::StatusOr<Value> ParseValue(absl::string_view key) {
    Value v;
    if (i_ < s_.size() && (s_[i_] == '\'' || s_[i_] == '"')) {
      absl::StatusOr<std::string> text = ParseString();
      if (!text.ok()) return text.status();
      v.kind = Value::Kind::kString;
      v.text = *std::move(text);
      return v;
    }
    if (ConsumeWord("True")) {
      v.kind = Value::Kind::kBool;
      v.boolean = true;
      return v;
    }
    if (ConsumeWord("False")) {
      v.kind = Value::Kind::kBool;
      v.boolean = false;
      return v;
    }
    if (Consume('(')) {
      v.kind = Value::Kind::kTuple;
      while (true) {
        SkipSpace();
        if (Consume(')')) return v;
        std::uint64_t n = 0;
        size_t digits = 0;
        while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
          if (__builtin_mul_overflow(n, 10, &n) || __builtin_add_overflow(n, s_[i_] - '0', &n)) {
            return Malformed("shape dimension too large");
          }
          ++i_;
          ++digits;
        }
        if (digits == 0) return Malformed(absl::StrCat("expected a non-negative integer in '", key, "'"));
        Consume('L');  // Python 2 wrote long integers as 3L
        v.tuple.push_back(n);
        SkipSpace();
        if (Consume(')')) return v;
        if (!Consume(',')) return Malformed(absl::StrCat("expected ',' or ')' in '", key, "'"));
      }
    }
    if (i_ < s_.size() && s_[i_] == '[') {
      return absl::InvalidArgumentError(
          "unsupported .npy dtype: structured arrays (a list 'descr') are not supported");
    }
    return Malformed(absl::StrCat("unexpected value for '", key, "'"));
  }

  absl::string_view s_;
  size_t i_ = 0;
};

absl::StatusOr<rules::DType> ParseDescr(absl::string_view descr) {
  const auto unsupported = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unsupported .npy dtype '", descr, "'", why,
        "; supported: <f2 <f4 <f8 |i1 <i2 <i4 <i8 |u1 <u2 <u4 <u8 |b1 (little-endian float16, float32, "
        "float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64, bool; .npy has no bfloat16)"));
  };
  if (descr.size() != 3) return unsupported("");
  const char order = descr[0];
  if (order == '>') return unsupported(" (big-endian)");
  if (order != '<' && order != '|') return unsupported("");
  const absl::string_view type = descr.substr(1);
  if (type == "f2") return rules::DType::kFloat16;
  if (type == "f4") return rules::DType::kFloat32;
  if (type == "f8") return rules::DType::kFloat64;
  if (type == "i4") return rules::DType::kInt32;
  if (type == "i8") return rules::DType::kInt64;
  if (type == "u4") return rules::DType::kUInt32;
  if (type == "u1") return rules::DType::kUInt8;
  if (type == "i1") return rules::DType::kInt8;
  if (type == "i2") return rules::DType::kInt16;
  if (type == "u2") return rules::DType::kUInt16;
  if (type == "u8") return rules::DType::kUInt64;
  if (type == "b1") return rules::DType::kBool;
  return unsupported("");
}

std::uint64_t ReadLittleEndian(std::span<const std::byte> bytes) {
  std::uint64_t v = 0;
  for (size_t i = bytes.size(); i-- > 0;) v = (v << 8) | static_cast<std::uint8_t>(bytes[i]);
  return v;
}

}  // namespace

std::uint64_t NpyHeader::elements() const {
  std::uint64_t n = 1;
  for (std::uint64_t d : shape) n *= d;  // checked against overflow when parsed
  return n;
}

absl::StatusOr<NpyHeader> ParseNpyHeader(std::span<const std::byte> file) {
  if (file.size() < 10 || std::memcmp(file.data(), kMagic.data(), kMagic.size()) != 0) {
    return absl::InvalidArgumentError("not a .npy file (no \\x93NUMPY magic)");
  }
  const auto major = static_cast<std::uint8_t>(file[6]);
  const auto minor = static_cast<std::uint8_t>(file[7]);
  if (major < 1 || major > 3 || minor != 0) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported .npy format version ", major, ".",
                                                   minor, "; supported: 1.0, 2.0, 3.0"));
  }
  // Version 1.0 has a 2-byte header length; 2.0 and 3.0 (UTF-8 text) 4 bytes.
  const size_t length_bytes = major == 1 ? 2 : 4;
  const std::uint64_t header_start = 8 + length_bytes;
  if (file.size() < header_start) return Malformed("file ends inside the header length");
  const std::uint64_t header_length = ReadLittleEndian(file.subspan(8, length_bytes));
  if (file.size() - header_start < header_length) {
    return Malformed(absl::StrCat("header length ", header_length, " runs past the end of the file"));
  }
  const absl::string_view text(reinterpret_cast<const char*>(file.data() + header_start),
                              header_length);

  std::optional<std::string> descr;
  std::optional<bool> fortran_order;
  std::optional<std::vector<std::uint64_t>> shape;
  absl::Status parsed = DictParser(text).Parse([&](const std::string& key, const Value& v) {
    const auto wrong_type = [&](absl::string_view expected) {
      return Malformed(absl::StrCat("'", key, "' must be ", expected));
    };
    if (key == "descr") {
      if (v.kind != Value::Kind::kString) return wrong_type("a string");
      descr = v.text;
    } else if (key == "fortran_order") {
      if (v.kind != Value::Kind::kBool) return wrong_type("True or False");
      fortran_order = v.boolean;
    } else if (key == "shape") {
      if (v.kind != Value::Kind::kTuple) return wrong_type("a tuple");
      shape = v.tuple;
    } else {
      return Malformed(absl::StrCat("unexpected key '", key, "'"));
    }
    return absl::OkStatus();
  });
  if (!parsed.ok()) return parsed;
  if (!descr || !fortran_order || !shape) {
    return Malformed("the header needs 'descr', 'fortran_order' and 'shape'");
  }

  NpyHeader header;
  absl::StatusOr<rules::DType> dtype = ParseDescr(*descr);
  if (!dtype.ok()) return dtype.status();
  header.dtype = *dtype;
  if (*fortran_order) {
    return absl::InvalidArgumentError(
        "unsupported .npy layout: fortran_order is True; tally needs C order "
        "(save numpy.ascontiguousarray(a) instead)");
  }
  if (shape->size() != 1 && shape->size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unsupported .npy shape: ", shape->size(), " dimensions; tally takes 1-D or 2-D arrays"));
  }
  if (shape->size() == 2 && (*shape)[1] == 0 && (*shape)[0] != 0) {
    return absl::InvalidArgumentError("unsupported .npy shape: rows of zero elements");
  }
  header.shape = *std::move(shape);
  std::uint64_t elements = 1, bytes = 0;
  for (std::uint64_t d : header.shape) {
    if (__builtin_mul_overflow(elements, d, &elements)) return Malformed("shape too large");
  }
  if (__builtin_mul_overflow(elements, rules::SizeOf(header.dtype), &bytes)) {
    return Malformed("shape too large");
  }
  header.data_offset = header_start + header_length;
  const std::uint64_t available = file.size() - header.data_offset;
  if (available < bytes) {
    return absl::InvalidArgumentError(absl::StrCat("truncated .npy file: the header promises ",
                                                   bytes, " bytes of data, the file holds ",
                                                   available));
  }
  if (available > bytes) {
    return absl::InvalidArgumentError(absl::StrCat("malformed .npy file: ", available - bytes,
                                                   " bytes after the array's data"));
  }
  return header;
}

}  // namespace tally::client
