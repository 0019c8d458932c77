// Safetensors: round trips, the exact byte layout other readers rely on, and corrupt files.
#include <kiln/ckpt/safetensors.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/testing/temp_path.h"

namespace kiln::ckpt {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// A file with a 2x3 f32 tensor "w", a 3-element i32 tensor "ids" and one metadata entry.
std::string write_sample(const std::string& dir) {
  static const float w[6] = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f};
  static const int32_t ids[3] = {7, -1, 50256};
  const std::string path = dir + "/sample.safetensors";
  const TensorRef tensors[] = {{"w", DType::kF32, {2, 3}, w}, {"ids", DType::kI32, {3}, ids}};
  EXPECT_TRUE(write_safetensors(path, tensors, {{"format", "kiln-test"}}).ok());
  return path;
}

TEST(SafetensorsTest, RoundTripsTensorsMetadataAndOrder) {
  const std::string dir = testing::unique_temp_dir("safetensors");
  const std::string path = write_sample(dir);
  Result<SafetensorsFile> file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ(file->metadata().at("format"), "kiln-test");
  ASSERT_EQ(file->tensors().size(), 2u);
  EXPECT_EQ(file->tensors()[0].name, "w");
  EXPECT_EQ(file->tensors()[1].name, "ids");
  Result<TensorEntry> w = file->get("w");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->dtype, DType::kF32);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(w->bytes.size(), 24u);
  float got[6];
  std::memcpy(got, w->bytes.data(), sizeof(got));
  EXPECT_EQ(got[2], 3.25f);
  EXPECT_EQ(got[4], 1e-30f);
  Result<TensorEntry> ids = file->get("ids");
  ASSERT_TRUE(ids.ok());
  int32_t got_ids[3];
  std::memcpy(got_ids, ids->bytes.data(), sizeof(got_ids));
  EXPECT_EQ(got_ids[2], 50256);
  EXPECT_FALSE(std::ifstream(path + ".tmp").good()) << "the temporary file must be renamed";
}

TEST(SafetensorsTest, LayoutIsTheFormatsLittleEndianLengthThenAlignedJson) {
  const std::string dir = testing::unique_temp_dir("safetensors");
  const std::string bytes = read_all(write_sample(dir));
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ((8 + n) % 8, 0u) << "data must start 8-byte aligned";
  EXPECT_EQ(bytes.size(), 8 + n + 24 + 12);
  const std::string header = bytes.substr(8, n);
  EXPECT_NE(header.find("\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}"),
            std::string::npos)
      << header;
  EXPECT_NE(header.find("\"ids\":{\"dtype\":\"I32\",\"shape\":[3],\"data_offsets\":[24,36]}"),
            std::string::npos)
      << header;
}

TEST(SafetensorsTest, RejectsDuplicateAndReservedNames) {
  const std::string dir = testing::unique_temp_dir("safetensors");
  const float x = 1.0f;
  const TensorRef dup[] = {{"a", DType::kF32, {1}, &x}, {"a", DType::kF32, {1}, &x}};
  Status s = write_safetensors(dir + "/d.safetensors", dup);
  EXPECT_TRUE(s.is_invalid_argument());
  EXPECT_NE(s.message().find("'a'"), std::string::npos) << s.to_string();
  const TensorRef reserved[] = {{"__metadata__", DType::kF32, {1}, &x}};
  EXPECT_TRUE(write_safetensors(dir + "/r.safetensors", reserved).is_invalid_argument());
}

// ENOENT is kNotFound, as for every durable write (kiln/base/file_system.h).
TEST(SafetensorsTest, AMissingDirectoryIsNotFoundNamingTheFile) {
  const float x = 1.0f;
  const TensorRef t[] = {{"a", DType::kF32, {1}, &x}};
  Status s = write_safetensors("/nonexistent-kiln-dir/x.safetensors", t);
  EXPECT_TRUE(s.is_not_found()) << s.to_string();
  EXPECT_NE(s.message().find("/nonexistent-kiln-dir/x.safetensors"), std::string::npos);
}

TEST(SafetensorsTest, CorruptFilesAreErrorsNamingTheFileAndWhat) {
  const std::string dir = testing::unique_temp_dir("safetensors");
  const std::string good = read_all(write_sample(dir));
  const std::string path = dir + "/bad.safetensors";
  struct Case {
    std::string name;
    std::string bytes;
    std::string expect;
  };
  std::string wrong_dtype = good;
  wrong_dtype.replace(wrong_dtype.find("I32"), 3, "Q32");
  std::string wrong_offsets = good;
  wrong_offsets.replace(wrong_offsets.find("[24,36]"), 7, "[24,35]");
  std::string huge_length = good;
  huge_length[5] = '\x7f';
  const Case cases[] = {
      {"short", good.substr(0, 5), "shorter than"},
      {"truncated data", good.substr(0, good.size() - 1), "data_offsets"},
      {"extra bytes", good + "xyz", "after the last tensor"},
      {"bad dtype", wrong_dtype, "unsupported dtype Q32"},
      {"inconsistent offsets", wrong_offsets, "tensor 'ids'"},
      {"header length", huge_length, "header length"},
  };
  for (const Case& c : cases) {
    write_all(path, c.bytes);
    Result<SafetensorsFile> file = SafetensorsFile::open(path);
    ASSERT_FALSE(file.ok()) << c.name;
    EXPECT_TRUE(file.status().is_corruption()) << c.name << ": " << file.status().to_string();
    EXPECT_NE(file.status().message().find(path), std::string::npos) << c.name;
    EXPECT_NE(file.status().message().find(c.expect), std::string::npos)
        << c.name << ": " << file.status().to_string();
  }
  Result<SafetensorsFile> file = SafetensorsFile::open(write_sample(dir));
  ASSERT_TRUE(file.ok());
  Result<TensorEntry> missing = file->get("nope");
  EXPECT_TRUE(missing.status().is_not_found());
  EXPECT_NE(missing.status().message().find("'nope'"), std::string::npos);
  EXPECT_TRUE(SafetensorsFile::open(dir + "/absent").status().is_io_error());
}

}  // namespace
}  // namespace kiln::ckpt
