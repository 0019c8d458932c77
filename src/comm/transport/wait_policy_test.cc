// The wait policy: which ranks count as sharing a CPU, and the spin each case gets.
#include "comm/transport/wait_policy.h"

#include <gtest/gtest.h>

#include "comm/topology.h"

namespace kiln::comm {
namespace {

RankRecord on(int rank, const std::string& machine, const std::string& cpus) {
  RankRecord r;
  r.rank = rank;
  r.machine = machine;
  r.cpus = cpus;
  return r;
}

TEST(WaitPolicyTest, RanksOnOverlappingCpusOfOneMachineShare) {
  // The README's 4 ranks on 2 cores, bound two to a core, on fake hosts of one machine.
  const std::vector<RankRecord> four = {on(0, "m", "0"), on(1, "m", "0"), on(2, "m", "1"),
                                        on(3, "m", "1")};
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(cpu_sharers(four, r), 2) << r;
  // Bound one to a core: alone.
  const std::vector<RankRecord> two = {on(0, "m", "0"), on(1, "m", "1")};
  EXPECT_EQ(cpu_sharers(two, 0), 1);
  // Unbound: every rank may run anywhere, so all of them may share.
  const std::vector<RankRecord> unbound = {on(0, "m", "0-1"), on(1, "m", "0-1"), on(2, "m", "0-1")};
  EXPECT_EQ(cpu_sharers(unbound, 1), 3);
  // The same CPU numbers on another machine are other CPUs.
  const std::vector<RankRecord> hosts = {on(0, "m", "0"), on(1, "n", "0")};
  EXPECT_EQ(cpu_sharers(hosts, 0), 1);
  // Unknown (an unreadable boot id or affinity): only itself.
  const std::vector<RankRecord> unknown = {on(0, "", "0"), on(1, "", "0")};
  EXPECT_EQ(cpu_sharers(unknown, 0), 1);
}

TEST(WaitPolicyTest, ASharedCpuSpinsBrieflyAndAnOverrideWins) {
  WaitPolicy alone = choose_wait_policy(1, "0", nullptr, std::nullopt, std::nullopt);
  EXPECT_EQ(alone.spin_ns, kSpinNsAlone);
  EXPECT_EQ(alone.yield_ns, kYieldNs);
  EXPECT_EQ(alone.why, "alone on CPUs 0; spin 20 us: machine not measured");
  WaitPolicy shared = choose_wait_policy(2, "0", nullptr, std::nullopt, std::nullopt);
  EXPECT_EQ(shared.spin_ns, kSpinNsShared);
  EXPECT_EQ(shared.spin_ns, 0);
  EXPECT_EQ(shared.why, "shares CPUs 0 with 1 other rank");
  WaitPolicy forced = choose_wait_policy(3, "0-1", nullptr, int64_t{50}, int64_t{0});
  EXPECT_EQ(forced.spin_ns, 50'000);
  EXPECT_EQ(forced.yield_ns, 0);
  EXPECT_EQ(forced.why,
            "shares CPUs 0-1 with 2 other ranks; spin from KILN_COMM_SPIN_US; yield from "
            "KILN_COMM_YIELD_US");
}

}  // namespace
}  // namespace kiln::comm
