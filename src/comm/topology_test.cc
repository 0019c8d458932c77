#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "comm/topology.h"

namespace kiln::comm {
namespace {

RankRecord rank_on(int rank, const std::string& rack, const std::string& sw,
                   const std::string& host) {
  RankRecord r;
  r.rank = rank;
  r.host = host;
  r.labels = {{"rack", rack}, {"switch", sw}};
  return r;
}

TEST(TopologyTest, ParsesLabelsOutermostFirst) {
  Result<Labels> l = parse_topology("rack=r1,switch=s3");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(*l, (Labels{{"rack", "r1"}, {"switch", "s3"}}));
  EXPECT_TRUE(parse_topology("rack").status().is_invalid_argument());
  EXPECT_TRUE(parse_topology("rack=").status().is_invalid_argument());
  EXPECT_TRUE(parse_topology("rack=r1,rack=r2").status().is_invalid_argument());
  EXPECT_TRUE(parse_topology("").ok());
}

TEST(TopologyTest, RecordsRoundTripThroughJson) {
  RankRecord r = rank_on(5, "r2", "s9", "node5");
  r.pid = 4242;
  r.tcp_address = "10.0.0.5";
  r.tcp_port = 29500;
  r.machine = "0b5e9c1e-5d8e-4a77-9a43-6f4f1f0e2c11";
  r.cpus = "0-3,8";
  r.handoff_us = 0.125;
  r.copy_gbps = 11.5;
  r.reduce_gbps = 20.25;
  Result<RankRecord> back = record_from_json(record_to_json(r));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->rank, 5);
  EXPECT_EQ(back->host, "node5");
  EXPECT_EQ(back->labels, r.labels);
  EXPECT_EQ(back->tcp_port, 29500);
  EXPECT_EQ(back->machine, r.machine);
  EXPECT_EQ(back->cpus, "0-3,8");
  EXPECT_EQ(back->handoff_us, 0.125);
  EXPECT_EQ(back->copy_gbps, 11.5);
  EXPECT_EQ(back->reduce_gbps, 20.25);
  // Every rank's algorithm choice depends on these, so a figure that is no measurement is refused.
  RankRecord absurd = r;
  absurd.copy_gbps = 1e9;
  EXPECT_EQ(record_from_json(record_to_json(absurd)).status().message(),
            "rank record: copy_gbps is not in [0, 1000000.000000]");
  absurd.copy_gbps = -1;
  EXPECT_TRUE(record_from_json(record_to_json(absurd)).status().is_invalid_argument());
  RankRecord huge = r;
  huge.cpus = std::string(65 << 10, '1');
  EXPECT_TRUE(record_from_json(record_to_json(huge)).status().is_invalid_argument());
  EXPECT_TRUE(record_from_json("{\"rank\": \"x\"}").status().is_invalid_argument());
  EXPECT_TRUE(record_from_json("not json").status().is_invalid_argument());
}

// 2 racks x 2 switches x 2 hosts x 2 ranks, numbered in a scrambled order: the ring must still
// enter and leave every domain exactly once.
TEST(TopologyTest, RingCrossesEveryDomainBoundaryTheMinimumNumberOfTimes) {
  std::vector<std::tuple<std::string, std::string, std::string>> slots;
  for (const char* rack : {"r1", "r2"}) {
    for (const char* sw : {"s1", "s2"}) {
      for (const char* host : {"a", "b"}) {
        for (int k = 0; k < 2; ++k) {
          slots.emplace_back(rack, std::string(rack) + sw, std::string(rack) + sw + host);
        }
      }
    }
  }
  std::mt19937 rng(3);
  std::shuffle(slots.begin(), slots.end(), rng);
  std::vector<RankRecord> records;
  for (size_t r = 0; r < slots.size(); ++r) {
    auto [rack, sw, host] = slots[r];
    records.push_back(rank_on(static_cast<int>(r), rack, sw, host));
  }
  const std::vector<int> ring = ring_order(records);
  ASSERT_EQ(ring.size(), 16u);
  // A ring over k groups of a level crosses between groups at least k times (k > 1).
  EXPECT_EQ(domain_crossings(ring, records, 0), 2);  // racks
  EXPECT_EQ(domain_crossings(ring, records, 1), 4);  // switches
  EXPECT_EQ(domain_crossings(ring, records, 2), 8);  // hosts
  // Rank order alone (what an unaware ring would use) crosses far more often.
  std::vector<int> naive(16);
  for (int r = 0; r < 16; ++r)
    naive[r] = r;
  EXPECT_GT(domain_crossings(naive, records, 0), 2);
  // Every host's ranks sit together, in rank order.
  const auto hosts = hosts_in_ring_order(ring, records);
  ASSERT_EQ(hosts.size(), 8u);
  for (const auto& h : hosts) {
    ASSERT_EQ(h.size(), 2u);
    EXPECT_EQ(records[h[0]].host, records[h[1]].host);
    EXPECT_LT(h[0], h[1]);
  }
}

TEST(TopologyTest, WithoutLabelsTheRingGroupsHosts) {
  std::vector<RankRecord> records;
  const char* hosts[] = {"b", "a", "b", "a", "c"};
  for (int r = 0; r < 5; ++r) {
    RankRecord rec;
    rec.rank = r;
    rec.host = hosts[r];
    records.push_back(rec);
  }
  EXPECT_EQ(ring_order(records), (std::vector<int>{1, 3, 0, 2, 4}));
}

}  // namespace
}  // namespace kiln::comm
