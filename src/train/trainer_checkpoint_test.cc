// TrainerCheckpoints::resume on checkpoints whose metadata a user (or a bad disk, or another
// program) made malformed: a wrong type, a value that does not parse, a missing field. Each is a
// clean kInvalidArgument naming the file and the field; before issue 10 each of these threw
// (std::stoull, nlohmann's checked accessors) out of a function that returns Result, or was
// taken silently (a missing loader position read as 0).
#include "train/trainer_checkpoint.h"

#include <kiln/ckpt/async_checkpointer.h>
#include <kiln/ckpt/catalog.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/testing/temp_path.h"

namespace kiln::train {
namespace {

constexpr size_t kN = 16;            // elements of the (fake) parameter arena
constexpr int64_t kStep = 5;         // the step every checkpoint here is saved at
constexpr int64_t kWaitMs = 30'000;  // a write of a few hundred bytes

TrainConfig config() {
  TrainConfig c;
  c.source = "trainer_checkpoint_test";
  c.model = ModelConfig{2, 2, 64, 64, 50257};
  c.train.batch = 4;
  c.train.seq = 64;
  c.train.seed = 7;
  return c;
}

const MomentLayout kFull{kN, 0, kN, kN};

std::unique_ptr<TrainerCheckpoints> checkpoints_in(const std::string& dir) {
  TrainerCheckpointOptions o;
  o.dir = dir;
  Result<std::unique_ptr<TrainerCheckpoints>> c = TrainerCheckpoints::create(o, 0);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? std::move(*c) : nullptr;
}

// The manifest metadata TrainerCheckpoints itself writes for config() at kStep.
nlohmann::json good_manifest_metadata() {
  const std::string dir = kiln::testing::unique_temp_dir("good");
  std::unique_ptr<TrainerCheckpoints> c = checkpoints_in(dir);
  const std::vector<float> p(kN, 1.0f), m(kN, 2.0f), v(kN, 3.0f);
  EXPECT_TRUE(c->save(kStep, config(), p, m, v, kFull, LoaderPosition{1, 7}).ok());
  EXPECT_TRUE(c->finish().ok());
  Result<ckpt::ResumeChoice> choice = ckpt::find_resume_checkpoint(dir);
  EXPECT_TRUE(choice.ok() && choice->chosen);
  return nlohmann::json::parse(choice->chosen->manifest.metadata_json);
}

// Writes a one-rank checkpoint at kStep into a fresh directory: params (kN), adam_m and adam_v
// (`moments` elements each), the shard's metadata and the manifest's. Returns the directory.
std::string write_checkpoint(const std::string& name, const std::string& manifest_metadata,
                             const std::map<std::string, std::string>& shard_metadata,
                             size_t moments = kN) {
  const std::string dir = kiln::testing::unique_temp_dir(name);
  ckpt::AsyncCheckpointerOptions o;
  o.dir = dir;
  Result<std::unique_ptr<ckpt::AsyncCheckpointer>> writer = ckpt::AsyncCheckpointer::create(o);
  EXPECT_TRUE(writer.ok()) << writer.status().to_string();
  const std::vector<float> p(kN, 1.0f), m(moments, 2.0f), v(moments, 3.0f);
  const int64_t n = static_cast<int64_t>(moments);
  const std::vector<ckpt::TensorRef> tensors = {
      {"params", ckpt::DType::kF32, {static_cast<int64_t>(kN)}, p.data()},
      {"adam_m", ckpt::DType::kF32, {n}, m.data()},
      {"adam_v", ckpt::DType::kF32, {n}, v.data()}};
  ckpt::SaveRequest request;
  request.step = kStep;
  request.tensors = tensors;
  request.shard_metadata = shard_metadata;
  request.manifest_metadata_json = manifest_metadata;
  EXPECT_TRUE((*writer)->save(request).ok());
  EXPECT_TRUE((*writer)->wait_idle(Deadline::after_ms(kWaitMs)).ok());
  for (const ckpt::CompletedSave& done : (*writer)->take_completed()) {
    EXPECT_TRUE(done.status.ok()) << done.status.to_string();
  }
  return dir;
}

Result<ResumePoint> resume(const std::string& dir) {
  std::unique_ptr<TrainerCheckpoints> c = checkpoints_in(dir);
  std::vector<float> p(kN), m(kN), v(kN);
  return c->resume(config(), p, m, v, kFull);
}

// The error resume() gives; a test failure (not a crash) if it succeeds or throws.
std::string resume_error(const std::string& dir) {
  try {
    Result<ResumePoint> r = resume(dir);
    EXPECT_FALSE(r.ok()) << dir << " resumed";
    if (r.ok()) return "";
    EXPECT_TRUE(r.status().is_invalid_argument()) << r.status().to_string();
    return r.status().message();
  } catch (const std::exception& e) {
    ADD_FAILURE() << dir << ": resume threw " << e.what();
    return "";
  }
}

const std::map<std::string, std::string> kFullShard = {{"kiln_train_moments", "full"}};

TEST(TrainerCheckpointTest, AWellFormedCheckpointResumes) {
  const std::string dir = write_checkpoint("ok", good_manifest_metadata().dump(), kFullShard);
  Result<ResumePoint> r = resume(dir);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->step, kStep);
  EXPECT_EQ(r->loader, (LoaderPosition{1, 7}));
}

TEST(TrainerCheckpointTest, MalformedManifestMetadataNamesTheCheckpointAndField) {
  struct Case {
    std::string name;
    std::function<void(nlohmann::json&)> change;
    std::string field;  // in the message
  };
  const std::vector<Case> cases = {
      {"hash_type", [](nlohmann::json& j) { j["model_hash"] = 12; }, "'model_hash' is 12"},
      {"batch_type", [](nlohmann::json& j) { j["global_batch"] = "8"; }, "'global_batch'"},
      {"seed_fraction", [](nlohmann::json& j) { j["seed"] = 1.5; }, "'seed' is 1.5"},
      {"no_seq", [](nlohmann::json& j) { j.erase("seq"); }, "no 'seq'"},
      {"loader_type", [](nlohmann::json& j) { j["loader"] = 3; }, "no 'loader.epoch'"},
      {"no_epoch", [](nlohmann::json& j) { j["loader"].erase("epoch"); }, "no 'loader.epoch'"},
      {"negative_window", [](nlohmann::json& j) { j["loader"]["window"] = -1; },
       "'loader.window' is -1, not a non-negative integer"},
      {"window_text", [](nlohmann::json& j) { j["loader"]["window"] = "7"; }, "'loader.window'"},
  };
  const nlohmann::json good = good_manifest_metadata();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    nlohmann::json meta = good;
    c.change(meta);
    const std::string dir = write_checkpoint(c.name, meta.dump(), kFullShard);
    const std::string message = resume_error(dir);
    EXPECT_NE(message.find(dir + "/step_000000005"), std::string::npos) << message;
    EXPECT_NE(message.find(c.field), std::string::npos) << message;
  }
}

TEST(TrainerCheckpointTest, MalformedShardMetadataNamesTheFileAndKey) {
  const std::map<std::string, std::string> good = {{"kiln_train_moments", "zero"},
                                                   {"zero_begin", "0"},
                                                   {"zero_count", std::to_string(kN)},
                                                   {"tail_begin", std::to_string(kN)}};
  const std::string meta = good_manifest_metadata().dump();
  ASSERT_TRUE(resume(write_checkpoint("zero_ok", meta, good)).ok());
  struct Case {
    std::string key, value, expected;
  };
  const std::vector<Case> cases = {
      {"zero_begin", "x", "__metadata__.zero_begin='x' is not a count"},
      {"zero_count", "", "__metadata__.zero_count='' is not a count"},
      {"zero_begin", "99999999999999999999999", "__metadata__.zero_begin="},
      {"tail_begin", "1e3", "__metadata__.tail_begin='1e3' is not a count"},
      {"zero_begin", "-1", "__metadata__.zero_begin='-1' is not a count"},
      // begin + count wraps around 2^64 to 1: it must not pass for a slice inside the arena.
      {"zero_begin", "18446744073709551615", "moment slice outside the arena"},
      {"tail_begin", "", "__metadata__.tail_begin"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(c.key + "=" + c.value);
    std::map<std::string, std::string> shard = good;
    shard[c.key] = c.value;
    if (c.value == "18446744073709551615") shard["zero_count"] = "2";
    const std::string dir = write_checkpoint("shard" + std::to_string(i), meta, shard);
    const std::string message = resume_error(dir);
    EXPECT_NE(message.find("rank_00000_of_00001.safetensors"), std::string::npos) << message;
    EXPECT_NE(message.find(c.expected), std::string::npos) << message;
  }
  std::map<std::string, std::string> missing = good;
  missing.erase("zero_count");
  EXPECT_NE(
      resume_error(write_checkpoint("missing", meta, missing)).find("no __metadata__.zero_count"),
      std::string::npos);
}

}  // namespace
}  // namespace kiln::train
