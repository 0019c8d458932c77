// The catalog: what counts as a checkpoint (a valid manifest, nothing less), verification that
// names the bad file, resume selection with its fallback and reasons, and retention.
#include <kiln/ckpt/catalog.h>

#include <sys/stat.h>

#include <kiln/base/checksum.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/testing/temp_path.h"
#include "ckpt/testing/ckpt_testing.h"

namespace kiln::ckpt {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::State;

// Writes every rank's shard of `step`; commits unless `commit_it` is false (a crashed write).
void write_checkpoint(const std::string& dir, int64_t step, int world, bool commit_it = true) {
  CommitSpec spec{dir, step, world, {}, "{}"};
  for (int r = 0; r < world; ++r) {
    const State state(static_cast<int>(step) * 10 + r);
    Result<FileRecord> record = write_shard({dir, step, r, world}, state.refs());
    ASSERT_TRUE(record.ok()) << record.status().to_string();
    spec.records.push_back(*record);
  }
  if (commit_it) {
    ASSERT_TRUE(commit(spec).ok());
  }
}

std::vector<int64_t> steps_of(const std::vector<CheckpointInfo>& infos) {
  std::vector<int64_t> steps;
  for (const CheckpointInfo& info : infos)
    steps.push_back(info.step);
  return steps;
}

TEST(ListCheckpointsTest, OnlyAValidManifestMakesACheckpointComplete) {
  const std::string dir = kiln::testing::unique_temp_dir("ckpt");
  write_checkpoint(dir, 30, 2);
  write_checkpoint(dir, 10, 1);
  write_checkpoint(dir, 40, 2, /*commit_it=*/false);  // crashed before the manifest
  write_checkpoint(dir, 20, 1);
  testing::flip_byte(dir + "/step_000000020/manifest.json", 40);
  // Things that are not step directories are ignored.
  std::filesystem::create_directory(dir + "/step_12");
  testing::write_file(dir + "/step_000000050", "a file, not a directory");
  testing::write_file(dir + "/notes.txt", "hello");

  Result<std::vector<CheckpointInfo>> listed = list_checkpoints(dir);
  ASSERT_TRUE(listed.ok()) << listed.status().to_string();
  ASSERT_THAT(steps_of(*listed), ElementsAre(10, 20, 30, 40));
  EXPECT_EQ((*listed)[0].state, CheckpointState::kComplete);
  EXPECT_EQ((*listed)[1].state, CheckpointState::kInvalid);
  EXPECT_THAT((*listed)[1].problem, HasSubstr("manifest"));
  EXPECT_EQ((*listed)[2].state, CheckpointState::kComplete);
  EXPECT_EQ((*listed)[2].manifest.world, 2);
  EXPECT_EQ((*listed)[3].state, CheckpointState::kIncomplete);
  EXPECT_THAT((*listed)[3].problem, HasSubstr("no manifest.json"));
  EXPECT_EQ(checkpoint_state_name((*listed)[3].state), "incomplete");

  EXPECT_TRUE(list_checkpoints(dir + "/missing").status().is_not_found());
}

TEST(VerifyCheckpointTest, AFlippedByteFailsAndNamesTheFile) {
  const std::string dir = kiln::testing::unique_temp_dir("ckpt");
  write_checkpoint(dir, 7, 3);
  const std::string step_dir = dir + "/step_000000007";
  std::vector<FileVerdict> verdicts;
  ASSERT_TRUE(verify_checkpoint(step_dir, &verdicts).ok());
  ASSERT_EQ(verdicts.size(), 3u);

  testing::flip_byte(step_dir + "/rank_00001_of_00003.safetensors", 200);
  verdicts.clear();
  const Status bad = verify_checkpoint(step_dir, &verdicts);
  EXPECT_TRUE(bad.is_corruption());
  EXPECT_THAT(bad.message(), HasSubstr("rank_00001_of_00003.safetensors: xxh3 mismatch"));
  EXPECT_THAT(bad.message(), HasSubstr("1 of 3 files"));
  ASSERT_EQ(verdicts.size(), 3u);
  EXPECT_TRUE(verdicts[0].status.ok());
  EXPECT_TRUE(verdicts[1].status.is_corruption());
  EXPECT_TRUE(verdicts[2].status.ok());

  std::filesystem::remove(step_dir + "/rank_00002_of_00003.safetensors");
  const Status two = verify_checkpoint(step_dir);
  EXPECT_THAT(two.message(), HasSubstr("2 of 3 files"));
  EXPECT_THAT(two.message(), HasSubstr("rank_00002_of_00003.safetensors"));

  EXPECT_TRUE(verify_checkpoint(dir + "/step_000000099").is_not_found());
}

TEST(FindResumeTest, PicksTheNewestCompleteCheckpoint) {
  const std::string dir = kiln::testing::unique_temp_dir("ckpt");
  write_checkpoint(dir, 100, 2);
  write_checkpoint(dir, 120, 2);
  Result<ResumeChoice> choice = find_resume_checkpoint(dir);
  ASSERT_TRUE(choice.ok());
  ASSERT_TRUE(choice->chosen.has_value());
  EXPECT_EQ(choice->chosen->step, 120);
  EXPECT_EQ(choice->chosen->manifest.world, 2);
  EXPECT_TRUE(choice->skipped.empty());
}

TEST(FindResumeTest, FallsBackPastACorruptAndAnUnfinishedCheckpointAndSaysWhy) {
  const std::string dir = kiln::testing::unique_temp_dir("ckpt");
  write_checkpoint(dir, 100, 2);
  write_checkpoint(dir, 120, 2);
  write_checkpoint(dir, 140, 2, /*commit_it=*/false);
  testing::flip_byte(dir + "/step_000000120/rank_00001_of_00002.safetensors", -1);

  Result<ResumeChoice> choice = find_resume_checkpoint(dir);
  ASSERT_TRUE(choice.ok());
  ASSERT_TRUE(choice->chosen.has_value());
  EXPECT_EQ(choice->chosen->step, 100);
  ASSERT_EQ(choice->skipped.size(), 2u);
  EXPECT_EQ(choice->skipped[0].step, 140);
  EXPECT_THAT(choice->skipped[0].reason.message(), HasSubstr("no manifest.json"));
  EXPECT_EQ(choice->skipped[1].step, 120);
  EXPECT_TRUE(choice->skipped[1].reason.is_corruption());
  EXPECT_THAT(choice->skipped[1].reason.message(),
              HasSubstr("rank_00001_of_00002.safetensors: xxh3 mismatch"));
}

TEST(FindResumeTest, NothingUsableMeansAFreshStart) {
  const std::string dir = kiln::testing::unique_temp_dir("ckpt");
  Result<ResumeChoice> missing = find_resume_checkpoint(dir + "/never-created");
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->chosen.has_value());

  write_checkpoint(dir, 5, 1);
  testing::write_file(dir + "/step_000000005/manifest.json", "{}");
  Result<ResumeChoice> corrupt = find_resume_checkpoint(dir);
  ASSERT_TRUE(corrupt.ok());
  EXPECT_FALSE(corrupt->chosen.has_value());
  ASSERT_EQ(corrupt->skipped.size(), 1u);
  EXPECT_TRUE(corrupt->skipped[0].reason.is_corruption());
}

TEST(SetAsideTest, MovesABadCheckpointOutOfTheWaySoItsStepCanBeWrittenAgain) {
  const std::string dir = kiln::testing::unique_temp_dir("ckpt");
  write_checkpoint(dir, 100, 1);
  write_checkpoint(dir, 120, 1);
  testing::flip_byte(dir + "/step_000000120/rank_00000_of_00001.safetensors", 50);
  // A directory with a manifest is never written into, even when it does not verify.
  const State state(1);
  EXPECT_TRUE(write_shard({dir, 120, 0, 1}, state.refs()).status().is_invalid_argument());

  Result<std::string> moved = set_aside_checkpoint(dir + "/step_000000120/");
  ASSERT_TRUE(moved.ok()) << moved.status().to_string();
  EXPECT_EQ(*moved, dir + "/step_000000120.corrupt");
  EXPECT_TRUE(std::filesystem::exists(*moved + "/manifest.json"));
  Result<std::vector<CheckpointInfo>> listed = list_checkpoints(dir);
  ASSERT_TRUE(listed.ok());
  EXPECT_THAT(steps_of(*listed), ElementsAre(100));

  write_checkpoint(dir, 120, 1);
  EXPECT_TRUE(verify_checkpoint(dir + "/step_000000120").ok());
  Result<std::string> again = set_aside_checkpoint(dir + "/step_000000120");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, dir + "/step_000000120.corrupt.2");
  EXPECT_TRUE(set_aside_checkpoint(dir + "/step_000000777").status().is_not_found());
}

TEST(RetentionTest, KeepsExactlyTheNewestKAndCleansOlderLeftovers) {
  const std::string dir = kiln::testing::unique_temp_dir("ckpt");
  write_checkpoint(dir, 1, 1, /*commit_it=*/false);  // an old crash: garbage
  for (int64_t step : {2, 3, 4, 5, 6})
    write_checkpoint(dir, step, 2);
  write_checkpoint(dir, 7, 1, /*commit_it=*/false);  // newer than all: maybe still being written
  testing::write_file(dir + "/step_000000003/manifest.json", "garbage");  // invalid, and old

  Result<std::vector<int64_t>> removed = apply_retention(dir, 2);
  ASSERT_TRUE(removed.ok()) << removed.status().to_string();
  EXPECT_THAT(*removed, ElementsAre(1, 2, 3, 4));
  Result<std::vector<CheckpointInfo>> listed = list_checkpoints(dir);
  ASSERT_TRUE(listed.ok());
  EXPECT_THAT(steps_of(*listed), ElementsAre(5, 6, 7));
  EXPECT_EQ((*listed)[0].state, CheckpointState::kComplete);
  EXPECT_EQ((*listed)[1].state, CheckpointState::kComplete);
  EXPECT_EQ((*listed)[2].state, CheckpointState::kIncomplete);
  EXPECT_TRUE(std::filesystem::exists(dir + "/step_000000007/rank_00000_of_00001.safetensors"));

  // Idempotent, and keeping more than there are removes nothing.
  EXPECT_TRUE(apply_retention(dir, 2)->empty());
  EXPECT_TRUE(apply_retention(dir, 10)->empty());
  Result<std::vector<int64_t>> to_one = apply_retention(dir, 1);
  ASSERT_TRUE(to_one.ok());
  EXPECT_THAT(*to_one, ElementsAre(5));
}

TEST(RetentionTest, WithoutACompleteCheckpointNothingIsRemoved) {
  const std::string dir = kiln::testing::unique_temp_dir("ckpt");
  write_checkpoint(dir, 1, 1, /*commit_it=*/false);
  Result<std::vector<int64_t>> removed = apply_retention(dir, 1);
  ASSERT_TRUE(removed.ok());
  EXPECT_TRUE(removed->empty());
  EXPECT_TRUE(std::filesystem::exists(dir + "/step_000000001"));
}

}  // namespace
}  // namespace kiln::ckpt

// Issue 10: hostile checkpoint directories that crashed or hung the catalog.
namespace kiln::ckpt {
namespace {

// Rewrites `manifest_path` with its metadata replaced by `metadata`, checksum recomputed, so
// only the content is wrong.
void replace_metadata(const std::string& manifest_path, const std::string& metadata) {
  const std::string text = testing::read_file(manifest_path);
  const size_t prefix =
      std::string(R"({"manifest_xxh3":")").size() + 16 + std::string(R"(","body":)").size();
  std::string body = text.substr(prefix, text.size() - prefix - 2);
  const std::string old_metadata = R"("metadata":{})";
  ASSERT_TRUE(body.ends_with(old_metadata + "}")) << body;
  body = body.substr(0, body.size() - old_metadata.size() - 1) + R"("metadata":)" + metadata + "}";
  testing::write_file(manifest_path, R"({"manifest_xxh3":")" + checksum_hex(xxh3(body)) +
                                         R"(","body":)" + body + "}\n");
}

TEST(HostileCheckpointTest, ADeepManifestIsCorruptionAndResumeFallsBack) {
  const std::string dir = kiln::testing::unique_temp_dir("ckpt");
  write_checkpoint(dir, 100, 1);
  write_checkpoint(dir, 120, 1);
  const std::string manifest = dir + "/step_000000120/manifest.json";
  // 200,000 levels, 400 KB: before, list/verify/resume died of a stack overflow in the parse.
  replace_metadata(manifest,
                   "{\"x\":" + std::string(200'000, '[') + std::string(200'000, ']') + "}");

  Result<std::vector<CheckpointInfo>> listed = list_checkpoints(dir);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[1].state, CheckpointState::kInvalid);
  EXPECT_THAT((*listed)[1].problem, HasSubstr(manifest + ": body: JSON nested more than 64"));

  Result<ResumeChoice> choice = find_resume_checkpoint(dir);
  ASSERT_TRUE(choice.ok());
  ASSERT_TRUE(choice->chosen.has_value());
  EXPECT_EQ(choice->chosen->step, 100);
  ASSERT_EQ(choice->skipped.size(), 1u);
  EXPECT_TRUE(choice->skipped[0].reason.is_corruption());
  EXPECT_THAT(choice->skipped[0].reason.message(), HasSubstr(manifest));
}

TEST(HostileCheckpointTest, AFifoAsAShardFailsVerificationWithoutBlocking) {
  const std::string dir = kiln::testing::unique_temp_dir("ckpt");
  write_checkpoint(dir, 100, 1);
  write_checkpoint(dir, 120, 1);
  const std::string shard = dir + "/step_000000120/rank_00000_of_00001.safetensors";
  ASSERT_EQ(std::remove(shard.c_str()), 0);
  ASSERT_EQ(::mkfifo(shard.c_str(), 0600), 0);  // no writer: an open for reading used to block

  const Status verified = verify_checkpoint(dir + "/step_000000120");
  EXPECT_TRUE(verified.is_corruption()) << verified.to_string();
  EXPECT_THAT(verified.message(), HasSubstr(shard + ": not a regular file"));
  Result<ResumeChoice> choice = find_resume_checkpoint(dir);
  ASSERT_TRUE(choice.ok());
  ASSERT_TRUE(choice->chosen.has_value());
  EXPECT_EQ(choice->chosen->step, 100);
  // A FIFO in place of the manifest is refused the same way.
  const std::string manifest = dir + "/step_000000100/manifest.json";
  ASSERT_EQ(std::remove(manifest.c_str()), 0);
  ASSERT_EQ(::mkfifo(manifest.c_str(), 0600), 0);
  EXPECT_TRUE(read_manifest(dir + "/step_000000100").status().is_corruption());
}

}  // namespace
}  // namespace kiln::ckpt
