// The trainer in bf16 (train.precision, kiln/train/model.h Precision) on the real SOTU shards:
// it learns as fp32 does, a stopped bf16 run resumes bit-identically from its checkpoint (the
// checkpoint holds the f32 masters) and can continue in fp32, and a non-finite step stops the run
// before the update, unvalidated and unsaved.
#include <kiln/ckpt/catalog.h>
#include <kiln/ops/matmul.h>
#include <kiln/train/model.h>
#include <kiln/train/trainer.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "base/testing/temp_path.h"
#include "train/trainer_test_util.h"

namespace kiln::train {
namespace {

using testing::bits;
using testing::kTrainDir;
using testing::kValDir;
using testing::quiet_options;

// trainer_test.cc's small GPT-2 in `precision`.
TrainConfig small_config(int max_steps, Precision precision) {
  TrainConfig c = testing::small_config(max_steps);
  c.train.precision = precision;
  return c;
}

class TrainerPrecisionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const std::string& dir : {kTrainDir, kValDir}) {
      ASSERT_TRUE(std::filesystem::exists(dir + "/.complete"))
          << dir << " is missing: run scripts/fetch-data";
    }
  }

  static std::vector<StepReport> run(const TrainConfig& config, const TrainerOptions& options,
                                     Status* status = nullptr) {
    std::vector<StepReport> reports;
    Result<TrainSummary> s = train(config, options, nullptr, Logger(),
                                   [&](const StepReport& r) { reports.push_back(r); });
    if (status != nullptr) {
      *status = s.status();
    } else {
      EXPECT_TRUE(s.ok()) << s.status().to_string();
    }
    return reports;
  }
};

// From the same weights and batches, bf16's losses follow fp32's: within 1% at every one of 30
// steps (the rounding of the matmul inputs moves a loss near 10 by about 1e-3), not equal to
// them (the matmuls did run in bf16), and falling as much.
TEST_F(TrainerPrecisionTest, Bf16LearnsAsFp32Does) {
  TrainConfig fp32 = small_config(30, Precision::kFp32);
  fp32.train.val_every = 15;
  TrainConfig bf16 = fp32;
  bf16.train.precision = Precision::kBf16;
  const std::vector<StepReport> a = run(fp32, quiet_options());
  const std::vector<StepReport> b = run(bf16, quiet_options());
  ASSERT_EQ(a.size(), 30u);
  ASSERT_EQ(b.size(), 30u);
  int differ = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(b[i].loss, a[i].loss, 0.01 * a[i].loss) << "step " << i + 1;
    differ += bits(a[i].loss) != bits(b[i].loss) ? 1 : 0;
  }
  EXPECT_GT(differ, 25) << "bf16 and fp32 gave the same losses: bf16 did not run";
  EXPECT_LT(b[29].loss, b[0].loss - 2.0);
  EXPECT_NEAR(b[29].val_loss, a[29].val_loss, 0.02 * a[29].val_loss);
}

// A bf16 run stopped after step 2 and resumed from its checkpoint gives the losses and gradient
// norms of the run that was not stopped, bit for bit: the checkpoint holds the f32 masters and
// moments, and the bf16 weights are rounded from them again. The same checkpoint continues in
// fp32, with fp32's losses from there on.
TEST_F(TrainerPrecisionTest, ABf16CheckpointResumesExactlyAndContinuesInFp32) {
  const TrainConfig config = small_config(5, Precision::kBf16);
  const std::vector<StepReport> straight = run(config, quiet_options());
  ASSERT_EQ(straight.size(), 5u);

  TrainerOptions options = quiet_options();
  options.ckpt_dir = kiln::testing::unique_temp_dir("bf16-stop");
  options.stop_after_step = 2;
  ASSERT_EQ(run(config, options).size(), 2u);
  Result<ckpt::ResumeChoice> saved = ckpt::find_resume_checkpoint(options.ckpt_dir);
  ASSERT_TRUE(saved.ok() && saved->chosen) << "no checkpoint of step 2";
  EXPECT_EQ(saved->chosen->step, 2);
  const nlohmann::json meta = nlohmann::json::parse(saved->chosen->manifest.metadata_json);
  EXPECT_EQ(meta.value("precision", ""), "bf16") << meta.dump();
  const std::string copy = kiln::testing::unique_temp_dir("bf16-to-fp32");
  std::filesystem::copy(options.ckpt_dir, copy, std::filesystem::copy_options::recursive);

  options.stop_after_step = 0;
  const std::vector<StepReport> rest = run(config, options);
  ASSERT_EQ(rest.size(), 3u);
  for (size_t i = 0; i < rest.size(); ++i) {
    const StepReport& want = straight[i + 2];
    EXPECT_EQ(rest[i].step, want.step);
    EXPECT_EQ(rest[i].resumed_from, 2);
    EXPECT_EQ(bits(rest[i].loss), bits(want.loss)) << "step " << want.step;
    EXPECT_EQ(rest[i].grad_norm, want.grad_norm) << "step " << want.step;
  }

  TrainConfig in_fp32 = config;
  in_fp32.train.precision = Precision::kFp32;
  options.ckpt_dir = copy;
  const std::vector<StepReport> fp32 = run(in_fp32, options);
  ASSERT_EQ(fp32.size(), 3u);
  EXPECT_EQ(fp32[0].resumed_from, 2);
  for (size_t i = 0; i < fp32.size(); ++i) {
    EXPECT_NEAR(fp32[i].loss, straight[i + 2].loss, 0.01 * straight[i + 2].loss) << i;
  }
  EXPECT_NE(bits(fp32[0].loss), bits(straight[2].loss)) << "the fp32 continuation ran in bf16";
}

// The NaN check of every step: the NaN drill's step is reported, then the run stops before
// validating or checkpointing it, so the last checkpoint is the step before.
TEST_F(TrainerPrecisionTest, ANonFiniteStepStopsTheRunBeforeItsUpdateAndCheckpoint) {
  TrainConfig config = small_config(6, Precision::kBf16);
  config.train.val_every = 1;
  TrainerOptions options = quiet_options();
  options.ckpt_dir = kiln::testing::unique_temp_dir("bf16-nan");
  options.ckpt_every = 1;
  options.debug_nan_step = 3;
  Status status;
  const std::vector<StepReport> r = run(config, options, &status);
  EXPECT_EQ(status.code(), StatusCode::kAborted) << status.to_string();
  EXPECT_NE(status.to_string().find("step 3: training loss is nan"), std::string::npos)
      << status.to_string();
  ASSERT_EQ(r.size(), 3u);
  EXPECT_TRUE(std::isnan(r[2].loss));
  EXPECT_FALSE(r[2].validated);
  EXPECT_TRUE(r[1].validated);
  Result<ckpt::ResumeChoice> saved = ckpt::find_resume_checkpoint(options.ckpt_dir);
  ASSERT_TRUE(saved.ok() && saved->chosen);
  EXPECT_EQ(saved->chosen->step, 2);
}

}  // namespace
}  // namespace kiln::train
