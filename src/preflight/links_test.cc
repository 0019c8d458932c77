// The link check's plan (disjoint pairs, O(N) of them, every node meeting several peers) and its
// judgement (a slow link named with both ends, a slow node named alone).
#include <kiln/preflight/links.h>

#include <gtest/gtest.h>

#include <set>
#include <utility>

namespace kiln::preflight {
namespace {

TEST(LinkPlanTest, RoundsArePairsOfDistinctNodesAndEveryNodeMeetsSeveralPeers) {
  for (int n : {2, 3, 4, 5, 8, 17, 100}) {
    const auto rounds = plan_link_rounds(n, 1, 7);
    std::vector<std::set<int>> met(static_cast<size_t>(n));
    size_t pairs = 0;
    for (const auto& round : rounds) {
      std::set<int> busy;
      for (const LinkPair& p : round) {
        ASSERT_LT(p.a, p.b) << n;
        ASSERT_GE(p.a, 0);
        ASSERT_LT(p.b, n);
        EXPECT_TRUE(busy.insert(p.a).second) << "node " << p.a << " twice in a round, n=" << n;
        EXPECT_TRUE(busy.insert(p.b).second) << "node " << p.b << " twice in a round, n=" << n;
        met[static_cast<size_t>(p.a)].insert(p.b);
        met[static_cast<size_t>(p.b)].insert(p.a);
        ++pairs;
      }
    }
    // The ring and one matching: at most N + N/2 pairs in at most four rounds.
    EXPECT_LE(pairs, static_cast<size_t>(n + n / 2)) << n;
    EXPECT_LE(rounds.size(), 4u) << n;
    for (int i = 0; i < n; ++i) {
      EXPECT_GE(met[static_cast<size_t>(i)].size(), std::min<size_t>(2, static_cast<size_t>(n - 1)))
          << "node " << i << " of " << n;
    }
  }
  EXPECT_TRUE(plan_link_rounds(1, 1, 1).empty());
  // The same seed gives the same plan (every node computes it alone).
  const auto a = plan_link_rounds(50, 2, 9), b = plan_link_rounds(50, 2, 9);
  ASSERT_EQ(a.size(), b.size());
  for (size_t r = 0; r < a.size(); ++r) {
    ASSERT_EQ(a[r].size(), b[r].size());
    for (size_t i = 0; i < a[r].size(); ++i)
      EXPECT_TRUE(a[r][i].a == b[r][i].a && a[r][i].b == b[r][i].b);
  }
}

std::vector<LinkMeasurement> all_pairs(int n, double gbps) {
  std::vector<LinkMeasurement> out;
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b)
      out.push_back({a, b, gbps, 30});
  return out;
}

const std::vector<std::string> kNames = {"n1", "n2", "n3", "n4", "n5"};

// Thresholds set here rather than the defaults, so that the figures below do not move with them.
LinkThresholds thresholds() {
  LinkThresholds t;
  t.bandwidth_fraction = 0.5;
  t.latency_factor = 5;
  t.latency_min_us = 200;
  return t;
}

TEST(LinkJudgeTest, ASlowLinkIsNamedWithBothEndsAndNobodyElse) {
  std::vector<LinkMeasurement> m = all_pairs(4, 9.5);
  for (LinkMeasurement& x : m)
    if (x.a == 1 && x.b == 2) x.gbps = 0.2;  // n2 ~ n3, rate-limited
  const std::vector<Finding> f = judge_links(kNames, m, thresholds());
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].node, "n2");
  EXPECT_EQ(f[1].node, "n3");
  for (const Finding& x : f) {
    EXPECT_EQ(x.check, "links");
    EXPECT_EQ(x.path, "links.n2~n3.gbps");
    EXPECT_EQ(x.expected, ">= 4.75");
    EXPECT_EQ(x.found, "0.200");
    EXPECT_EQ(x.against, "median 9.50");
  }
}

TEST(LinkJudgeTest, ANodeSlowWithEveryPeerIsNamedAloneAndItsPeersPass) {
  std::vector<LinkMeasurement> m = all_pairs(5, 9.5);
  for (LinkMeasurement& x : m)
    if (x.a == 3 || x.b == 3) x.gbps = 1.0;  // n4's NIC
  const std::vector<Finding> f = judge_links(kNames, m, thresholds());
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].node, "n4");
  EXPECT_EQ(f[0].path, "links.n4.gbps");
  EXPECT_EQ(f[0].found, "1.00 (median of 4 peers, all slow)");
}

TEST(LinkJudgeTest, TheLockFloorAndLatencyAreThresholdsToo) {
  std::vector<LinkMeasurement> m = all_pairs(4, 9.5);
  LinkThresholds floor = thresholds();
  floor.floor_gbps = 20;  // every link is below what the lock recorded: every node is slow
  EXPECT_EQ(judge_links(kNames, m, floor).size(), 4u);
  for (LinkMeasurement& x : m)
    if (x.a == 0 && x.b == 3) x.latency_us = 5000;
  const std::vector<Finding> f = judge_links(kNames, m, thresholds());
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].path, "links.n1~n4.latency_us");
  EXPECT_EQ(f[0].expected, "<= 200");
  // Differences below the latency minimum are not findings (loopback links are all fast).
  m[0].latency_us = 150;
  EXPECT_EQ(judge_links(kNames, m, thresholds()).size(), 2u);
  // The defaults: a quarter of the median bandwidth, 10x and 5 ms of latency.
  EXPECT_TRUE(judge_links(kNames, m, LinkThresholds{}).empty()) << "5 ms is under 10x and 5 ms";
  m[1].gbps = 2.0;  // 21% of the median
  EXPECT_EQ(judge_links(kNames, m, LinkThresholds{}).size(), 2u);
}

TEST(LinkCostTest, PairsGrowLinearlyAndRoundsStayConstant) {
  const LinkCheckCost c4 = link_check_cost(4, 1, 0.5);
  const LinkCheckCost c1000 = link_check_cost(1000, 1, 0.5);
  EXPECT_EQ(c4.all_pairs, 6);
  EXPECT_EQ(c1000.all_pairs, 499500);
  EXPECT_EQ(c1000.pairs, 1500);  // 1,000 ring pairs and a matching of 500
  EXPECT_EQ(c1000.rounds, 3);
  EXPECT_DOUBLE_EQ(c1000.seconds, 1.5);
}

}  // namespace
}  // namespace kiln::preflight
