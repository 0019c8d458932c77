// The baselines are what they claim: fifo never lets a job pass a blocked one; easy lets it only
// where the head's reservation holds; both take nodes first-fit in snapshot order.
#include <kiln/sched/policy.h>

#include <gtest/gtest.h>

#include "sched/policy/test_util.h"

namespace kiln::sched {
namespace {

using testing::blocked_head;
using testing::gpu_job;
using testing::grid;
using testing::placement_of;
using testing::run_on;

TEST(BaselinesTest, FifoStartsNothingBehindABlockedJob) {
  Plan plan = make_fifo_policy()->decide(blocked_head());
  EXPECT_TRUE(plan.placements.empty());
  EXPECT_EQ(plan.waiting["short"].kind, "behind");
  EXPECT_EQ(plan.waiting["short"].position, 3);
}

TEST(BaselinesTest, EasyBackfillsOnlyWhatEndsBeforeTheReservation) {
  Plan plan = make_easy_policy()->decide(blocked_head());
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].job_id, "short");
  EXPECT_TRUE(plan.placements[0].backfilled);
  EXPECT_EQ(plan.waiting["head"].start_s, 1000);
}

TEST(BaselinesTest, FirstFitTakesNodesInOrderAndIgnoresPriority) {
  Snapshot s;
  s.nodes = grid(1, 1, 2);
  run_on(&s, gpu_job("r", 0, 1, 4), {"n001"});
  JobView low = gpu_job("low", 1, 1, 1);
  JobView high = gpu_job("high", 2, 1, 8);
  high.priority = 100;
  s.waiting = {high, low};
  for (const auto& policy : {make_fifo_policy(), make_easy_policy()}) {
    Plan plan = policy->decide(s);
    const Placement* p = placement_of(plan, "low");
    ASSERT_NE(p, nullptr) << policy->name();
    EXPECT_EQ(p->nodes, std::vector<std::string>{"n000"}) << policy->name();
    EXPECT_EQ(placement_of(plan, "high"), nullptr) << policy->name();
  }
  EXPECT_NE(make_policy("easy"), nullptr);
  EXPECT_EQ(make_policy("sjf"), nullptr);
}

}  // namespace
}  // namespace kiln::sched
