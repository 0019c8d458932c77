// One checkpoint: names, shard bytes (safetensors, byte for byte write_safetensors' layout),
// the commit's checks, the manifest's own checksum, and loading with its checks.
#include <kiln/ckpt/checkpoint.h>

#include <kiln/base/checksum.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/testing/temp_path.h"
#include "ckpt/testing/ckpt_testing.h"

namespace kiln::ckpt {
namespace {

using ::testing::HasSubstr;
using testing::State;

// Writes world shards of step `step` (rank r's state seeded step * 10 + r) and commits them.
void write_committed(const std::string& dir, int64_t step, int world,
                     const std::string& metadata = "{}") {
  CommitSpec spec{dir, step, world, {}, metadata};
  for (int r = 0; r < world; ++r) {
    const State state(static_cast<int>(step) * 10 + r);
    const std::vector<TensorRef> refs = state.refs();
    Result<FileRecord> record = write_shard({dir, step, r, world}, refs);
    ASSERT_TRUE(record.ok()) << record.status().to_string();
    spec.records.push_back(*record);
  }
  const Status committed = commit(spec);
  ASSERT_TRUE(committed.ok()) << committed.to_string();
}

TEST(CheckpointNamesTest, StepDirectoriesAndShardsSortAsTheirNumbers) {
  EXPECT_EQ(step_dir_name(120), "step_000000120");
  EXPECT_EQ(step_dir_name(kStepMax), "step_999999999");
  EXPECT_EQ(shard_file_name(0, 2), "rank_00000_of_00002.safetensors");
  EXPECT_EQ(shard_file_name(99998, kWorldSizeMax), "rank_99998_of_99999.safetensors");
  EXPECT_EQ(parse_step_dir_name("step_000000120"), 120);
  EXPECT_EQ(parse_step_dir_name("step_120"), -1);
  EXPECT_EQ(parse_step_dir_name("step_00000012x"), -1);
  EXPECT_EQ(parse_step_dir_name("step_0000001200"), -1);
  EXPECT_EQ(parse_step_dir_name("manifest.json"), -1);
}

TEST(CheckpointNamesTest, FileRecordsRoundTripThroughJson) {
  const FileRecord record{"rank_00001_of_00002.safetensors", 123456789012ull,
                          0xfedcba9876543210ull};
  Result<FileRecord> back = file_record_from_json(file_record_to_json(record));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(*back, record);
  EXPECT_TRUE(file_record_from_json("[]").status().is_invalid_argument());
  EXPECT_TRUE(file_record_from_json(R"({"name":"a","size_bytes":1,"xxh3":"12"})")
                  .status()
                  .is_invalid_argument());
  EXPECT_TRUE(file_record_from_json(R"({"name":"a","size_bytes":-1,"xxh3":"0123456789abcdef"})")
                  .status()
                  .is_invalid_argument());
}

TEST(WriteShardTest, ShardIsSafetensorsWithTheRecordedSizeAndChecksum) {
  const std::string dir = kiln::testing::unique_temp_dir("ckpt");
  const State state(7);
  const std::vector<TensorRef> refs = state.refs();
  Result<FileRecord> record = write_shard({dir, 5, 1, 2}, refs, {{"format", "kiln-test"}});
  ASSERT_TRUE(record.ok()) << record.status().to_string();
  const std::string path = dir + "/step_000000005/rank_00001_of_00002.safetensors";
  const std::string bytes = testing::read_file(path);
  EXPECT_EQ(record->name, "rank_00001_of_00002.safetensors");
  EXPECT_EQ(record->size_bytes, bytes.size());
  EXPECT_EQ(record->xxh3, xxh3(bytes));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  Result<SafetensorsFile> file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ(file->metadata().at("format"), "kiln-test");
  EXPECT_EQ(file->metadata().at("kiln_ckpt_step"), "5");
  EXPECT_EQ(file->metadata().at("kiln_ckpt_rank"), "1");
  EXPECT_EQ(file->metadata().at("kiln_ckpt_world"), "2");
  Result<TensorEntry> weights = file->get("weights");
  ASSERT_TRUE(weights.ok());
  ASSERT_EQ(weights->bytes.size(), state.weights.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(weights->bytes.data(), state.weights.data(), weights->bytes.size()), 0);

  // The same tensors and metadata through write_safetensors give the same bytes: a shard is a
  // plain safetensors file, not a dialect.
  const std::string plain = dir + "/plain.safetensors";
  const Status written = write_safetensors(plain, refs,
                                           {{"format", "kiln-test"},
                                            {"kiln_ckpt_rank", "1"},
                                            {"kiln_ckpt_step", "5"},
                                            {"kiln_ckpt_world", "2"}});
  ASSERT_TRUE(written.ok()) << written.to_string();
  EXPECT_EQ(testing::read_file(plain), bytes);
}

TEST(WriteShardTest, RefusesBadSpecsNamesAndReservedKeys) {
  const std::string dir = kiln::testing::unique_temp_dir("ckpt");
  const State state(1);
  const std::vector<TensorRef> refs = state.refs();
  EXPECT_TRUE(write_shard({dir, 1, 2, 2}, refs).status().is_invalid_argument());
  EXPECT_TRUE(write_shard({dir, -1, 0, 1}, refs).status().is_invalid_argument());
  EXPECT_TRUE(write_shard({dir, kStepMax + 1, 0, 1}, refs).status().is_invalid_argument());
  EXPECT_TRUE(
      write_shard({dir, 1, 0, 1}, refs, {{"kiln_ckpt_step", "9"}}).status().is_invalid_argument());
  const std::vector<TensorRef> twice = {refs[0], refs[0]};
  Result<FileRecord> dup = write_shard({dir, 1, 0, 1}, twice);
  EXPECT_TRUE(dup.status().is_invalid_argument());
  EXPECT_THAT(dup.status().message(), HasSubstr("weights"));
}

TEST(WriteShardTest, CreatesMissingParentDirectories) {
  const std::string dir = kiln::testing::unique_temp_dir("ckpt") + "/a/b/run";
  const State state(1);
  ASSERT_TRUE(write_shard({dir, 3, 0, 1}, state.refs()).ok());
  EXPECT_TRUE(std::filesystem::exists(dir + "/step_000000003/rank_00000_of_00001.safetensors"));
}

TEST(CommitTest, ManifestRecordsEveryShardAndTheMetadataUnchanged) {
  const std::string dir = kiln::testing::unique_temp_dir("ckpt");
  const std::string metadata =
      R"({"config_hash":"ab12","world_size":2,"loader":{"epoch":3,"window":18446744073709551615},)"
      R"("rng":[1,2,18446744073709551615],"lr":0.000625,"note":"caf\u00e9"})";
  write_committed(dir, 120, 2, metadata);
  Result<Manifest> manifest = read_manifest(dir + "/step_000000120");
  ASSERT_TRUE(manifest.ok()) << manifest.status().to_string();
  EXPECT_EQ(manifest->step, 120);
  EXPECT_EQ(manifest->world, 2);
  ASSERT_EQ(manifest->files.size(), 2u);
  uint64_t total = 0;
  for (int r = 0; r < 2; ++r) {
    const std::string path = dir + "/step_000000120/" + shard_file_name(r, 2);
    const std::string bytes = testing::read_file(path);
    EXPECT_EQ(manifest->files[r].name, shard_file_name(r, 2));
    EXPECT_EQ(manifest->files[r].size_bytes, bytes.size());
    EXPECT_EQ(manifest->files[r].xxh3, xxh3(bytes));
    total += bytes.size();
  }
  EXPECT_EQ(manifest->total_bytes, total);
  EXPECT_EQ(nlohmann::json::parse(manifest->metadata_json), nlohmann::json::parse(metadata));
  EXPECT_FALSE(manifest->created_utc.empty());
  // The manifest is plain JSON for jq and friends.
  const auto whole =
      nlohmann::json::parse(testing::read_file(dir + "/step_000000120/manifest.json"));
  EXPECT_EQ(whole["body"]["step"], 120);
}

TEST(CommitTest, RefusesRecordsThatDoNotMatchTheDisk) {
  const std::string dir = kiln::testing::unique_temp_dir("ckpt");
  const State state(1);
  Result<FileRecord> r0 = write_shard({dir, 4, 0, 2}, state.refs());
  ASSERT_TRUE(r0.ok());
  // Rank 1 never wrote: its shard is missing, and the error says where it looked.
  FileRecord r1{shard_file_name(1, 2), 10, 0};
  Status missing = commit({dir, 4, 2, {*r0, r1}});
  EXPECT_TRUE(missing.is_not_found()) << missing.to_string();
  EXPECT_THAT(missing.message(), HasSubstr("rank_00001_of_00002.safetensors"));
  EXPECT_THAT(missing.message(), HasSubstr("shares"));
  // A record whose size is not the file's.
  Result<FileRecord> real1 = write_shard({dir, 4, 1, 2}, state.refs());
  ASSERT_TRUE(real1.ok());
  FileRecord wrong_size = *real1;
  wrong_size.size_bytes += 1;
  EXPECT_TRUE(commit({dir, 4, 2, {*r0, wrong_size}}).is_corruption());
  // Wrong count, swapped names, metadata that is not an object.
  EXPECT_TRUE(commit({dir, 4, 2, {*r0}}).is_invalid_argument());
  EXPECT_TRUE(commit({dir, 4, 2, {*real1, *r0}}).is_invalid_argument());
  EXPECT_TRUE(commit({dir, 4, 2, {*r0, *real1}, "[1]"}).is_invalid_argument());
  EXPECT_FALSE(std::filesystem::exists(dir + "/step_000000004/manifest.json"));
  // Nothing above wrote a manifest, so the right records still commit.
  ASSERT_TRUE(commit({dir, 4, 2, {*r0, *real1}}).ok());
}

TEST(CommitTest, CommittedStepIsNeverOverwritten) {
  const std::string dir = kiln::testing::unique_temp_dir("ckpt");
  write_committed(dir, 8, 1);
  const std::string before = testing::read_file(dir + "/step_000000008/manifest.json");
  const State other(99);
  Result<FileRecord> again = write_shard({dir, 8, 0, 1}, other.refs());
  EXPECT_TRUE(again.status().is_invalid_argument()) << again.status().to_string();
  Result<Manifest> manifest = read_manifest(dir + "/step_000000008");
  ASSERT_TRUE(manifest.ok());
  EXPECT_TRUE(commit({dir, 8, 1, manifest->files}).is_invalid_argument());
  EXPECT_EQ(testing::read_file(dir + "/step_000000008/manifest.json"), before);
  EXPECT_TRUE(verify_file(dir + "/step_000000008", manifest->files[0]).ok());
}

TEST(ManifestTest, AnyChangedByteOrTruncationIsCorruption) {
  const std::string dir = kiln::testing::unique_temp_dir("ckpt");
  write_committed(dir, 2, 1, R"({"k":"v"})");
  const std::string path = dir + "/step_000000002/manifest.json";
  const std::string good = testing::read_file(path);
  for (size_t at : {size_t{2}, size_t{20}, good.size() / 2, good.size() - 3, good.size() - 1}) {
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x04);
    testing::write_file(path, bad);
    Result<Manifest> read = read_manifest(dir + "/step_000000002");
    EXPECT_TRUE(read.status().is_corruption())
        << "byte " << at << ": " << read.status().to_string();
    EXPECT_THAT(read.status().message(), HasSubstr(path));
  }
  testing::write_file(path, good.substr(0, good.size() / 2));
  EXPECT_TRUE(read_manifest(dir + "/step_000000002").status().is_corruption());
  testing::write_file(path, "");
  EXPECT_TRUE(read_manifest(dir + "/step_000000002").status().is_corruption());
  std::filesystem::remove(path);
  EXPECT_TRUE(read_manifest(dir + "/step_000000002").status().is_not_found());
}

TEST(ManifestTest, ManifestInAnotherStepsDirectoryIsCorruption) {
  const std::string dir = kiln::testing::unique_temp_dir("ckpt");
  write_committed(dir, 2, 1);
  std::filesystem::create_directory(dir + "/step_000000003");
  std::filesystem::copy_file(dir + "/step_000000002/manifest.json",
                             dir + "/step_000000003/manifest.json");
  Result<Manifest> read = read_manifest(dir + "/step_000000003");
  EXPECT_TRUE(read.status().is_corruption());
  EXPECT_THAT(read.status().message(), HasSubstr("step 2"));
}

TEST(LoadShardTest, LoadsCheckedTensorsAndRefusesACorruptShard) {
  const std::string dir = kiln::testing::unique_temp_dir("ckpt");
  write_committed(dir, 6, 2);
  const std::string step_dir = dir + "/step_000000006";
  Result<Manifest> manifest = read_manifest(step_dir);
  ASSERT_TRUE(manifest.ok());
  Result<SafetensorsFile> shard = load_shard(step_dir, *manifest, 1);
  ASSERT_TRUE(shard.ok()) << shard.status().to_string();
  const State expected(61);
  Result<TensorEntry> counter = shard->get("counter");
  ASSERT_TRUE(counter.ok());
  int64_t got[2];
  std::memcpy(got, counter->bytes.data(), sizeof(got));
  EXPECT_EQ(got[0], expected.counter[0]);
  EXPECT_EQ(got[1], expected.counter[1]);
  EXPECT_TRUE(load_shard(step_dir, *manifest, 2).status().is_invalid_argument());

  testing::flip_byte(step_dir + "/rank_00001_of_00002.safetensors", -5);
  Result<SafetensorsFile> bad = load_shard(step_dir, *manifest, 1);
  EXPECT_TRUE(bad.status().is_corruption());
  EXPECT_THAT(bad.status().message(), HasSubstr("rank_00001_of_00002.safetensors"));
  EXPECT_THAT(bad.status().message(), HasSubstr("xxh3 mismatch"));
}

}  // namespace
}  // namespace kiln::ckpt
