#include <gtest/gtest.h>

#include "comm/tuning.h"

namespace kiln::comm {
namespace {

TEST(TuningTest, SmallBuffersGoRecursiveDoublingLargeOnesGoRing) {
  for (int n : {2, 3, 4, 8, 16}) {
    EXPECT_EQ(choose_allreduce(8, n, shm_link_cost()), Algorithm::kRecursiveDoubling) << n;
    EXPECT_EQ(choose_allreduce(64 << 20, n, shm_link_cost()), Algorithm::kRing) << n;
    EXPECT_EQ(choose_allreduce(8, n, tcp_link_cost()), Algorithm::kRecursiveDoubling) << n;
    EXPECT_EQ(choose_allreduce(64 << 20, n, tcp_link_cost()), Algorithm::kRing) << n;
  }
}

TEST(TuningTest, CostsGrowWithSizeAndAOneRankGroupIsFree) {
  EXPECT_EQ(ring_allreduce_cost_us(1 << 20, 1, shm_link_cost()), 0);
  EXPECT_LT(ring_allreduce_cost_us(1 << 10, 4, shm_link_cost()),
            ring_allreduce_cost_us(1 << 20, 4, shm_link_cost()));
  // A fold makes non-powers of two cost more than the next power of two below them.
  EXPECT_GT(recursive_doubling_allreduce_cost_us(4096, 5, tcp_link_cost()),
            recursive_doubling_allreduce_cost_us(4096, 4, tcp_link_cost()));
}

}  // namespace
}  // namespace kiln::comm
