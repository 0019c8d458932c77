// Issue 10: faults injected through the FileSystem interface into token shard writes
// (write_shard, ShardWriter): ENOSPC or EIO at the first byte, mid-file and at the last byte, a
// failed fsync, a failed rename, a failed directory fsync. The error names the shard; the shard
// that was there stays intact and the only files a loader reads are whole shards.
#include <kiln/train/shard.h>

#include <gtest/gtest.h>

#include <kiln/base/file_system.h>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "base/testing/fault_file_system.h"
#include "base/testing/temp_path.h"

namespace kiln::train {
namespace {

using kiln::testing::FaultFileSystem;

std::vector<uint16_t> tokens_from(uint16_t first, size_t n) {
  std::vector<uint16_t> t(n);
  for (size_t i = 0; i < n; ++i)
    t[i] = static_cast<uint16_t>(first + i);
  return t;
}

TEST(ShardWriteFaultTest, AFailedWriteNamesTheShardAndKeepsTheOldOne) {
  const std::string dir = kiln::testing::unique_temp_dir("shards");
  const std::string path = dir + "/shard_000000.bin";
  const std::vector<uint16_t> old_tokens = tokens_from(1, 100);
  ASSERT_TRUE(write_shard(path, old_tokens).ok());
  const uint64_t n = kShardHeaderBytes + 2 * old_tokens.size();
  const std::vector<uint16_t> new_tokens = tokens_from(500, 100);
  struct Case {
    const char* name;
    std::function<void(FaultFileSystem*)> arm;
    std::string message;
  };
  const Case cases[] = {
      {"ENOSPC at byte 0", [](FaultFileSystem* fs) { fs->fail_write_at("shard_0", 0, ENOSPC); },
       path + ".tmp: write: No space left on device"},
      {"EIO in the header", [](FaultFileSystem* fs) { fs->fail_write_at("shard_0", 12, EIO); },
       path + ".tmp: write: Input/output error"},
      {"EIO mid-file", [n](FaultFileSystem* fs) { fs->fail_write_at("shard_0", n / 2, EIO); },
       path + ".tmp: write: Input/output error"},
      {"ENOSPC at the last byte",
       [n](FaultFileSystem* fs) { fs->fail_write_at("shard_0", n - 1, ENOSPC); },
       path + ".tmp: write: No space left on device"},
      {"fsync", [](FaultFileSystem* fs) { fs->fail_sync("shard_0"); },
       path + ".tmp: fsync: Input/output error"},
      {"rename", [](FaultFileSystem* fs) { fs->fail_rename("shard_0"); },
       path + ".tmp: rename to " + path + ": Input/output error"},
  };
  for (const Case& c : cases) {
    FaultFileSystem fs;
    c.arm(&fs);
    const Status s = write_shard(path, new_tokens, &fs);
    ASSERT_FALSE(s.ok()) << c.name;
    EXPECT_EQ(fs.faults_fired(), 1) << c.name;
    EXPECT_EQ(s.message(), c.message) << c.name;
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp")) << c.name;
    std::vector<uint16_t> read;
    const Status r = read_shard(path, &read);
    ASSERT_TRUE(r.ok()) << c.name << ": " << r.to_string();
    EXPECT_EQ(read, old_tokens) << c.name;
  }
}

TEST(ShardWriteFaultTest, TheDirectoryIsFsyncedAndItsFailureNamesIt) {
  const std::string dir = kiln::testing::unique_temp_dir("shards");
  const std::string path = dir + "/shard_000000.bin";
  FaultFileSystem fs;
  fs.fail_sync_dir(dir);
  const std::vector<uint16_t> tokens = tokens_from(7, 10);
  const Status s = write_shard(path, tokens, &fs);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(fs.faults_fired(), 1);
  EXPECT_EQ(s.message(), dir + ": fsync directory: Input/output error");
  std::vector<uint16_t> read;
  ASSERT_TRUE(read_shard(path, &read).ok());  // the whole new shard, never a part of it
  EXPECT_EQ(read, tokens);
}

// A tokenize run that fails on its second shard: the first is whole, the second does not exist
// under any name a loader reads, and the error names it.
TEST(ShardWriteFaultTest, AWriterThatFailsMidStreamLeavesOnlyWholeShards) {
  const std::string dir = kiln::testing::unique_temp_dir("shards") + "/out";
  FaultFileSystem fs;
  fs.fail_write_at("shard_000001.bin", 40, ENOSPC);
  Result<ShardWriter> writer = ShardWriter::create(dir, 8, &fs);
  ASSERT_TRUE(writer.ok()) << writer.status().to_string();
  std::vector<uint32_t> stream(20);
  for (size_t i = 0; i < stream.size(); ++i)
    stream[i] = static_cast<uint32_t>(i);
  const Status s = writer->append(stream);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), dir + "/shard_000001.bin.tmp: write: No space left on device");
  Result<std::vector<std::string>> shards = list_shards(dir);
  ASSERT_TRUE(shards.ok()) << shards.status().to_string();
  ASSERT_EQ(*shards, std::vector<std::string>{dir + "/shard_000000.bin"});
  std::vector<uint16_t> read;
  ASSERT_TRUE(read_shard(shards->at(0), &read).ok());
  EXPECT_EQ(read, tokens_from(0, 8));
  EXPECT_FALSE(std::filesystem::exists(dir + "/shard_000001.bin.tmp"));
}

}  // namespace
}  // namespace kiln::train
