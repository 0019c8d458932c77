// plan_placement over made-up machines: ranks on whole cores, NUMA-local blocks, oversubscription
// spread evenly, explicit lists checked against the usable CPUs.
#include <kiln/launch/placement.h>

#include <gtest/gtest.h>

namespace kiln::launch {
namespace {

// `nodes` NUMA nodes of `cores` cores each, `smt` threads per core; cpu numbering as Linux does
// it on x86 (all first threads, then all second threads).
CpuTopology machine(int nodes, int cores, int smt = 1) {
  CpuTopology t;
  const int total = nodes * cores;
  for (int n = 0; n < nodes; ++n) {
    for (int c = 0; c < cores; ++c) {
      CpuCore core;
      core.node = n;
      core.package = n;
      core.core_id = c;
      std::vector<int> cpus;
      for (int s = 0; s < smt; ++s)
        cpus.push_back(s * total + n * cores + c);
      core.cpus = CpuSet(cpus);
      t.cores.push_back(core);
    }
  }
  return t;
}

std::vector<std::string> lists(const Placement& p) {
  std::vector<std::string> out;
  for (const CpuSet& s : p.rank_cpus)
    out.push_back(s.to_string());
  return out;
}

Placement plan(const CpuTopology& t, int ranks, int threads, const std::string& bind = "cores") {
  Result<CpuBind> b = CpuBind::parse(bind);
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  Result<Placement> p = plan_placement(t, ranks, threads, *b);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p.ok() ? *p : Placement();
}

TEST(PlacementTest, OneRankPerCoreWhenTheyFit) {
  const Placement p = plan(machine(1, 2), 2, 1);
  EXPECT_EQ(lists(p), (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(p.ranks_per_cpu_max, 1);
  EXPECT_EQ(p.summary,
            "cores: 2 ranks x 1 thread on 2 cores (2 CPUs 0-1) on 1 NUMA node: rank 0 on CPUs 0 "
            "(node 0), rank 1 on CPUs 1 (node 0)");
}

TEST(PlacementTest, ARankGetsAsManyWholeCoresAsItHasThreadsWithTheirSiblings) {
  // 8 cores x 2 threads: cpu c and c + 8 are siblings.
  const Placement p = plan(machine(1, 8, 2), 2, 3);
  EXPECT_EQ(lists(p), (std::vector<std::string>{"0-2,8-10", "3-5,11-13"}));
  EXPECT_EQ(p.ranks_per_cpu_max, 1);
}

TEST(PlacementTest, RanksGoToNumaNodesInBlocksOfConsecutiveRanks) {
  const Placement p = plan(machine(2, 4), 4, 1);
  // Ranks 0-1 on node 0, 2-3 on node 1: ring neighbours share a node.
  EXPECT_EQ(lists(p), (std::vector<std::string>{"0", "1", "4", "5"}));
  const Placement q = plan(machine(2, 4), 2, 4);
  EXPECT_EQ(lists(q), (std::vector<std::string>{"0-3", "4-7"}));
  const Placement odd = plan(machine(2, 4), 3, 1);
  EXPECT_EQ(lists(odd), (std::vector<std::string>{"0", "1", "4"}));
}

TEST(PlacementTest, TooManyThreadsSplitTheCoresEvenly) {
  // 3 ranks x 2 threads on 4 cores: blocks of 1, 1, 2 cores, none shared.
  const Placement p = plan(machine(1, 4), 3, 2);
  EXPECT_EQ(lists(p), (std::vector<std::string>{"0", "1", "2-3"}));
  EXPECT_EQ(p.ranks_per_cpu_max, 1);
}

TEST(PlacementTest, MoreRanksThanCoresAreSpreadNeverStacked) {
  // The README's 4 ranks on 2 cores: two per core, not four on the launcher's.
  const Placement p = plan(machine(1, 2), 4, 1);
  EXPECT_EQ(lists(p), (std::vector<std::string>{"0", "0", "1", "1"}));
  EXPECT_EQ(p.ranks_per_cpu_max, 2);
  EXPECT_NE(p.summary.find("oversubscribed: up to 2 ranks share a CPU"), std::string::npos);
  const Placement q = plan(machine(1, 3), 7, 1);
  // ceil(7 / 3) = 3 at most on any core.
  EXPECT_EQ(q.ranks_per_cpu_max, 3);
  EXPECT_EQ(lists(q), (std::vector<std::string>{"0", "0", "0", "1", "1", "2", "2"}));
}

TEST(PlacementTest, ListGivesRankRTheListRModTheCount) {
  const Placement p = plan(machine(1, 4), 3, 1, "list:2-3/0");
  EXPECT_EQ(lists(p), (std::vector<std::string>{"2-3", "0", "2-3"}));
  EXPECT_EQ(p.ranks_per_cpu_max, 2);
  EXPECT_EQ(p.summary.substr(0, 16), "list:2-3/0: 3 ra");
}

TEST(PlacementTest, NoneBindsNothing) {
  const Placement p = plan(machine(1, 2), 2, 1, "none");
  EXPECT_TRUE(p.rank_cpus.empty());
  EXPECT_EQ(p.ranks_per_cpu_max, 2);
}

TEST(PlacementTest, AListWithACpuTheProcessMayNotUseIsAnErrorNamingIt) {
  Result<CpuBind> b = CpuBind::parse("list:0/5");
  ASSERT_TRUE(b.ok());
  Result<Placement> p = plan_placement(machine(1, 2), 2, 1, *b);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(),
            "--cpu-bind list:0/5: CPU 5 (list 1) is not one this process may use (0-1)");
}

TEST(PlacementTest, BadBindTextIsAnErrorNamingTheFlag) {
  const std::pair<const char*, const char*> cases[] = {
      {"socket", "--cpu-bind 'socket': expected none, cores or list:<cpus>/<cpus>/..."},
      {"list:", "--cpu-bind 'list:': rank 0's list is empty"},
      {"list:0//1", "--cpu-bind 'list:0//1': rank 1's list is empty"},
      {"list:0/x", "--cpu-bind 'list:0/x': cpu list 'x': 'x' is not a CPU number"},
  };
  for (const auto& [text, message] : cases) {
    Result<CpuBind> b = CpuBind::parse(text);
    ASSERT_FALSE(b.ok()) << text;
    EXPECT_EQ(b.status().message(), message);
  }
  Result<CpuBind> ok = CpuBind::parse("list:0-1/3");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->to_string(), "list:0-1/3");
}

}  // namespace
}  // namespace kiln::launch
