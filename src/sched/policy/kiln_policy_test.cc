// The kiln policy's rules, each on a cluster small enough to check by hand.
#include <kiln/sched/policy.h>

#include <gtest/gtest.h>

#include <set>

#include "sched/policy/test_util.h"

namespace kiln::sched {
namespace {

using testing::gpu_job;
using testing::gpu_node;
using testing::grid;
using testing::placement_of;
using testing::run_on;

Plan decide(const Snapshot& s) {
  return make_kiln_policy()->decide(s);
}

std::set<std::string> domains(const Snapshot& s, const std::vector<std::string>& nodes,
                              size_t level) {
  std::set<std::string> out;
  for (const std::string& name : nodes)
    for (const NodeView& n : s.nodes)
      if (n.name == name) out.insert(n.domain[0] + (level > 0 ? "/" + n.domain[1] : ""));
  return out;
}

QueueSpec queue(const std::string& name, int64_t quota_nodes, int64_t borrow_nodes,
                const std::string& cohort) {
  QueueSpec q;
  q.name = name;
  q.cohort = cohort;
  q.quota["default"] = QuotaVector{quota_nodes, -1, -1};
  q.borrow["default"] = QuotaVector{borrow_nodes, 0, 0};
  return q;
}

TEST(KilnPolicyTest, HigherPriorityGoesFirstAndTheOtherGetsTheReservation) {
  Snapshot s;
  s.nodes = grid(1, 1, 1);
  JobView low = gpu_job("low", 1, 1);
  JobView high = gpu_job("high", 2, 1);
  high.priority = 10;
  s.waiting = {low, high};
  Plan plan = decide(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].job_id, "high");
  EXPECT_EQ(plan.waiting["low"].kind, "reserved");
  EXPECT_EQ(plan.waiting["low"].start_s, 3600);  // when high's time limit frees the node
}

TEST(KilnPolicyTest, AQueueStaysWithinItsQuotaAndDoesNotBlockOthers) {
  Snapshot s;
  s.nodes = grid(1, 1, 4);
  s.queues = {queue("a", 2, 0, ""), queue("b", -1, 0, "")};
  for (int i = 0; i < 3; ++i) {
    s.waiting.push_back(gpu_job("a" + std::to_string(i), i, 1));
    s.waiting.back().queue = "a";
  }
  s.waiting.push_back(gpu_job("b0", 9, 1));
  s.waiting.back().queue = "b";
  Plan plan = decide(s);
  EXPECT_NE(placement_of(plan, "a0"), nullptr);
  EXPECT_NE(placement_of(plan, "a1"), nullptr);
  EXPECT_NE(placement_of(plan, "b0"), nullptr);
  ASSERT_EQ(plan.waiting.count("a2"), 1u);
  EXPECT_EQ(plan.waiting["a2"].kind, "quota");
  EXPECT_NE(plan.waiting["a2"].reason.find("queue a is at its quota"), std::string::npos)
      << plan.waiting["a2"].reason;
}

TEST(KilnPolicyTest, AQueueBorrowsIdleCohortQuotaAndTheLenderReclaimsItByPreemption) {
  Snapshot s;
  s.nodes = grid(1, 1, 4);
  s.queues = {queue("a", 2, 2, "c"), queue("b", 2, 0, "c")};
  for (int i = 0; i < 4; ++i) {
    s.waiting.push_back(gpu_job("a" + std::to_string(i), i, 1));
    s.waiting.back().queue = "a";
  }
  Plan plan = decide(s);
  ASSERT_EQ(plan.placements.size(), 4u);
  int borrowed = 0;
  for (const Placement& p : plan.placements)
    borrowed += p.borrowed;
  EXPECT_EQ(borrowed, 2);

  // Now a's four run (the last two started later: they are the borrowed ones) and b wants its
  // quota back.
  Snapshot t;
  t.nodes = grid(1, 1, 4);
  t.queues = s.queues;
  t.now_s = 1000;  // past every job's minimum run time
  for (int i = 0; i < 4; ++i)
    run_on(&t, s.waiting[static_cast<size_t>(i)], {"n00" + std::to_string(i)}, i < 2 ? 0 : 50);
  JobView b = gpu_job("b0", 10, 1);
  b.queue = "b";
  t.waiting = {b};
  plan = decide(t);
  ASSERT_EQ(plan.preemptions.size(), 1u);
  EXPECT_TRUE(plan.preemptions[0].victim == "a2" || plan.preemptions[0].victim == "a3")
      << plan.preemptions[0].victim;
  EXPECT_EQ(plan.preemptions[0].for_job, "b0");
  EXPECT_NE(plan.preemptions[0].why.find("reclaim"), std::string::npos);
  EXPECT_EQ(plan.waiting["b0"].kind, "preempting");

  // Beyond its own quota b cannot reclaim: it waits on quota and nothing is preempted.
  JobView big = gpu_job("b1", 11, 3);
  big.queue = "b";
  t.waiting = {big};
  plan = decide(t);
  EXPECT_TRUE(plan.preemptions.empty());
  EXPECT_EQ(plan.waiting["b1"].kind, "quota");
}

TEST(KilnPolicyTest, GangsArePlacedWholeOrNotAtAllSoTwoHalfClusterGangsCannotDeadlock) {
  Snapshot s;
  s.nodes = grid(1, 1, 4);
  s.waiting = {gpu_job("g1", 1, 3), gpu_job("g2", 2, 3)};
  Plan plan = decide(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].job_id, "g1");
  EXPECT_EQ(plan.placements[0].nodes.size(), 3u);
  // g2 holds nothing while it waits: its reservation names the time g1's limit ends.
  EXPECT_EQ(plan.waiting["g2"].kind, "reserved");
  EXPECT_EQ(plan.waiting["g2"].start_s, 3600);

  // With one node free, a 2-node gang gets no part of it.
  Snapshot t;
  t.nodes = grid(1, 1, 4);
  run_on(&t, gpu_job("r", 0, 3), {"n000", "n001", "n002"});
  t.waiting = {gpu_job("g", 1, 2)};
  plan = decide(t);
  EXPECT_TRUE(plan.placements.empty());
}

TEST(KilnPolicyTest, BackfillUsesHolesOnlyWhereTheHeadJobsReservedStartIsKept) {
  Plan plan = decide(testing::blocked_head());
  EXPECT_EQ(plan.waiting["head"].kind, "reserved");
  EXPECT_EQ(plan.waiting["head"].start_s, 1000);
  // n003 is free now and reserved for head at t=1000: a job done by then may use it...
  const Placement* shorty = placement_of(plan, "short");
  ASSERT_NE(shorty, nullptr);
  EXPECT_TRUE(shorty->backfilled);
  EXPECT_EQ(shorty->nodes, std::vector<std::string>{"n003"});
  // ...one still running then may not.
  EXPECT_EQ(placement_of(plan, "long"), nullptr);
  EXPECT_EQ(plan.waiting["long"].kind, "behind");
  EXPECT_NE(plan.waiting["long"].reason.find("behind head"), std::string::npos);
}

TEST(KilnPolicyTest, PacksIntoTheFewestFailureDomainsAndHonoursRequiredAndSpread) {
  Snapshot s;
  s.nodes = grid(2, 2, 2);  // racks r0 r1, switches s0 s1 in each, 2 nodes per switch
  s.waiting = {gpu_job("two", 1, 2)};
  Plan plan = decide(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(domains(s, plan.placements[0].nodes, 1).size(), 1u) << plan.placements[0].why;

  s.waiting = {gpu_job("three", 1, 3)};
  plan = decide(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(domains(s, plan.placements[0].nodes, 0).size(), 1u);
  EXPECT_EQ(domains(s, plan.placements[0].nodes, 1).size(), 2u);

  JobView strict = gpu_job("strict", 1, 3);
  strict.topology.same = DomainLevel::kSwitch;
  strict.topology.required = true;
  s.waiting = {strict};
  plan = decide(s);
  EXPECT_TRUE(plan.placements.empty());
  EXPECT_NE(plan.waiting["strict"].reason.find("no switch holds 3"), std::string::npos)
      << plan.waiting["strict"].reason;

  JobView spread = gpu_job("spread", 1, 2);
  spread.topology.spread = DomainLevel::kRack;
  s.waiting = {spread};
  plan = decide(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(domains(s, plan.placements[0].nodes, 0).size(), 2u);

  // A cordoned node is never used: a 4-node job packs into the other rack.
  s.nodes[0].state = NodeState::kCordoned;
  s.waiting = {gpu_job("four", 1, 4)};
  plan = decide(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(domains(s, plan.placements[0].nodes, 0), std::set<std::string>{"r1"});
}

TEST(KilnPolicyTest, BestFitFillsSharedNodesBeforeEmptyOnes) {
  Snapshot s;
  s.nodes = grid(1, 1, 2);
  run_on(&s, gpu_job("r", 0, 1, 4), {"n001"});
  s.waiting = {gpu_job("one-gpu", 1, 1, 1)};
  Plan plan = decide(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].nodes, std::vector<std::string>{"n001"});
}

TEST(KilnPolicyTest, PriorityPreemptionStaysInsideTheQueueAndTakesTheLeastWork) {
  Snapshot s;
  s.nodes = grid(1, 1, 3);
  s.now_s = 1000;
  JobView mine_old = gpu_job("mine-old-ckpt", 0, 1);
  mine_old.queue = "q";
  JobView mine_new = gpu_job("mine-new-ckpt", 0, 1);
  mine_new.queue = "q";
  JobView theirs = gpu_job("theirs", 0, 1);
  theirs.queue = "p";
  run_on(&s, mine_old, {"n000"});
  run_on(&s, mine_new, {"n001"});
  run_on(&s, theirs, {"n002"});
  s.running[0].last_checkpoint_s = 500;  // 500 s of work since its checkpoint
  s.running[1].last_checkpoint_s = 990;  // 10 s
  JobView urgent = gpu_job("urgent", 5, 1);
  urgent.queue = "q";
  urgent.priority = 100;
  s.waiting = {urgent};
  Plan plan = decide(s);
  ASSERT_EQ(plan.preemptions.size(), 1u);
  EXPECT_EQ(plan.preemptions[0].victim, "mine-new-ckpt");
  EXPECT_EQ(plan.waiting["urgent"].kind, "preempting");

  // Needing all three nodes, it would have to evict another queue's job: nothing is preempted.
  urgent.nodes = urgent.min_nodes = 3;
  s.waiting = {urgent};
  plan = decide(s);
  EXPECT_TRUE(plan.preemptions.empty());

  // A victim that was preempted before is not preempted again (no thrash): the other one is.
  urgent.nodes = urgent.min_nodes = 1;
  s.waiting = {urgent};
  s.running[1].preemptions = 1;
  plan = decide(s);
  ASSERT_EQ(plan.preemptions.size(), 1u);
  EXPECT_EQ(plan.preemptions[0].victim, "mine-old-ckpt");
  s.running[1].preemptions = 0;
  // Nor one that only just started.
  s.running[0].start_s = s.running[1].start_s = 900;
  plan = decide(s);
  EXPECT_TRUE(plan.preemptions.empty());
  s.running[0].start_s = s.running[1].start_s = 0;

  // While its victim stops, the job waits for it rather than preempting more.
  s.running[1].stopping = true;
  plan = decide(s);
  EXPECT_TRUE(plan.preemptions.empty());
  EXPECT_EQ(plan.waiting["urgent"].kind, "preempting");
  EXPECT_NE(plan.waiting["urgent"].reason.find("stopping"), std::string::npos);
}

TEST(KilnPolicyTest, FairShareOrdersEqualPriorityTeamsByUseOverWeight) {
  Snapshot s;
  s.nodes = grid(1, 1, 1);
  QueueSpec a = queue("a", -1, 0, "");
  QueueSpec b = queue("b", -1, 0, "");
  a.weight = 3;
  s.queues = {a, b};
  JobView ja = gpu_job("ja", 1, 1);
  ja.queue = "a";
  JobView jb = gpu_job("jb", 2, 1);
  jb.queue = "b";
  s.waiting = {ja, jb};
  s.team_usage = {{"a", 200}, {"b", 100}};  // a used twice b's, but has three times the weight
  Plan plan = decide(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].job_id, "ja");
  s.team_usage = {{"a", 400}, {"b", 100}};
  plan = decide(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].job_id, "jb");
}

TEST(KilnPolicyTest, AStarvingJobGoesBeforeHigherPriorities) {
  Snapshot s;
  s.nodes = grid(1, 1, 1);
  s.now_s = 10000;
  JobView old = gpu_job("old", 1, 1, 8, 600);  // waited 9999 s > max(600, 600)
  JobView urgent = gpu_job("urgent", 9000, 1);
  urgent.submit_s = 9000;
  urgent.priority = 100;
  s.waiting = {urgent, old};
  Plan plan = decide(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].job_id, "old");
}

TEST(KilnPolicyTest, EveryWaitingJobIsExplainedWithItsPlaceInItsQueue) {
  Snapshot s;
  s.nodes = grid(1, 1, 2);
  s.nodes[1].state = NodeState::kCordoned;
  run_on(&s, gpu_job("r", 0, 1), {"n000"});
  s.waiting = {gpu_job("j1", 1, 1), gpu_job("j2", 2, 1), gpu_job("j3", 3, 2)};
  Plan plan = decide(s);
  EXPECT_EQ(plan.waiting["j1"].kind, "reserved");
  EXPECT_EQ(plan.waiting["j1"].position, 1);
  EXPECT_EQ(plan.waiting["j2"].kind, "behind");
  EXPECT_EQ(plan.waiting["j2"].position, 2);
  EXPECT_EQ(plan.waiting["j3"].position, 3);
  EXPECT_NE(plan.waiting["j3"].reason.find("1 matching node(s) cordoned or down"),
            std::string::npos)
      << plan.waiting["j3"].reason;
  for (const auto& [id, w] : plan.waiting)
    EXPECT_EQ(w.queue, "default");

  // A node cordoned under a 2-node job that would otherwise fit: "cordoned".
  Snapshot t;
  t.nodes = grid(1, 1, 2);
  t.nodes[1].state = NodeState::kCordoned;
  t.waiting = {gpu_job("pair", 1, 2)};
  plan = decide(t);
  EXPECT_EQ(plan.waiting["pair"].kind, "cordoned") << plan.waiting["pair"].reason;
}

TEST(KilnPolicyTest, ElasticJobsShrinkToHealthyNodesAndAvoidTheirLastCulprit) {
  Snapshot s;
  s.nodes = {gpu_node("a", "r0", "s0"), gpu_node("b", "r0", "s0"), gpu_node("c", "r1", "s0"),
             gpu_node("d", "r1", "s0")};
  s.nodes[1].state = NodeState::kDown;
  s.nodes[2].state = NodeState::kDown;
  s.nodes[3].state = NodeState::kSuspect;
  JobView e = gpu_job("e", 1, 2);
  e.min_nodes = 1;
  s.waiting = {e};
  Plan plan = decide(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].nodes, std::vector<std::string>{"a"});
  EXPECT_NE(plan.placements[0].why.find("shrunk from 2"), std::string::npos);
  // Not elastic: the suspect node is used rather than waiting forever.
  s.waiting = {gpu_job("f", 1, 2)};
  plan = decide(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].nodes, (std::vector<std::string>{"a", "d"}));

  Snapshot t;
  t.nodes = grid(1, 1, 3);
  JobView avoid = gpu_job("avoid", 1, 2);
  avoid.avoid = {"n000"};
  t.waiting = {avoid};
  plan = decide(t);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].nodes, (std::vector<std::string>{"n001", "n002"}));
}

TEST(KilnPolicyTest, GpuModelsAndSlotsAreHonoured) {
  Snapshot s;
  s.nodes = {gpu_node("a100", "r0", "s0", 8, "A100"), gpu_node("h100", "r0", "s0", 8, "H100")};
  JobView j = gpu_job("j", 1, 1);
  j.gpu_models = {"H100"};
  s.waiting = {j};
  Plan plan = decide(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].nodes, std::vector<std::string>{"h100"});
  for (NodeView& n : s.nodes)
    n.capacity.slots = 2;
  JobView ranks = gpu_job("ranks", 1, 2, 0);
  ranks.per_node.slots = 2;
  s.nodes[0].used.slots = 1;
  s.waiting = {ranks};
  plan = decide(s);
  EXPECT_TRUE(plan.placements.empty());
}

TEST(KilnPolicyTest, AJobsPreflightLevelIsAHardFilterThatSaysWhy) {
  Snapshot s;
  s.nodes = grid(1, 1, 4);
  for (NodeView& n : s.nodes)
    n.preflight_level = 1;  // quick passes
  s.nodes[1].preflight_level = 2;
  s.nodes[3].preflight_level = 2;
  JobView full = gpu_job("full", 1, 2);
  full.preflight_level = 2;
  s.waiting = {full};
  Plan plan = decide(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].nodes, (std::vector<std::string>{"n001", "n003"}));
  // One full node short: it waits, and says which nodes lack the level.
  s.nodes[3].preflight_level = 0;
  plan = decide(s);
  EXPECT_TRUE(plan.placements.empty());
  ASSERT_EQ(plan.waiting.count("full"), 1u);
  EXPECT_NE(
      plan.waiting["full"].reason.find("3 matching node(s) without a valid preflight pass at full"),
      std::string::npos)
      << plan.waiting["full"].reason;
  // A job of the same shape that asks no level is not held back by the one that failed
  // (the failure cache compares levels too).
  JobView plain = gpu_job("plain", 2, 2);
  s.waiting = {full, plain};
  plan = decide(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].job_id, "plain");
  // Passes come and go: a job is never refused at submit for want of one.
  std::string why;
  EXPECT_TRUE(fits_idle_cluster(full, s.nodes, &why)) << why;
}

TEST(KilnPolicyTest, AJobThatAsksFullIsReservedAndNotStarvedByBackfill) {
  // Two nodes with quick passes; one runs a job for 100 s more. The head job needs both at full:
  // it is reserved on them (the gate checks the reserved ones at full while they idle), and a
  // job behind it that would run past its start does not take the idle one.
  Snapshot s;
  s.nodes = grid(1, 1, 2);
  for (NodeView& n : s.nodes)
    n.preflight_level = 1;
  run_on(&s, gpu_job("running", 0, 1, 8, 100), {"n000"});
  JobView full = gpu_job("full", 1, 2);
  full.preflight_level = 2;
  JobView behind = gpu_job("behind", 2, 1, 8, 3600);
  s.waiting = {full, behind};
  Plan plan = decide(s);
  EXPECT_TRUE(plan.placements.empty()) << plan.placements[0].job_id;
  ASSERT_EQ(plan.waiting.count("behind"), 1u);
  // A short job that ends before the reservation's start still backfills.
  JobView quick = gpu_job("short", 3, 1, 8, 50);
  s.waiting = {full, quick};
  plan = decide(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].job_id, "short");
}

TEST(KilnPolicyTest, FitsIdleClusterRejectsJobsNoNodeCanEverHold) {
  const std::vector<NodeView> nodes = grid(1, 1, 2);
  std::string why;
  EXPECT_TRUE(fits_idle_cluster(gpu_job("ok", 1, 2), nodes, &why));
  EXPECT_FALSE(fits_idle_cluster(gpu_job("wide", 1, 3), nodes, &why));
  EXPECT_FALSE(fits_idle_cluster(gpu_job("fat", 1, 1, 16), nodes, &why));
  EXPECT_NE(why.find("16 GPU(s)"), std::string::npos) << why;
  EXPECT_NE(why.find("even when idle"), std::string::npos) << why;
  JobView h = gpu_job("h", 1, 1);
  h.gpu_models = {"H100"};
  EXPECT_FALSE(fits_idle_cluster(h, nodes, &why));
}

TEST(KilnPolicyTest, JobsWithoutATimeLimitCannotBackfillOntoAReservationOfUnknownStart) {
  Snapshot s;
  s.nodes = grid(1, 1, 2);
  run_on(&s, gpu_job("forever", 0, 1, 8, 0), {"n000"});  // no time limit
  s.waiting = {gpu_job("head", 1, 2, 8, 0), gpu_job("small", 2, 1, 8, 0),
               gpu_job("bounded", 3, 1, 8, 100)};
  Plan plan = decide(s);
  EXPECT_EQ(plan.waiting["head"].kind, "reserved");
  EXPECT_EQ(plan.waiting["head"].start_s, kNever);
  // n001 is the head's: neither a job without a limit nor one with a limit may take it, since
  // nobody knows when the head starts.
  EXPECT_TRUE(plan.placements.empty());
  EXPECT_EQ(plan.waiting["small"].kind, "behind");
}

TEST(KilnPolicyTest, AnElasticJobThatRequiresOneSwitchShrinksIntoTheLargest) {
  Snapshot s;
  s.nodes = grid(1, 2, 3);  // two switches of 3 nodes
  JobView j = gpu_job("elastic", 1, 6);
  j.min_nodes = 2;
  j.topology.same = DomainLevel::kSwitch;
  j.topology.required = true;
  s.waiting = {j};
  Plan plan = decide(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].nodes.size(), 3u);
  EXPECT_EQ(domains(s, plan.placements[0].nodes, 1).size(), 1u);
  // Avoiding a node changes where, never whether: with n000 avoided the switch that holds the
  // gang is still used when nothing else does.
  JobView strict = gpu_job("strict", 1, 3);
  strict.topology.same = DomainLevel::kSwitch;
  strict.topology.required = true;
  strict.avoid = {"n000"};
  run_on(&s, gpu_job("r", 0, 1), {"n010"});
  s.waiting = {strict};
  plan = decide(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].nodes, (std::vector<std::string>{"n000", "n001", "n002"}));
}

TEST(KilnPolicyTest, AJobThatStoppingJobsAlreadyMakeRoomForPreemptsNoMore) {
  Snapshot s;
  s.nodes = grid(1, 1, 3);
  s.now_s = 1000;
  JobView l1 = gpu_job("l1", 0, 1);
  l1.queue = "a";
  JobView l2 = gpu_job("l2", 0, 1);
  l2.queue = "a";
  JobView other = gpu_job("other", 0, 1);
  other.queue = "b";
  run_on(&s, l1, {"n000"});
  run_on(&s, l2, {"n001"});
  run_on(&s, other, {"n002"});
  s.running[0].stopping = true;  // preempted in an earlier cycle
  JobView head = gpu_job("head", 1, 3);
  head.queue = "b";
  head.priority = 20;  // first in order, blocked, holds the reservation
  JobView p = gpu_job("p", 2, 1);
  p.queue = "a";
  p.priority = 10;
  s.waiting = {head, p};
  Plan plan = decide(s);
  EXPECT_TRUE(plan.preemptions.empty());
  EXPECT_EQ(plan.waiting["p"].kind, "preempting");
}

TEST(KilnPolicyTest, WhatAPreemptionFreesGoesToTheJobItWasFor) {
  Snapshot s;
  s.nodes = grid(1, 1, 1);
  s.now_s = 1000;
  JobView victim = gpu_job("victim", 0, 1);
  victim.preempted_by = "p";  // requeued; its node is free now
  JobView p = gpu_job("p", 5, 1);
  p.priority = 10;
  JobView top = gpu_job("top", 1, 1);
  top.priority = 50;  // arrived in another queue meanwhile, higher priority
  top.queue = "other";
  s.waiting = {victim, top, p};
  Plan plan = decide(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].job_id, "p");
}

TEST(KilnPolicyTest, BehindTheReservationShorterJobsFillTheHolesFirst) {
  Snapshot s;
  s.nodes = grid(1, 1, 2);
  run_on(&s, gpu_job("r", 0, 1, 8, 1000), {"n000"});
  // head needs both nodes at t=1000; the hole on n001 takes one job that ends by then.
  s.waiting = {gpu_job("head", 1, 2, 8, 1000), gpu_job("longer", 2, 1, 8, 900),
               gpu_job("shorter", 3, 1, 8, 100)};
  Plan plan = decide(s);
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].job_id, "shorter");
  EXPECT_TRUE(plan.placements[0].backfilled);
  EXPECT_EQ(plan.waiting["longer"].kind, "behind");
}

}  // namespace
}  // namespace kiln::sched
