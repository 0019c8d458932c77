#include <kiln/sched/policy.h>

#include <gtest/gtest.h>

namespace kiln::sched {
namespace {

NodeView node(const std::string& name, const std::string& rack, int slots = 1,
              NodeState state = NodeState::kReady) {
  NodeView n;
  n.name = name;
  n.labels = {{"rack", rack}};
  n.slots = slots;
  n.state = state;
  return n;
}

JobView job(const std::string& id, int64_t seq, int nodes, int min_nodes = 0) {
  JobView j;
  j.id = id;
  j.seq = seq;
  j.nodes = nodes;
  j.min_nodes = min_nodes > 0 ? min_nodes : nodes;
  return j;
}

// Four nodes, two racks: the README's embedded cluster.
Snapshot four_nodes() {
  Snapshot s;
  s.nodes = {node("local-0", "r0"), node("local-1", "r0"), node("local-2", "r1"),
             node("local-3", "r1")};
  return s;
}

TEST(FifoGangPolicyTest, PacksAGangIntoOneRack) {
  Snapshot s = four_nodes();
  s.waiting = {job("a", 1, 2)};
  Plan plan = make_fifo_gang_policy()->decide(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].nodes, (std::vector<std::string>{"local-0", "local-1"}));
  EXPECT_NE(plan.placements[0].why.find("rack r0"), std::string::npos);
}

TEST(FifoGangPolicyTest, AvoidsTheNodeTheLastAttemptFaultedOnAndSuspectNodes) {
  Snapshot s = four_nodes();
  s.nodes[2].state = NodeState::kSuspect;
  JobView j = job("a", 1, 2);
  j.avoid = {"local-1"};
  s.waiting = {j};
  Plan plan = make_fifo_gang_policy()->decide(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  // r0 has the avoided node, r1 the suspect one: neither rack is clean, so the gang crosses
  // racks onto the two healthy nodes.
  EXPECT_EQ(plan.placements[0].nodes, (std::vector<std::string>{"local-0", "local-3"}));
}

TEST(FifoGangPolicyTest, AGangIsPlacedWholeOrWaitsWithTheReason) {
  Snapshot s = four_nodes();
  s.nodes[0].state = NodeState::kCordoned;
  s.nodes[1].state = NodeState::kDown;
  s.nodes[2].slots_used = 1;
  s.waiting = {job("big", 1, 2), job("small", 2, 1)};
  Plan plan = make_fifo_gang_policy()->decide(s);
  EXPECT_TRUE(plan.placements.empty());
  ASSERT_EQ(plan.waiting.count("big"), 1u);
  const std::string& why = plan.waiting["big"];
  EXPECT_NE(why.find("1 feasible"), std::string::npos) << why;
  EXPECT_NE(why.find("cordoned: local-0"), std::string::npos) << why;
  EXPECT_NE(why.find("down: local-1"), std::string::npos) << why;
  EXPECT_NE(why.find("0 free slot(s), needs 1: local-2"), std::string::npos) << why;
  // FIFO: the small job fits on local-3 but waits behind the head.
  EXPECT_EQ(plan.waiting["small"], "behind big (first in, first out)");
}

TEST(FifoGangPolicyTest, AnElasticJobShrinksToHealthyNodesDownToMinNodes) {
  Snapshot s = four_nodes();
  s.nodes[1].state = NodeState::kDown;
  s.nodes[2].state = NodeState::kDown;
  s.nodes[3].state = NodeState::kSuspect;
  s.waiting = {job("e", 1, 2, 1)};
  Plan plan = make_fifo_gang_policy()->decide(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].nodes, (std::vector<std::string>{"local-0"}));
  EXPECT_NE(plan.placements[0].why.find("shrunk from 2"), std::string::npos);

  // Not elastic: the suspect node is used rather than waiting forever.
  s.waiting = {job("f", 1, 2)};
  plan = make_fifo_gang_policy()->decide(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].nodes, (std::vector<std::string>{"local-0", "local-3"}));
}

TEST(FifoGangPolicyTest, JobsPlacedInOnePlanDoNotShareSlots) {
  Snapshot s = four_nodes();
  s.waiting = {job("b", 2, 2), job("a", 1, 2), job("c", 3, 1)};
  Plan plan = make_fifo_gang_policy()->decide(s);
  ASSERT_EQ(plan.placements.size(), 2u);
  EXPECT_EQ(plan.placements[0].job_id, "a");
  EXPECT_EQ(plan.placements[1].job_id, "b");
  EXPECT_EQ(plan.placements[0].nodes, (std::vector<std::string>{"local-0", "local-1"}));
  EXPECT_EQ(plan.placements[1].nodes, (std::vector<std::string>{"local-2", "local-3"}));
  EXPECT_EQ(plan.waiting.count("c"), 1u);
}

TEST(FifoGangPolicyTest, RanksPerNodeAndCpusAreFiltered) {
  Snapshot s = four_nodes();
  for (NodeView& n : s.nodes) {
    n.slots = 2;
    n.cpus = 4;
  }
  s.nodes[0].cpus_used = 2;
  JobView j = job("a", 1, 2);
  j.ranks_per_node = 2;
  j.cpus_per_rank = 2;
  s.waiting = {j};
  Plan plan = make_fifo_gang_policy()->decide(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].nodes, (std::vector<std::string>{"local-2", "local-3"}));
}

TEST(FifoGangPolicyTest, MemoryAndGpusAreFiltered) {
  Snapshot s = four_nodes();
  for (NodeView& n : s.nodes)
    n.memory_bytes = int64_t{8} << 30;
  s.nodes[0].memory_used_bytes = int64_t{6} << 30;  // 2 GiB left on local-0
  s.nodes[2].gpus = 8;
  s.nodes[3].gpus = 8;
  JobView big = job("mem", 1, 1);
  big.memory_per_rank_bytes = int64_t{4} << 30;
  s.waiting = {big};
  Plan plan = make_fifo_gang_policy()->decide(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].nodes, (std::vector<std::string>{"local-1"}));
  JobView gpu = job("gpu", 1, 2);
  gpu.gpus_per_rank = 4;
  s.waiting = {gpu};
  plan = make_fifo_gang_policy()->decide(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].nodes, (std::vector<std::string>{"local-2", "local-3"}));
  gpu.gpus_per_rank = 16;
  s.waiting = {gpu};
  plan = make_fifo_gang_policy()->decide(s);
  EXPECT_TRUE(plan.placements.empty());
  EXPECT_NE(plan.waiting["gpu"].find("8 free GPU(s), needs 16"), std::string::npos)
      << plan.waiting["gpu"];
}

}  // namespace
}  // namespace kiln::sched
