// Tests of the learning-rate schedule: warmup from lr/warmup to lr, cosine down to min_lr at
// max_steps, and the edge cases (no warmup, all warmup).
#include "train/schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

namespace kiln::train {
namespace {

// tiny.yaml's schedule.
constexpr LrSchedule kTiny{6e-4, 6e-5, 30, 300};

TEST(ScheduleTest, WarmupRisesLinearlyFromLrOverWarmupToLr) {
  EXPECT_DOUBLE_EQ(learning_rate(kTiny, 1), 6e-4 / 30);
  EXPECT_DOUBLE_EQ(learning_rate(kTiny, 2), 2 * 6e-4 / 30);
  EXPECT_DOUBLE_EQ(learning_rate(kTiny, 15), 6e-4 / 2);
  EXPECT_DOUBLE_EQ(learning_rate(kTiny, 30), 6e-4);
}

TEST(ScheduleTest, CosineFallsFromLrToMinLrAtMaxSteps) {
  // Just after warmup the cosine has barely moved; halfway it is at the mean; at the end min_lr.
  const double mid = 30 + (300 - 30) / 2;  // 165: decay ratio 0.5
  EXPECT_NEAR(learning_rate(kTiny, 165), (6e-4 + 6e-5) / 2, 1e-15) << mid;
  EXPECT_DOUBLE_EQ(learning_rate(kTiny, 300), 6e-5);
  const double r = 1.0 / 270;  // step 31
  EXPECT_DOUBLE_EQ(learning_rate(kTiny, 31),
                   6e-5 + 0.5 * (1 + std::cos(std::numbers::pi * r)) * (6e-4 - 6e-5));
  // Monotonic after the warmup.
  for (int s = 31; s <= 300; ++s) {
    EXPECT_LE(learning_rate(kTiny, s), learning_rate(kTiny, s - 1)) << s;
    EXPECT_GE(learning_rate(kTiny, s), 6e-5) << s;
  }
}

TEST(ScheduleTest, NoWarmupStartsTheCosineAtOnce) {
  const LrSchedule s{1e-3, 0, 0, 10};
  EXPECT_DOUBLE_EQ(learning_rate(s, 1), 0.5 * (1 + std::cos(std::numbers::pi * 0.1)) * 1e-3);
  EXPECT_DOUBLE_EQ(learning_rate(s, 10), 0.0);
}

TEST(ScheduleTest, WarmupLongerThanTheRunIsAllWarmup) {
  // `--max-steps 20` on tiny.yaml: the run ends two thirds into the warmup.
  const LrSchedule s{6e-4, 6e-5, 30, 20};
  EXPECT_DOUBLE_EQ(learning_rate(s, 20), 6e-4 * 20 / 30);
}

TEST(ScheduleTest, StepsPastTheEndStayAtMinLr) {
  EXPECT_DOUBLE_EQ(learning_rate(kTiny, 400), 6e-5);
}

}  // namespace
}  // namespace kiln::train
