// Tests of Kiln's PRNG: the published reference sequences, determinism, the distributions'
// ranges and moments, and that a saved state continues the sequence.
#include <kiln/train/rng.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

namespace kiln::train {
namespace {

// splitmix64 from state 0: the values Vigna's reference C code prints (and Java's
// SplittableRandom(0).nextLong() sequence).
TEST(RngTest, SplitMix64MatchesReference) {
  uint64_t s = 0;
  EXPECT_EQ(splitmix64(&s), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(splitmix64(&s), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(splitmix64(&s), 0x06c45d188009454fULL);
  EXPECT_EQ(splitmix64(&s), 0xf88bb8a8724c81ecULL);
}

// xoshiro256** from the state {1, 2, 3, 4}: 11520, 0, 1509978240, 1215971899390074240 are the
// first outputs of the reference implementation.
TEST(RngTest, Xoshiro256StarStarMatchesReference) {
  Rng rng(0);
  ASSERT_TRUE(rng.restore(RngState{{1, 2, 3, 4}}).ok());
  EXPECT_EQ(rng.next_u64(), 11520u);
  EXPECT_EQ(rng.next_u64(), 0u);
  EXPECT_EQ(rng.next_u64(), 1509978240u);
  EXPECT_EQ(rng.next_u64(), 1215971899390074240u);
}

// Seeding: the state is the first four splitmix64 outputs of the seed, so Rng(0) starts with a
// fixed, documented sequence (computed by an independent Python transcription).
TEST(RngTest, SeedZeroSequenceIsFixed) {
  Rng rng(0);
  const RngState s = rng.state();
  EXPECT_EQ(s.words[0], 0xe220a8397b1dcdafULL);
  EXPECT_EQ(s.words[3], 0xf88bb8a8724c81ecULL);
  EXPECT_EQ(rng.next_u64(), 0x99ec5f36cb75f2b4ULL);
  EXPECT_EQ(rng.next_u64(), 0xbf6e1f784956452aULL);
  EXPECT_EQ(rng.next_u64(), 0x1a5f849d4933e6e0ULL);
}

TEST(RngTest, SameSeedSameSequenceDifferentSeedsDiffer) {
  Rng a(1337), b(1337), c(1338);
  int same_as_c = 0;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t x = a.next_u64();
    EXPECT_EQ(x, b.next_u64());
    same_as_c += x == c.next_u64() ? 1 : 0;
  }
  EXPECT_EQ(same_as_c, 0);
}

TEST(RngTest, DerivedSeedsAreDistinct) {
  std::set<uint64_t> seen;
  for (uint64_t seed = 0; seed < 32; ++seed) {
    for (uint64_t stream = 0; stream < 32; ++stream)
      seen.insert(derive_seed(seed, stream));
  }
  EXPECT_EQ(seen.size(), 32u * 32u);
  EXPECT_EQ(derive_seed(7, 3), derive_seed(7, 3));
}

TEST(RngTest, NextDoubleIsInUnitIntervalWithMeanOneHalf) {
  Rng rng(42);
  constexpr int kDraws = 100000;
  double sum = 0;
  for (int i = 0; i < kDraws; ++i) {
    const double x = rng.next_double();
    ASSERT_GE(x, 0.0);
    ASSERT_LT(x, 1.0);
    sum += x;
  }
  // Standard error of the mean of U(0, 1) over 1e5 draws is 0.29 / 316 = 0.0009; 0.005 is > 5
  // sigma.
  EXPECT_NEAR(sum / kDraws, 0.5, 0.005);
}

TEST(RngTest, NextBelowStaysInRangeAndIsUniform) {
  Rng rng(9);
  EXPECT_EQ(rng.next_below(1), 0u);
  constexpr int kBuckets = 10;
  constexpr int kDraws = 100000;
  std::vector<int> counts(kBuckets, 0);
  for (int i = 0; i < kDraws; ++i) {
    const uint64_t x = rng.next_below(kBuckets);
    ASSERT_LT(x, static_cast<uint64_t>(kBuckets));
    ++counts[x];
  }
  // Chi-square with 9 degrees of freedom: P(X > 27.9) = 0.001.
  double chi2 = 0;
  const double expected = static_cast<double>(kDraws) / kBuckets;
  for (int c : counts)
    chi2 += (c - expected) * (c - expected) / expected;
  EXPECT_LT(chi2, 27.9);
  // Bounds near 2^64 exercise the rejection path.
  const uint64_t huge = (uint64_t{1} << 63) + 12345;
  for (int i = 0; i < 1000; ++i)
    ASSERT_LT(rng.next_below(huge), huge);
}

TEST(RngTest, NormalHasMeanZeroAndUnitVariance) {
  Rng rng(2024);
  constexpr int kDraws = 200000;
  double sum = 0, sum_sq = 0;
  for (int i = 0; i < kDraws; ++i) {
    const double x = rng.normal();
    ASSERT_TRUE(std::isfinite(x));
    sum += x;
    sum_sq += x * x;
  }
  const double mean = sum / kDraws;
  const double var = sum_sq / kDraws - mean * mean;
  // Standard errors over 2e5 draws: mean 0.0022, variance 0.0032; the bounds are > 4 sigma.
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(var, 1.0, 0.015);
}

TEST(RngTest, RestoredStateContinuesTheSequence) {
  Rng a(77);
  for (int i = 0; i < 10; ++i)
    a.next_u64();
  const RngState saved = a.state();
  std::vector<uint64_t> expected;
  for (int i = 0; i < 20; ++i)
    expected.push_back(a.next_u64());
  Rng b(0);
  ASSERT_TRUE(b.restore(saved).ok());
  for (uint64_t x : expected)
    EXPECT_EQ(b.next_u64(), x);
}

TEST(RngTest, AllZeroStateIsRejected) {
  Rng rng(5);
  const RngState before = rng.state();
  const Status s = rng.restore(RngState{});
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  EXPECT_EQ(rng.state().words, before.words);
}

}  // namespace
}  // namespace kiln::train
