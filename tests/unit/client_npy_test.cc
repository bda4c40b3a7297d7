// .npy headers built byte by byte: the versions, dtypes and shapes numpy
// writes, and the malformed files a reader must refuse with a clear error.
#include "tally/client/npy.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "tally/client/input.h"

namespace tally::client {
namespace {

// A .npy file as numpy writes it: magic, version, header length, the dict
// padded with spaces and a newline so the data starts on a 64-byte boundary.
std::string NpyFile(int major, const std::string& dict, const std::string& data) {
  const size_t length_bytes = major == 1 ? 2 : 4;
  const size_t prefix = 8 + length_bytes;
  std::string header = dict;
  const size_t total = (prefix + header.size() + 1 + 63) / 64 * 64;
  header.append(total - prefix - header.size() - 1, ' ');
  header += '\n';
  std::string file = "\x93NUMPY";
  file += static_cast<char>(major);
  file += '\0';
  for (size_t i = 0; i < length_bytes; ++i) file += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return file + header + data;
}

template <typename T>
std::string Bytes(std::initializer_list<T> values) {
  std::string out;
  for (T v : values) out.append(reinterpret_cast<const char*>(&v), sizeof(T));
  return out;
}

absl::StatusOr<NpyHeader> Parse(const std::string& file) {
  return ParseNpyHeader(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(file.data()), file.size()));
}

TEST(NpyHeader, Version1Float32Vector) {
  const std::string file =
      NpyFile(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", Bytes<float>({1, 2, 3}));
  absl::StatusOr<NpyHeader> h = Parse(file);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->dtype, rules::DType::kFloat32);
  EXPECT_EQ(h->shape, std::vector<std::uint64_t>({3}));
  EXPECT_EQ(h->elements(), 3u);
  EXPECT_EQ(h->row_length(), 0u);
  EXPECT_EQ(h->data_offset, 128u);  // 10-byte prefix + 59-byte dict, padded to 64
}

TEST(NpyHeader, Versions2And3WithFourByteLength) {
  for (int major : {2, 3}) {
    const std::string file = NpyFile(
        major, "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 2), }", Bytes<std::int64_t>({1, 2, 3, 4}));
    absl::StatusOr<NpyHeader> h = Parse(file);
    ASSERT_TRUE(h.ok()) << major << ": " << h.status();
    EXPECT_EQ(h->dtype, rules::DType::kInt64);
    EXPECT_EQ(h->row_length(), 2u);
    EXPECT_EQ(h->data_offset, file.size() - 32);
  }
}

TEST(NpyHeader, EveryDtypeAndByteOrderMark) {
  struct Case {
    const char* descr;
    rules::DType dtype;
  };
  for (const Case& c : {Case{"<f4", rules::DType::kFloat32}, Case{"<f8", rules::DType::kFloat64},
                        Case{"<i4", rules::DType::kInt32}, Case{"<i8", rules::DType::kInt64},
                        Case{"<u4", rules::DType::kUInt32}, Case{"|u1", rules::DType::kUInt8},
                        Case{"<u1", rules::DType::kUInt8}, Case{"|f8", rules::DType::kFloat64},
                        Case{"|i1", rules::DType::kInt8}, Case{"<i2", rules::DType::kInt16},
                        Case{"<u2", rules::DType::kUInt16}, Case{"<u8", rules::DType::kUInt64},
                        Case{"|b1", rules::DType::kBool}}) {
    const std::string data(2 * rules::SizeOf(c.dtype), '\x01');
    const std::string file = NpyFile(
        1, std::string("{'descr': '") + c.descr + "', 'fortran_order': False, 'shape': (2,), }", data);
    absl::StatusOr<NpyHeader> h = Parse(file);
    ASSERT_TRUE(h.ok()) << c.descr << ": " << h.status();
    EXPECT_EQ(h->dtype, c.dtype) << c.descr;
  }
}

TEST(NpyHeader, KeyOrderQuotesAndOldLongIntegers) {
  // Keys in any order, double quotes, Python 2's 3L, no trailing comma.
  const std::string file = NpyFile(
      1, "{\"shape\": (2L, 3L), \"fortran_order\": False, \"descr\": \"<u4\"}", std::string(24, '\0'));
  absl::StatusOr<NpyHeader> h = Parse(file);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->shape, std::vector<std::uint64_t>({2, 3}));
  EXPECT_EQ(h->row_length(), 3u);
}

TEST(NpyHeader, EmptyArray) {
  absl::StatusOr<NpyHeader> h =
      Parse(NpyFile(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (0,), }", ""));
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->elements(), 0u);
}

// Each malformed file must fail with a message containing `needle`.
TEST(NpyHeader, MalformedAndUnsupportedFilesAreClearErrors) {
  const std::string f4x2 = Bytes<float>({1, 2});
  const auto dict = [](const std::string& descr, const std::string& order, const std::string& shape) {
    return "{'descr': '" + descr + "', 'fortran_order': " + order + ", 'shape': " + shape + ", }";
  };
  struct Case {
    std::string file;
    const char* needle;
  };
  const std::string good = NpyFile(1, dict("<f4", "False", "(2,)"), f4x2);
  std::string bad_version = good;
  bad_version[6] = 4;
  std::string long_header = good.substr(0, 10);
  long_header[8] = '\xff';
  long_header[9] = '\x7f';
  const Case cases[] = {
      {"not numpy at all", "magic"},
      {"\x93NUMP", "magic"},
      {bad_version, "version 4.0"},
      {long_header, "runs past the end"},
      {NpyFile(1, dict("<f4", "True", "(2,)"), f4x2), "fortran_order"},
      {NpyFile(1, dict(">f4", "False", "(2,)"), f4x2), "big-endian"},
      {NpyFile(1, dict("<m8", "False", "(1,)"), std::string(8, '\0')), "'<m8'"},
      {NpyFile(1, dict("<c8", "False", "(1,)"), std::string(8, '\0')), "'<c8'"},
      {NpyFile(1, dict("<b2", "False", "(2,)"), "\1\0\1\0"), "'<b2'"},
      {NpyFile(1, dict("<f4", "False", "()"), Bytes<float>({1})), "0 dimensions"},
      {NpyFile(1, dict("<f4", "False", "(1, 1, 2)"), f4x2), "3 dimensions"},
      {NpyFile(1, dict("<f4", "False", "(3,)"), f4x2), "truncated"},
      {NpyFile(1, dict("<f4", "False", "(1,)"), f4x2), "after the array's data"},
      {NpyFile(1, dict("<f4", "False", "(2, 0)"), ""), "zero elements"},
      {NpyFile(1, dict("<f4", "False", "(99999999999999999999,)"), ""), "too large"},
      {NpyFile(1, dict("<f4", "False", "(4294967296, 4294967296)"), ""), "too large"},
      {NpyFile(1, "{'descr': '<f4', 'shape': (2,), }", f4x2), "needs 'descr', 'fortran_order'"},
      {NpyFile(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", f4x2), "'x'"},
      {NpyFile(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,)}", f4x2),
       "structured"},
      {NpyFile(1, "{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}", f4x2), "fortran_order"},
      {NpyFile(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,) ", f4x2), "expected ',' or '}'"},
      {NpyFile(1, "{'descr' '<f4', 'fortran_order': False, 'shape': (2,)}", f4x2), "expected ':'"},
      {NpyFile(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}", f4x2), "non-negative"},
      {NpyFile(1, "['descr']", f4x2), "expected '{'"},
  };
  for (const Case& c : cases) {
    const absl::StatusOr<NpyHeader> h = Parse(c.file);
    ASSERT_FALSE(h.ok()) << c.needle;
    EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument) << c.needle;
    EXPECT_NE(h.status().message().find(c.needle), absl::string_view::npos)
        << "want \"" << c.needle << "\" in: " << h.status().message();
  }
}

class NpyFileTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tally_client_npy_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(NpyFileTest, OpenNpyMapsTheDataAndSetsRows) {
  const std::string data = Bytes<double>({1.5, -2, 3, 4.25, 5, 6});
  const std::string path =
      Write("m.npy", NpyFile(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", data));
  absl::StatusOr<InputArray> in = InputArray::OpenNpy(path);
  ASSERT_TRUE(in.ok()) << in.status();
  const InputArray moved = *std::move(in);  // the view survives a move
  EXPECT_EQ(moved.array().dtype, rules::DType::kFloat64);
  EXPECT_EQ(moved.array().length, 6u);
  EXPECT_EQ(moved.array().row_length, 3u);
  EXPECT_EQ(std::memcmp(moved.array().data, data.data(), data.size()), 0);
  EXPECT_NE(moved.description().find("shape 2x3"), std::string::npos) << moved.description();
}

TEST_F(NpyFileTest, OpenNpyErrorsNameTheFile) {
  const std::string path = Write("bad.npy", "garbage");
  const absl::StatusOr<InputArray> in = InputArray::OpenNpy(path);
  ASSERT_FALSE(in.ok());
  EXPECT_NE(in.status().message().find(path), absl::string_view::npos) << in.status();
  const absl::StatusOr<InputArray> missing = InputArray::OpenNpy((dir_ / "none.npy").string());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
}

TEST_F(NpyFileTest, RawFilesMustHoldWholeElements) {
  const std::string data = Bytes<std::int32_t>({7, -8, 9});
  absl::StatusOr<InputArray> in = InputArray::OpenRaw(Write("x.i32", data), rules::DType::kInt32);
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(in->array().length, 3u);
  EXPECT_EQ(std::memcmp(in->array().data, data.data(), data.size()), 0);

  const absl::StatusOr<InputArray> odd = InputArray::OpenRaw(Write("y.f8", data), rules::DType::kFloat64);
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.status().message().find("not a multiple"), absl::string_view::npos) << odd.status();

  absl::StatusOr<InputArray> empty = InputArray::OpenRaw(Write("e.u1", ""), rules::DType::kUInt8);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->array().length, 0u);
}

}  // namespace
}  // namespace tally::client
