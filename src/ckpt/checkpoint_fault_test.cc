// Issue 10: faults injected through the FileSystem interface into the checkpoint writer (shard
// writes, the manifest's commit, the asynchronous checkpointer): a write that fails with ENOSPC
// or EIO at the first byte, mid-file and at the last byte, a failed fsync, a failed rename, a
// failed directory fsync. Each must fail with an error naming the file, and leave the previous
// checkpoint complete and verified, and the failed step not a checkpoint.
#include <kiln/ckpt/async_checkpointer.h>
#include <kiln/ckpt/catalog.h>
#include <kiln/ckpt/checkpoint.h>

#include <kiln/base/clock.h>
#include <kiln/base/file_system.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/testing/fault_file_system.h"
#include "base/testing/temp_path.h"
#include "ckpt/testing/ckpt_testing.h"

namespace kiln::ckpt {
namespace {

using kiln::testing::FaultFileSystem;
using testing::State;

constexpr const char* kShard = "rank_00000_of_00001.safetensors";

// One way a file's write can go wrong, armed on `fs` for paths containing `pattern`.
struct Fault {
  std::string name;
  std::function<void(FaultFileSystem* fs, const std::string& pattern, uint64_t file_bytes)> arm;
  std::string call;  // what the error must say failed
};

std::vector<Fault> faults() {
  return {
      {"ENOSPC at byte 0",
       [](FaultFileSystem* fs, const std::string& p, uint64_t) { fs->fail_write_at(p, 0, ENOSPC); },
       "write: No space left on device"},
      {"EIO mid-file",
       [](FaultFileSystem* fs, const std::string& p, uint64_t n) {
         fs->fail_write_at(p, n / 2, EIO);
       },
       "write: Input/output error"},
      {"ENOSPC at the last byte",
       [](FaultFileSystem* fs, const std::string& p, uint64_t n) {
         fs->fail_write_at(p, n - 1, ENOSPC);
       },
       "write: No space left on device"},
      {"fsync", [](FaultFileSystem* fs, const std::string& p, uint64_t) { fs->fail_sync(p); },
       "fsync: Input/output error"},
      {"rename", [](FaultFileSystem* fs, const std::string& p, uint64_t) { fs->fail_rename(p); },
       "rename to "},
  };
}

class CheckpointFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = kiln::testing::unique_temp_dir("ckpt");
    ASSERT_TRUE(write_step(posix_file_system(), 1).ok());
    ASSERT_TRUE(commit_step(posix_file_system(), 1).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string step_dir(int64_t step) const { return step_dir_path(dir_, step); }

  Result<FileRecord> write_step(FileSystem* fs, int64_t step) {
    WriteOptions options;
    options.fs = fs;
    const std::vector<TensorRef> refs = state_.refs();
    Result<FileRecord> record = write_shard({dir_, step, 0, 1}, refs, {}, options);
    if (record.ok()) record_ = *record;
    return record;
  }

  Status commit_step(FileSystem* fs, int64_t step) {
    CommitSpec spec{dir_, step, 1, {record_}, "{}"};
    spec.fs = fs;
    return commit(spec);
  }

  // The previous good state: step 1 complete and verified, step 2 not a checkpoint, resume picks
  // step 1, and no file of step 2 is taken for a complete one.
  void expect_step1_still_the_checkpoint(const std::string& what) {
    EXPECT_TRUE(verify_checkpoint(step_dir(1)).ok()) << what;
    EXPECT_TRUE(read_manifest(step_dir(2)).status().is_not_found()) << what;
    Result<ResumeChoice> resume = find_resume_checkpoint(dir_);
    ASSERT_TRUE(resume.ok()) << what << ": " << resume.status().to_string();
    ASSERT_TRUE(resume->chosen.has_value()) << what;
    EXPECT_EQ(resume->chosen->step, 1) << what;
    Result<std::vector<CheckpointInfo>> all = list_checkpoints(dir_);
    ASSERT_TRUE(all.ok());
    for (const CheckpointInfo& info : *all) {
      if (info.step == 2) {
        EXPECT_EQ(info.state, CheckpointState::kIncomplete) << what;
      }
    }
  }

  std::string dir_;
  State state_{2};
  FileRecord record_;
};

TEST_F(CheckpointFaultTest, AFailedShardWriteNamesTheShardAndKeepsThePreviousCheckpoint) {
  // The shard's size, from a good write of the same state elsewhere.
  const std::string scratch = kiln::testing::unique_temp_dir("scratch");
  const std::vector<TensorRef> refs = state_.refs();
  Result<FileRecord> good = write_shard({scratch, 2, 0, 1}, refs);
  ASSERT_TRUE(good.ok());
  const uint64_t shard_bytes = good->size_bytes;
  ASSERT_GT(shard_bytes, 100u);

  const std::string shard = step_dir(2) + "/" + kShard;
  for (const Fault& fault : faults()) {
    FaultFileSystem fs;
    fault.arm(&fs, kShard, shard_bytes);
    Result<FileRecord> record = write_step(&fs, 2);
    ASSERT_FALSE(record.ok()) << fault.name;
    EXPECT_EQ(fs.faults_fired(), 1) << fault.name;
    EXPECT_TRUE(record.status().is_io_error()) << fault.name;
    EXPECT_NE(record.status().message().find(shard + ".tmp: " + fault.call), std::string::npos)
        << fault.name << ": " << record.status().to_string();
    EXPECT_FALSE(std::filesystem::exists(shard + ".tmp")) << fault.name;
    EXPECT_FALSE(std::filesystem::exists(shard)) << fault.name;
    expect_step1_still_the_checkpoint(fault.name);
  }
}

TEST_F(CheckpointFaultTest, AFailedDirectoryFsyncOfAShardNamesTheDirectory) {
  FaultFileSystem fs;
  fs.fail_sync_dir("step_000000002");
  Result<FileRecord> record = write_step(&fs, 2);
  ASSERT_FALSE(record.ok());
  EXPECT_NE(record.status().message().find(step_dir(2) + ": fsync directory"), std::string::npos)
      << record.status().to_string();
  expect_step1_still_the_checkpoint("directory fsync");
}

TEST_F(CheckpointFaultTest, AFailedManifestWriteNamesTheManifestAndTheStepStaysAbsent) {
  ASSERT_TRUE(write_step(posix_file_system(), 2).ok());
  const std::string manifest = step_dir(2) + "/" + std::string(kManifestFileName);
  // The manifest's size, from a good commit of the same records elsewhere.
  const std::string scratch = kiln::testing::unique_temp_dir("scratch");
  const std::vector<TensorRef> refs = state_.refs();
  ASSERT_TRUE(write_shard({scratch, 2, 0, 1}, refs).ok());
  ASSERT_TRUE(commit({scratch, 2, 1, {record_}, "{}"}).ok());
  const uint64_t manifest_bytes =
      std::filesystem::file_size(step_dir_path(scratch, 2) + "/" + std::string(kManifestFileName));

  for (const Fault& fault : faults()) {
    FaultFileSystem fs;
    fault.arm(&fs, std::string(kManifestFileName), manifest_bytes);
    const Status s = commit_step(&fs, 2);
    ASSERT_FALSE(s.ok()) << fault.name;
    EXPECT_EQ(fs.faults_fired(), 1) << fault.name;
    EXPECT_NE(s.message().find(manifest + ".tmp: " + fault.call), std::string::npos)
        << fault.name << ": " << s.to_string();
    EXPECT_FALSE(std::filesystem::exists(manifest + ".tmp")) << fault.name;
    expect_step1_still_the_checkpoint(fault.name);
  }
  // The same step commits once the disk behaves.
  ASSERT_TRUE(commit_step(posix_file_system(), 2).ok());
  EXPECT_TRUE(verify_checkpoint(step_dir(2)).ok());
}

TEST_F(CheckpointFaultTest, AFailedDirectoryFsyncOfTheManifestLeavesNoCommittedStep) {
  ASSERT_TRUE(write_step(posix_file_system(), 2).ok());
  FaultFileSystem fs;
  fs.fail_sync_dir("step_000000002");
  const Status s = commit_step(&fs, 2);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(step_dir(2) + ": fsync directory"), std::string::npos)
      << s.to_string();
  expect_step1_still_the_checkpoint("manifest directory fsync");
}

TEST_F(CheckpointFaultTest, TheAsyncCheckpointerReportsTheFaultAndKeepsTheLastDurableStep) {
  FaultFileSystem fs;
  fs.fail_write_at(kShard, 10, ENOSPC);
  AsyncCheckpointerOptions options;
  options.dir = dir_;
  options.write.fs = &fs;
  options.pin_staging = false;
  Result<std::unique_ptr<AsyncCheckpointer>> writer = AsyncCheckpointer::create(options);
  ASSERT_TRUE(writer.ok()) << writer.status().to_string();
  SaveRequest request;
  request.step = 2;
  const std::vector<TensorRef> refs = state_.refs();
  request.tensors = refs;
  ASSERT_TRUE((*writer)->save(request).ok());
  ASSERT_TRUE((*writer)->wait_idle(Deadline::after_ms(30'000)).ok());
  const std::vector<CompletedSave> done = (*writer)->take_completed();
  ASSERT_EQ(done.size(), 1u);
  const Status& s = done[0].status;
  ASSERT_FALSE(s.ok());
  EXPECT_FALSE(done[0].committed);
  EXPECT_NE(s.message().find(step_dir(2) + "/" + kShard + ".tmp: write: No space left on device"),
            std::string::npos)
      << s.to_string();
  expect_step1_still_the_checkpoint("async");
}

}  // namespace
}  // namespace kiln::ckpt
