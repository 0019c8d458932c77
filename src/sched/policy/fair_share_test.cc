// The fair-share ledger against the closed form of a decayed integral.
#include <kiln/sched/fair_share.h>

#include <gtest/gtest.h>

#include <cmath>

#include "sched/policy/test_util.h"

namespace kiln::sched {
namespace {

TEST(FairShareTest, UseIsTheDecayedIntegralOfTheShare) {
  const double h = 1000;
  FairShareLedger l(h);
  l.advance(0, {{"a", 0.5}});
  l.advance(h, {{"a", 0.0}});
  // 0.5 * integral_0^h 2^-(h-t)/h dt = 0.5 * h / ln 2 * (1 - 1/2)
  const double want = 0.5 * h / std::log(2.0) * 0.5;
  EXPECT_NEAR(l.usage().at("a"), want, 1e-9 * want);
  l.advance(2 * h, {});
  EXPECT_NEAR(l.usage().at("a"), want / 2, 1e-9 * want);
  // Many small steps give the same as one big one.
  FairShareLedger steps(h);
  for (int i = 0; i <= 100; ++i)
    steps.advance(i * h / 100, {{"a", 0.5}});
  EXPECT_NEAR(steps.usage().at("a"), want, 1e-9 * want);
}

TEST(FairShareTest, AClockThatGoesBackAddsNothingAndJsonRoundTrips) {
  FairShareLedger l(100);
  l.advance(50, {{"a", 1}});
  l.advance(60, {{"a", 1}});
  const double at60 = l.usage().at("a");
  l.advance(10, {{"a", 1}});
  EXPECT_EQ(l.usage().at("a"), at60);
  FairShareLedger back = FairShareLedger::from_json(l.to_json(), 100);
  EXPECT_EQ(back.usage(), l.usage());
  back.advance(70, {});
  l.advance(70, {});
  EXPECT_DOUBLE_EQ(back.usage().at("a"), l.usage().at("a"));
  // Garbage reads as an empty ledger, never a crash or a negative use.
  FairShareLedger junk = FairShareLedger::from_json(
      nlohmann::json{{"usage", {{"a", -5}, {"b", "x"}}}, {"at_s", "y"}}, 100);
  EXPECT_EQ(junk.usage().at("a"), 0);
  EXPECT_EQ(junk.usage().count("b"), 0u);
}

TEST(FairShareTest, DominantShareIsTheLargestFraction) {
  const NodeResources totals{4, 128, 0, 32};
  EXPECT_DOUBLE_EQ(dominant_share(NodeResources{0, 8, 0, 8}, 2, totals), 0.5);
  EXPECT_DOUBLE_EQ(dominant_share(NodeResources{0, 64, 0, 1}, 1, totals), 0.5);
  EXPECT_DOUBLE_EQ(dominant_share(NodeResources{}, 1, totals), 0.25);  // a whole node
  Snapshot s;
  s.nodes = testing::grid(1, 1, 2);
  s.queues = {QueueSpec{"qa", "team", "", 1, {}, {}}};
  testing::run_on(&s, testing::gpu_job("j", 1, 1, 4), {"n000"});
  s.running[0].queue = "qa";
  EXPECT_DOUBLE_EQ(team_shares(s).at("team"), 0.25);
}

}  // namespace
}  // namespace kiln::sched
