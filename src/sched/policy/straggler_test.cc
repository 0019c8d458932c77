// Tests of the straggler score (kiln/sched/straggler.h).
#include <kiln/sched/straggler.h>

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kiln::sched {
namespace {

std::vector<double> window(double ms, size_t n = kStragglerWindow) {
  return std::vector<double>(n, ms);
}

TEST(StragglerZ, ARankTwiceAsSlowAsItsPeersStandsOut) {
  std::vector<std::vector<double>> w = {window(100), window(102), window(98), window(200)};
  const std::vector<double> z = straggler_z_scores(w);
  ASSERT_EQ(z.size(), 4u);
  EXPECT_GT(z[3], kStragglerZ);
  for (int r = 0; r < 3; ++r)
    EXPECT_LT(std::abs(z[r]), 1.0) << "rank " << r;
}

TEST(StragglerZ, RanksAlikeAreNoStragglersHoweverSmallTheirSpread) {
  // Identical ranks (MAD 0) and a rank 20% slower: the scale floor (10% of the median) keeps
  // ordinary jitter from reading as a straggler.
  const std::vector<double> z =
      straggler_z_scores({window(100), window(100), window(100), window(120)});
  EXPECT_LT(z[3], kStragglerZ);
  EXPECT_DOUBLE_EQ(z[0], 0.0);
}

TEST(StragglerZ, OneSlowStepIsNotAStraggler) {
  std::vector<double> spiky = window(100);
  spiky.back() = 2000;  // a checkpoint, a page fault storm
  const std::vector<double> z = straggler_z_scores({window(100), window(101), spiky});
  EXPECT_LT(z[2], 1.0);
}

TEST(StragglerZ, OnlyTheNewestWindowCounts) {
  // Slow long ago, fast for a whole window since: recovered.
  std::vector<double> recovered = window(500, 40);
  for (size_t i = 0; i < kStragglerWindow; ++i)
    recovered.push_back(100);
  const std::vector<double> z = straggler_z_scores({window(100), window(100), recovered});
  EXPECT_LT(z[2], 1.0);
}

TEST(StragglerZ, TooFewRanksOrSamplesSayNothing) {
  for (double v : straggler_z_scores({window(100), window(300)}))
    EXPECT_TRUE(std::isnan(v)) << "two ranks: a median of two names no odd one out";
  const std::vector<double> z = straggler_z_scores(
      {window(100), window(100), window(100), window(300, kStragglerMinSamples - 1)});
  EXPECT_TRUE(std::isnan(z[3])) << "a rank without enough samples yet";
  EXPECT_FALSE(std::isnan(z[0]));
  for (double v : straggler_z_scores({window(0), window(0), window(0)}))
    EXPECT_TRUE(std::isnan(v)) << "all zero: nothing to tell apart";
}

}  // namespace
}  // namespace kiln::sched
