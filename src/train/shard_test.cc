// Tests of token shards: the byte layout, round trips, every corruption read_shard() must catch
// (each error naming the file), listing a directory, and ShardWriter's splitting.
#include <kiln/train/shard.h>

#include <gtest/gtest.h>

#include <kiln/base/checksum.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "base/testing/temp_path.h"

namespace kiln::train {
namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

uint64_t le_at(const std::string& bytes, size_t offset, size_t n) {
  uint64_t v = 0;
  for (size_t i = n; i > 0; --i)
    v = (v << 8) | static_cast<unsigned char>(bytes[offset + i - 1]);
  return v;
}

std::vector<uint16_t> iota_tokens(size_t n, uint16_t first = 0) {
  std::vector<uint16_t> t(n);
  for (size_t i = 0; i < n; ++i)
    t[i] = static_cast<uint16_t>(first + i * 7);
  return t;
}

class ShardTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = kiln::testing::unique_temp_dir("shards"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  // A valid 100-token shard at path(name); returns its path.
  std::string good_shard(const std::string& name = "s.bin") {
    const std::string p = path(name);
    EXPECT_TRUE(write_shard(p, iota_tokens(100)).ok());
    return p;
  }

  // read_shard's error on `p`, checking it names the file and leaves the output untouched.
  Status read_error(const std::string& p) {
    std::vector<uint16_t> out = {1, 2, 3};
    const Status s = read_shard(p, &out);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find(p), std::string::npos) << s.to_string();
    EXPECT_EQ(out, (std::vector<uint16_t>{1, 2, 3}));
    return s;
  }

  std::string dir_;
};

TEST_F(ShardTest, LayoutIsTheDocumentedHeaderThenLittleEndianTokens) {
  const std::vector<uint16_t> tokens = {50256, 15496, 995, 0, 65535};
  ASSERT_TRUE(write_shard(path("a.bin"), tokens).ok());
  const std::string bytes = read_bytes(path("a.bin"));
  ASSERT_EQ(bytes.size(), kShardHeaderBytes + 2 * tokens.size());
  EXPECT_EQ(bytes.substr(0, 8), "KILNTOK1");
  EXPECT_EQ(le_at(bytes, 8, 4), 1u);    // version
  EXPECT_EQ(le_at(bytes, 12, 4), 32u);  // header bytes
  EXPECT_EQ(le_at(bytes, 16, 8), tokens.size());
  EXPECT_EQ(le_at(bytes, 24, 8), xxh3(bytes.data() + 32, bytes.size() - 32));
  EXPECT_EQ(le_at(bytes, 32, 2), 50256u);
  EXPECT_EQ(le_at(bytes, 34, 2), 15496u);
  EXPECT_EQ(le_at(bytes, 40, 2), 65535u);
  EXPECT_FALSE(std::filesystem::exists(path("a.bin.tmp")));
}

TEST_F(ShardTest, RoundTripAppends) {
  const std::vector<uint16_t> a = iota_tokens(1000), b = iota_tokens(3, 9);
  ASSERT_TRUE(write_shard(path("a.bin"), a).ok());
  ASSERT_TRUE(write_shard(path("b.bin"), b).ok());
  std::vector<uint16_t> out;
  ASSERT_TRUE(read_shard(path("a.bin"), &out).ok());
  EXPECT_EQ(out, a);
  ASSERT_TRUE(read_shard(path("b.bin"), &out).ok());
  std::vector<uint16_t> both = a;
  both.insert(both.end(), b.begin(), b.end());
  EXPECT_EQ(out, both);
}

TEST_F(ShardTest, EmptyShardRoundTrips) {
  ASSERT_TRUE(write_shard(path("e.bin"), {}).ok());
  EXPECT_EQ(read_bytes(path("e.bin")).size(), kShardHeaderBytes);
  std::vector<uint16_t> out;
  EXPECT_TRUE(read_shard(path("e.bin"), &out).ok());
  EXPECT_TRUE(out.empty());
}

TEST_F(ShardTest, CorruptTokenByteFailsTheChecksum) {
  const std::string p = good_shard();
  std::string bytes = read_bytes(p);
  bytes[kShardHeaderBytes + 57] ^= 0x10;
  write_bytes(p, bytes);
  const Status s = read_error(p);
  EXPECT_TRUE(s.is_corruption()) << s.to_string();
  EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos) << s.to_string();
}

TEST_F(ShardTest, CorruptChecksumFieldFails) {
  const std::string p = good_shard();
  std::string bytes = read_bytes(p);
  bytes[24] ^= 0x01;
  write_bytes(p, bytes);
  EXPECT_TRUE(read_error(p).is_corruption());
}

TEST_F(ShardTest, TruncatedFileSaysHowManyBytesAreMissing) {
  const std::string p = good_shard();
  std::string bytes = read_bytes(p);
  bytes.pop_back();
  write_bytes(p, bytes);
  const Status s = read_error(p);
  EXPECT_TRUE(s.is_corruption());
  EXPECT_EQ(s.message(),
            p + ": truncated: header says 100 tokens (200 bytes) but 199 bytes follow");
}

TEST_F(ShardTest, TrailingBytesAreCorruption) {
  const std::string p = good_shard();
  write_bytes(p, read_bytes(p) + "xx");
  const Status s = read_error(p);
  EXPECT_TRUE(s.is_corruption());
  EXPECT_NE(s.message().find("trailing bytes"), std::string::npos) << s.to_string();
}

TEST_F(ShardTest, TokenCountThatWouldOverflowIsTruncation) {
  const std::string p = good_shard();
  std::string bytes = read_bytes(p);
  for (int i = 16; i < 24; ++i)
    bytes[i] = '\xff';
  write_bytes(p, bytes);
  const Status s = read_error(p);
  EXPECT_TRUE(s.is_corruption());
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.to_string();
}

TEST_F(ShardTest, ShorterThanHeader) {
  write_bytes(path("short.bin"), "KILNTOK1\x01");
  const Status s = read_error(path("short.bin"));
  EXPECT_TRUE(s.is_corruption());
  EXPECT_NE(s.message().find("shorter than the 32-byte header"), std::string::npos);
}

TEST_F(ShardTest, BadMagic) {
  const std::string p = good_shard();
  std::string bytes = read_bytes(p);
  bytes[7] = '2';
  write_bytes(p, bytes);
  const Status s = read_error(p);
  EXPECT_TRUE(s.is_corruption());
  EXPECT_NE(s.message().find("bad magic 4b494c4e544f4b32"), std::string::npos) << s.to_string();
}

TEST_F(ShardTest, UnknownVersionAndHeaderSize) {
  const std::string p = good_shard();
  const std::string good = read_bytes(p);
  std::string bytes = good;
  bytes[8] = 2;
  write_bytes(p, bytes);
  Status s = read_error(p);
  EXPECT_TRUE(s.is_corruption());
  EXPECT_NE(s.message().find("unsupported shard version 2"), std::string::npos);
  bytes = good;
  bytes[12] = 40;
  write_bytes(p, bytes);
  s = read_error(p);
  EXPECT_TRUE(s.is_corruption());
  EXPECT_NE(s.message().find("header size 40"), std::string::npos);
}

TEST_F(ShardTest, MissingFileIsNotFound) {
  const Status s = read_error(path("nope.bin"));
  EXPECT_TRUE(s.is_not_found()) << s.to_string();
}

// ENOENT is kNotFound, as for every durable write (kiln/base/file_system.h).
TEST_F(ShardTest, WriteIntoMissingDirectoryIsNotFound) {
  const std::string p = path("no/such/dir/a.bin");
  const Status s = write_shard(p, iota_tokens(3));
  EXPECT_TRUE(s.is_not_found()) << s.to_string();
  EXPECT_NE(s.message().find(p), std::string::npos);
}

TEST_F(ShardTest, ListShardsSortsAndIgnoresOtherFiles) {
  good_shard("shard_000002.bin");
  good_shard("shard_000000.bin");
  good_shard("shard_000001.bin");
  write_bytes(path("shard_000003.bin.tmp"), "partial");
  write_bytes(path(".complete"), "");
  write_bytes(path("notes.txt"), "x");
  std::filesystem::create_directory(path("sub.bin"));
  Result<std::vector<std::string>> list = list_shards(dir_);
  ASSERT_TRUE(list.ok()) << list.status().to_string();
  EXPECT_EQ(*list, (std::vector<std::string>{path("shard_000000.bin"), path("shard_000001.bin"),
                                             path("shard_000002.bin")}));
}

TEST_F(ShardTest, ListShardsOfEmptyOrMissingDirectoryIsNotFound) {
  Result<std::vector<std::string>> empty = list_shards(dir_);
  ASSERT_FALSE(empty.ok());
  EXPECT_TRUE(empty.status().is_not_found());
  EXPECT_NE(empty.status().message().find(dir_), std::string::npos);
  Result<std::vector<std::string>> missing = list_shards(path("missing"));
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(missing.status().is_not_found());
  EXPECT_NE(missing.status().message().find(path("missing")), std::string::npos);
}

TEST_F(ShardTest, WriterSplitsTheStreamIntoNumberedShards) {
  const std::string out = path("out/nested");  // created with its parents
  Result<ShardWriter> writer = ShardWriter::create(out, 10);
  ASSERT_TRUE(writer.ok()) << writer.status().to_string();
  std::vector<uint32_t> stream;
  for (uint32_t i = 0; i < 25; ++i)
    stream.push_back(i * 2000);  // up to 48000: uses the upper byte
  // Uneven pieces cross shard boundaries inside one append.
  ASSERT_TRUE(writer->append(std::span(stream).subspan(0, 3)).ok());
  ASSERT_TRUE(writer->append(std::span(stream).subspan(3, 19)).ok());
  ASSERT_TRUE(writer->append(std::span(stream).subspan(22)).ok());
  EXPECT_EQ(writer->shards_written(), 2u);
  ASSERT_TRUE(writer->finish().ok());
  EXPECT_EQ(writer->shards_written(), 3u);
  EXPECT_EQ(writer->tokens_written(), 25u);
  Result<std::vector<std::string>> list = list_shards(out);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ(*list, writer->paths());
  EXPECT_EQ(std::filesystem::path((*list)[0]).filename(), "shard_000000.bin");
  EXPECT_EQ(std::filesystem::path((*list)[2]).filename(), "shard_000002.bin");
  std::vector<uint16_t> all;
  std::vector<size_t> sizes;
  for (const std::string& p : *list) {
    const size_t before = all.size();
    ASSERT_TRUE(read_shard(p, &all).ok());
    sizes.push_back(all.size() - before);
  }
  EXPECT_EQ(sizes, (std::vector<size_t>{10, 10, 5}));
  ASSERT_EQ(all.size(), stream.size());
  for (size_t i = 0; i < all.size(); ++i)
    EXPECT_EQ(all[i], stream[i]);
}

TEST_F(ShardTest, WriterRejectsTokensThatDoNotFitAndAppendsNothing) {
  Result<ShardWriter> writer = ShardWriter::create(dir_, 4);
  ASSERT_TRUE(writer.ok());
  const std::vector<uint32_t> ok = {1, 2, 3};
  ASSERT_TRUE(writer->append(ok).ok());
  const std::vector<uint32_t> bad = {7, 65535, 65536};
  const Status s = writer->append(bad);
  EXPECT_TRUE(s.is_invalid_argument());
  EXPECT_NE(s.message().find("token 65536 at stream position 5"), std::string::npos)
      << s.to_string();
  ASSERT_TRUE(writer->finish().ok());
  EXPECT_EQ(writer->tokens_written(), 3u);
  std::vector<uint16_t> all;
  ASSERT_TRUE(read_shard(writer->paths().at(0), &all).ok());
  EXPECT_EQ(all, (std::vector<uint16_t>{1, 2, 3}));
}

TEST_F(ShardTest, WriterRefusesADirectoryThatHoldsShards) {
  good_shard("old.bin");
  Result<ShardWriter> writer = ShardWriter::create(dir_, 4);
  ASSERT_FALSE(writer.ok());
  EXPECT_TRUE(writer.status().is_invalid_argument());
  EXPECT_NE(writer.status().message().find(dir_), std::string::npos);
}

TEST_F(ShardTest, WriterNeedsAPositiveShardSizeAndWritesNothingForAnEmptyStream) {
  EXPECT_TRUE(ShardWriter::create(dir_, 0).status().is_invalid_argument());
  Result<ShardWriter> writer = ShardWriter::create(dir_, 4);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE(writer->finish().ok());
  EXPECT_EQ(writer->shards_written(), 0u);
  EXPECT_TRUE(list_shards(dir_).status().is_not_found());
}

}  // namespace
}  // namespace kiln::train
