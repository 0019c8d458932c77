// The coordinator's state machines without processes: agents are played by the test (reports in,
// answers out), time by a FakeClock, state by a real SQLite file. What the process-level tests
// (tests/coordinator/) show with real ranks, these pin down case by case and without sleeping.
#include <kiln/sched/coordinator.h>

#include <gtest/gtest.h>

#include <filesystem>

#include <kiln/base/clock.h>
#include <kiln/sched/secret_box.h>

#include <algorithm>
#include <map>

namespace kiln::sched {
namespace {

constexpr int64_t kMs = 1'000'000;

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kiln-coordinator-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    open();
    for (int i = 0; i < 4; ++i)
      report(node(i));
  }
  void TearDown() override {
    coordinator_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  // (Re)opens the store and the coordinator on the same file: a coordinator restart.
  void open() {
    coordinator_.reset();
    store_.reset();
    Result<std::unique_ptr<StateStore>> s = StateStore::open((dir_ / "kiln.db").string(), &box_);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    store_ = std::move(*s);
    CoordinatorOptions o;
    o.store_address = "127.0.0.1:1";
    o.store_token = "t";
    o.kiln_binary = "/opt/kiln";
    o.node_timeout_ms = 5000;
    o.cordon_faults = 2;
    o.queues = queues_;
    o.preempt_grace_ms = 5000;
    o.preflight_level = preflight_level_;
    o.preflight_valid_ms = 60'000;
    KilnPolicyOptions policy;
    policy.preempt_min_runtime_s = 0;
    Result<std::unique_ptr<Coordinator>> c =
        Coordinator::open(o, store_.get(), make_kiln_policy(policy), &clock_, Logger());
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    coordinator_ = std::move(*c);
  }

  static std::string node(int i) { return "local-" + std::to_string(i); }

  AgentReport base_report(const std::string& name) {
    AgentReport r;
    r.node = name;
    r.labels = {{"rack", name == "local-0" || name == "local-1" ? "r0" : "r1"}};
    r.slots = 2;
    r.incarnation = incarnations_[name];
    // The gate asks agents at their endpoints (the tests hand in results instead).
    if (!preflight_level_.empty()) r.address = "http://" + name + ":9400";
    return r;
  }

  // A report with `ranks`; returns the answer.
  AgentAnswer report(const std::string& name, std::vector<RankReport> ranks = {}) {
    AgentReport r = base_report(name);
    r.ranks = std::move(ranks);
    Result<AgentAnswer> a = coordinator_->report(r);
    EXPECT_TRUE(a.ok()) << a.status().to_string();
    return a.ok() ? *a : AgentAnswer{};
  }

  static RankReport running(const RankAssignment& a, int64_t step = -1) {
    RankReport r;
    r.job_id = a.job_id;
    r.attempt = a.attempt;
    r.rank = a.rank;
    r.pid = 1000 + a.rank;
    r.running = true;
    r.step = step;
    r.step_ms = 100;
    r.progress_age_ms = 0;
    r.proc_state = 'S';
    return r;
  }

  // The rank ended with exit `code` at `step`; `by_agent`: the agent stopped it as told.
  static RankReport ended(const RankAssignment& a, int64_t step, int code, bool by_agent) {
    RankReport r = running(a, step);
    r.running = false;
    r.exited = true;
    r.code = code;
    r.stopped_by_agent = by_agent;
    return r;
  }

  JobSpec spec(int nodes = 2, int min_nodes = 0) {
    JobSpec s;
    s.name = "job";
    s.command = {"kiln", "train", "c.yaml"};
    s.nodes = nodes;
    s.min_nodes = min_nodes;
    s.checkpoint_dir = "ckpt";
    s.max_restarts = 2;
    s.restart_backoff_ms = 1000;
    s.progress_timeout_ms = 3000;
    s.env = {{"PLAIN", "p", false}, {"API_KEY", "secret-value", true}};
    return s;
  }

  std::string submit(JobSpec s) {
    Result<JobRecord> j = coordinator_->submit(admin_, std::move(s), "/work");
    EXPECT_TRUE(j.ok()) << j.status().to_string();
    return j.ok() ? j->id : "";
  }

  JobRecord job(const std::string& id) {
    Result<JobStatus> s = coordinator_->job(admin_, id);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return s.ok() ? s->record : JobRecord{};
  }

  std::vector<std::string> event_types(const std::string& id) {
    std::vector<std::string> out;
    Result<std::vector<EventRecord>> e = coordinator_->events(admin_, id, 0, 1000);
    EXPECT_TRUE(e.ok());
    for (const EventRecord& r : *e)
      out.push_back(r.type);
    return out;
  }

  // By value: a range-for over *coordinator_->nodes() would outlive the Result it points into.
  std::vector<NodeRecord> nodes() {
    Result<std::vector<NodeRecord>> n = coordinator_->nodes();
    EXPECT_TRUE(n.ok());
    return n.ok() ? *n : std::vector<NodeRecord>{};
  }

  EventRecord last_event(const std::string& id, const std::string& type) {
    Result<std::vector<EventRecord>> e = coordinator_->events(admin_, id, 0, 1000);
    EventRecord found;
    for (const EventRecord& r : *e)
      if (r.type == type) found = r;
    return found;
  }

  // Every node reports its assigned ranks as running (at `step`); returns the assignments.
  std::map<std::string, std::vector<RankAssignment>> run_all(int64_t step = -1) {
    std::map<std::string, std::vector<RankAssignment>> out;
    for (int i = 0; i < 4; ++i) {
      AgentAnswer a = report(node(i));
      std::vector<RankReport> ranks;
      for (const RankAssignment& r : a.ranks)
        if (!r.stop) ranks.push_back(running(r, step));
      report(node(i), ranks);
      out[node(i)] = a.ranks;
    }
    return out;
  }

  // A one-node job whose two attempts both die of SIGSEGV on the one node left uncordoned
  // (`*where`): with cordon_faults 2 that node is cordoned after faults.
  void fault_one_node_twice(std::string* id, std::string* where) {
    JobSpec s = spec(1);
    s.restart_backoff_ms = 0;
    *id = submit(s);
    *where = job(*id).nodes[0];
    // Only `where` takes work, so every attempt runs there.
    for (int i = 0; i < 4; ++i) {
      if (node(i) != *where) {
        ASSERT_TRUE(coordinator_->cordon(admin_, node(i), "test").ok());
      }
    }
    for (int attempt = 0; attempt < 2; ++attempt) {
      ASSERT_EQ(job(*id).state, "placed") << attempt;
      ASSERT_EQ(job(*id).nodes[0], *where);
      AgentAnswer a = report(*where);
      ASSERT_EQ(a.ranks.size(), 1u);
      RankReport r = running(a.ranks[0], 1);
      r.running = false;
      r.exited = false;
      r.code = 11;  // SIGSEGV: the node is suspected
      report(*where, {r});
      coordinator_->tick();
    }
  }

  std::filesystem::path dir_;
  SecretBox box_ = SecretBox::from_key_for_test(std::string(32, 'k'));
  FakeClock clock_{1'700'000'000'000'000'000};
  std::unique_ptr<StateStore> store_;
  std::unique_ptr<Coordinator> coordinator_;
  Caller admin_{"admin", "ops", true};
  std::vector<QueueSpec> queues_;
  std::string preflight_level_;                      // the gate; set before SetUp
  std::map<std::string, std::string> incarnations_;  // each node's agent, as it reports
};

// A preflight result as the gate's runner hands it in: every node in `fail` fails with one
// stack finding, the others pass; each answered by the agent that reports for it now.
preflight::PreflightReport preflight_of(const std::vector<std::string>& pass,
                                        const std::vector<std::string>& fail,
                                        const std::map<std::string, std::string>& agents) {
  preflight::PreflightReport r;
  for (const std::string& n : fail)
    r.findings.push_back({n, "environment.OMP_NUM_THREADS", "2", "3", "majority", "stack"});
  for (const auto* names : {&pass, &fail}) {
    for (const std::string& n : *names) {
      preflight::NodeVerdict v;
      v.node = n;
      v.verdict = names == &pass ? "pass" : "fail";
      v.failures = names == &pass ? 0 : 1;
      auto it = agents.find(n);
      v.agent = it == agents.end() ? "" : it->second;
      r.nodes.push_back(v);
    }
  }
  return r;
}

TEST_F(CoordinatorTest, ASubmittedJobIsPlacedAsAGangAndRuns) {
  const std::string id = submit(spec());
  JobRecord j = job(id);
  EXPECT_EQ(j.state, "placed");
  EXPECT_EQ(j.nodes, (std::vector<std::string>{"local-0", "local-1"}));
  auto assigned = run_all(0);
  ASSERT_EQ(assigned["local-0"].size(), 1u);
  const RankAssignment& a = assigned["local-1"][0];
  EXPECT_EQ(a.rank, 1);
  EXPECT_EQ(a.argv,
            (std::vector<std::string>{"/opt/kiln", "train", "c.yaml", "--ckpt-dir", "/work/ckpt"}));
  EXPECT_EQ(a.env.at("KILN_RANK"), "1");
  EXPECT_EQ(a.env.at("KILN_WORLD_SIZE"), "2");
  EXPECT_EQ(a.env.at("KILN_JOB_ID"), id);
  EXPECT_EQ(a.env.at("KILN_HOST"), "local-1");
  EXPECT_EQ(a.env.at("API_KEY"), "secret-value");  // agents get the value; nothing else does
  EXPECT_EQ(job(id).state, "running");
  EXPECT_EQ(event_types(id), (std::vector<std::string>{"queued", "admitted", "placed", "running"}));
}

TEST_F(CoordinatorTest, AKilledRankIsTheCulpritAndTheJobRestartsElsewhereAfterItsBackoff) {
  const std::string id = submit(spec());
  auto assigned = run_all(3);
  // Rank 0 exits 1 first (its collective failed), naming rank 1 from its flight recorder.
  RankReport r0 = running(assigned["local-0"][0], 3);
  r0.running = false;
  r0.exited = true;
  r0.code = 1;
  r0.culprit_rank = 1;
  r0.describe = "rank 0 exited with code 1";
  report("local-0", {r0});
  EventRecord fault = last_event(id, "fault");
  EXPECT_EQ(fault.detail["cause"], "rank_exit");
  EXPECT_EQ(fault.detail["rank"], 1);
  EXPECT_EQ(fault.detail["node"], "local-1");
  EXPECT_EQ(fault.detail["blame"], "node");
  EXPECT_EQ(job(id).state, "stopping");
  // Every other rank is told to stop.
  AgentAnswer a = report("local-1", {running(assigned["local-1"][0], 3)});
  ASSERT_EQ(a.ranks.size(), 1u);
  EXPECT_TRUE(a.ranks[0].stop);
  RankReport r1 = running(assigned["local-1"][0], 3);
  r1.running = false;
  r1.exited = false;
  r1.code = 9;
  report("local-1", {r1});
  EXPECT_EQ(job(id).state, "restarting");
  EXPECT_EQ(job(id).attempt, 1);
  // Not before the backoff.
  coordinator_->tick();
  EXPECT_EQ(job(id).state, "restarting");
  clock_.advance_ns(1100 * kMs);
  for (int i = 0; i < 4; ++i)
    report(node(i));  // the nodes keep reporting (no rank any more)
  coordinator_->tick();
  JobRecord j = job(id);
  EXPECT_EQ(j.state, "placed");
  // local-1 is suspect and avoided: the gang moves to rack r1.
  EXPECT_EQ(j.nodes, (std::vector<std::string>{"local-2", "local-3"}));
  // `kiln logs` finds each attempt's ranks where that attempt ran.
  EXPECT_EQ(*coordinator_->node_of_rank(admin_, id, 1), "local-3");
  EXPECT_EQ(*coordinator_->node_of_rank(admin_, id, 1, 0), "local-1");
  EXPECT_TRUE(coordinator_->node_of_rank(admin_, id, 1, 7).status().is_not_found());
  EXPECT_EQ(nodes()[1].state, "suspect");
}

TEST_F(CoordinatorTest, AProgramErrorDoesNotMakeItsNodeSuspectAndTheBudgetEndsInFailed) {
  JobSpec s = spec();
  s.max_restarts = 1;
  s.restart_backoff_ms = 0;
  const std::string id = submit(s);
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto assigned = run_all(0);
    for (auto& [name, ranks] : assigned) {
      for (const RankAssignment& a : ranks) {
        RankReport r = running(a, 0);
        r.running = false;
        r.exited = true;
        r.code = 2;
        report(name, {r});
      }
    }
    // No peer's report explains the exits: after the settle time they are the program's.
    coordinator_->tick();
    EXPECT_EQ(job(id).state, "running");
    clock_.advance_ns(1100 * kMs);
    coordinator_->tick();
  }
  JobRecord j = job(id);
  EXPECT_EQ(j.state, "failed");
  EXPECT_NE(j.reason.find("restart budget spent (1 of 1)"), std::string::npos) << j.reason;
  EXPECT_EQ(last_event(id, "fault").detail["blame"], "job");
  for (const NodeRecord& n : nodes())
    EXPECT_EQ(n.state, "ready") << n.name;
}

TEST_F(CoordinatorTest, AnErrorExitWaitsForThePeerDeathThatExplainsIt) {
  const std::string id = submit(spec());
  auto assigned = run_all(3);
  // Rank 0's collective failed and it exited 1 with no flight dump; rank 1's SIGKILL is reported
  // a moment later through its own agent. The culprit is rank 1 and its node, not rank 0.
  RankReport r0 = running(assigned["local-0"][0], 3);
  r0.running = false;
  r0.exited = true;
  r0.code = 1;
  report("local-0", {r0});
  EXPECT_EQ(job(id).state, "running");  // waiting for an explanation
  clock_.advance_ns(200 * kMs);
  RankReport r1 = running(assigned["local-1"][0], 3);
  r1.running = false;
  r1.exited = false;
  r1.code = 9;
  report("local-1", {r1});
  EventRecord fault = last_event(id, "fault");
  EXPECT_EQ(fault.detail["rank"], 1);
  EXPECT_EQ(fault.detail["node"], "local-1");
  EXPECT_EQ(fault.detail["blame"], "node");
  EXPECT_EQ(job(id).state, "restarting");  // both ranks have ended: the stop is over at once
  clock_.advance_ns(2000 * kMs);
  coordinator_->tick();  // the settled exit does not fault a second time
  int faults = 0;
  for (const std::string& t : event_types(id))
    faults += t == "fault";
  EXPECT_EQ(faults, 1);
}

TEST_F(CoordinatorTest, AStalledStepCounterIsAHangBlamingTheStoppedRank) {
  const std::string id = submit(spec());
  auto assigned = run_all(5);
  clock_.advance_ns(2000 * kMs);
  // Rank 0 still moves; rank 1 is stopped by the kernel and reports no new step.
  RankReport r0 = running(assigned["local-0"][0], 6);
  report("local-0", {r0});
  RankReport r1 = running(assigned["local-1"][0], 5);
  r1.proc_state = 'T';
  r1.progress_age_ms = 2000;
  report("local-1", {r1});
  coordinator_->tick();
  EXPECT_EQ(job(id).state, "running");  // 2 s < the 3 s timeout
  clock_.advance_ns(1500 * kMs);
  report("local-0", {running(assigned["local-0"][0], 6)});
  report("local-1", {r1});
  coordinator_->tick();
  EventRecord fault = last_event(id, "fault");
  EXPECT_EQ(fault.detail["cause"], "hung");
  EXPECT_EQ(fault.detail["rank"], 1);
  EXPECT_NE(fault.detail["message"].get<std::string>().find("SIGSTOP"), std::string::npos);
}

TEST_F(CoordinatorTest, ASilentNodeIsDownAndItsJobRestartsShrunk) {
  JobSpec s = spec(2, 1);
  s.progress_timeout_ms = 60000;  // the node timeout (5 s) decides here
  const std::string id = submit(s);
  run_all(2);
  // local-1 goes silent; the others keep reporting.
  for (int t = 0; t < 6; ++t) {
    clock_.advance_ns(1000 * kMs);
    for (int i : {0, 2, 3})
      report(node(i));
    coordinator_->tick();
  }
  EXPECT_EQ(nodes()[1].state, "down");
  EXPECT_EQ(last_event(id, "fault").detail["cause"], "node_lost");
  // local-0's rank ends on its stop; local-1's is gone with its node.
  AgentAnswer a = report("local-0");
  ASSERT_EQ(a.ranks.size(), 1u);
  EXPECT_TRUE(a.ranks[0].stop);
  RankReport r0 = running(a.ranks[0]);
  r0.running = false;
  r0.exited = true;
  r0.code = 75;
  r0.stopped_by_agent = true;
  report("local-0", {r0});
  EXPECT_EQ(job(id).state, "restarting");
  // Cordon two more: one healthy node is left, and min_nodes 1 lets the job shrink onto it.
  ASSERT_TRUE(coordinator_->cordon(admin_, "local-2", "test").ok());
  ASSERT_TRUE(coordinator_->cordon(admin_, "local-3", "test").ok());
  clock_.advance_ns(1100 * kMs);
  report("local-0");
  coordinator_->tick();
  JobRecord j = job(id);
  EXPECT_EQ(j.state, "placed");
  EXPECT_EQ(j.nodes, (std::vector<std::string>{"local-0"}));
  EXPECT_NE(last_event(id, "placed").detail["why"].get<std::string>().find("shrunk from 2"),
            std::string::npos);
}

TEST_F(CoordinatorTest, RepeatedFaultsCordonANodeAndUncordonReadmitsIt) {
  std::string id, where;
  fault_one_node_twice(&id, &where);
  if (HasFatalFailure()) return;
  NodeRecord culprit;
  for (const NodeRecord& n : nodes())
    if (n.name == where) culprit = n;
  EXPECT_EQ(culprit.state, "cordoned");
  EXPECT_NE(culprit.reason.find("2 faults within"), std::string::npos) << culprit.reason;
  // Nowhere to run: the job waits, saying why.
  JobRecord j = job(id);
  EXPECT_EQ(j.state, "restarting");
  Result<JobStatus> st = coordinator_->job(admin_, id);
  EXPECT_NE(st->waiting.find("cordoned"), std::string::npos) << st->waiting;
  // Without the preflight gate an operator readmits it (GateTest has the rule with the gate).
  Result<NodeRecord> back = coordinator_->uncordon(admin_, where);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->state, "ready");
  EXPECT_EQ(job(id).state, "placed");  // readmitted: the job runs there again
}

TEST_F(CoordinatorTest, ARestartedCoordinatorKeepsJobsNodesAndEventsAndStopsNothing) {
  const std::string id = submit(spec());
  auto assigned = run_all(4);
  const std::vector<std::string> before = event_types(id);
  open();  // the restart: a new coordinator on the same SQLite file
  EXPECT_EQ(job(id).state, "running");
  EXPECT_EQ(event_types(id), before);
  EXPECT_EQ(nodes().size(), 4u);
  // The agents report their ranks again and are told to keep them: nothing stops.
  AgentAnswer a = report("local-0", {running(assigned["local-0"][0], 5)});
  ASSERT_EQ(a.ranks.size(), 1u);
  EXPECT_FALSE(a.ranks[0].stop);
  EXPECT_EQ(a.ranks[0].env.at("API_KEY"), "secret-value");  // unsealed from SQLite
  // A node that was silent before the restart gets a whole node timeout from the restart.
  clock_.advance_ns(4000 * kMs);
  coordinator_->tick();
  for (const NodeRecord& n : nodes())
    EXPECT_NE(n.state, "down") << n.name;
}

TEST_F(CoordinatorTest, TeamsSeeOnlyTheirJobsAndSpecsAreCheckedAgainstTheCluster) {
  Caller alice{"alice", "vision", false};
  Caller bob{"bob", "speech", false};
  Result<JobRecord> j = coordinator_->submit(alice, spec(), "/work");
  ASSERT_TRUE(j.ok());
  EXPECT_TRUE(coordinator_->job(alice, j->id).ok());
  EXPECT_TRUE(coordinator_->job(bob, j->id).status().is_not_found());
  EXPECT_TRUE(coordinator_->cancel(bob, j->id).status().is_not_found());
  EXPECT_TRUE(coordinator_->jobs(bob)->empty());
  Result<JobRecord> big = coordinator_->submit(alice, spec(5), "/work");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("cluster has 4"), std::string::npos);
  EXPECT_FALSE(coordinator_->submit(alice, spec(), "relative").ok());
}

TEST_F(CoordinatorTest, CancelStopsTheRanksAndEndsCancelled) {
  const std::string id = submit(spec());
  auto assigned = run_all(1);
  ASSERT_TRUE(coordinator_->cancel(admin_, id).ok());
  EXPECT_EQ(job(id).state, "stopping");
  for (auto& [name, ranks] : assigned) {
    if (ranks.empty()) continue;
    AgentAnswer a = report(name);
    ASSERT_EQ(a.ranks.size(), 1u);
    EXPECT_TRUE(a.ranks[0].stop);
    report(name, {ended(ranks[0], 1, 75, true)});
  }
  EXPECT_EQ(job(id).state, "cancelled");
  EXPECT_TRUE(report("local-0").ranks.empty());
}

TEST_F(CoordinatorTest, SubmitChecksTheQueueItsTeamAndThatTheJobCanEverFit) {
  QueueSpec research;
  research.name = "research";
  research.team = "research";
  QueueSpec ops;
  ops.name = "ops";
  ops.team = "ops";
  queues_ = {research, ops};
  open();
  for (int i = 0; i < 4; ++i)
    report(node(i));  // capacities are judged once this coordinator has heard them
  const Caller alice{"alice", "research", false};
  JobSpec s = spec();
  s.queue = "ops";
  Result<JobRecord> r = coordinator_->submit(alice, s, "/work");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("belongs to team ops, not research"), std::string::npos)
      << r.status().message();
  s.queue = "nope";
  r = coordinator_->submit(alice, s, "/work");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("queues are: research, ops"), std::string::npos)
      << r.status().message();
  s.queue = "research";
  s.resources.gpus = 1;  // the nodes have none
  r = coordinator_->submit(alice, s, "/work");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("can never run here"), std::string::npos)
      << r.status().message();
  s.resources.gpus = 0;
  EXPECT_TRUE(coordinator_->submit(alice, s, "/work").ok());
  s.queue = "ops";
  EXPECT_TRUE(coordinator_->submit(admin_, s, "/work").ok());  // an admin may use any queue
}

TEST_F(CoordinatorTest, AHigherPriorityJobPreemptsAndTheVictimIsRequeuedWithoutARestart) {
  JobSpec low = spec(4);
  low.ranks_per_node = 2;  // every slot of the cluster
  const std::string victim = submit(low);
  auto assigned = run_all(3);
  EXPECT_EQ(job(victim).state, "running");
  JobSpec high = spec(2);
  high.name = "urgent";
  high.priority = 10;
  const std::string urgent = submit(high);
  EXPECT_EQ(job(victim).state, "stopping");
  EXPECT_EQ(job(urgent).state, "queued");
  Result<JobStatus> waiting = coordinator_->job(admin_, urgent);
  ASSERT_TRUE(waiting.ok());
  EXPECT_EQ(waiting->waiting_kind, "preempting");
  EXPECT_EQ(waiting->queue_position, 1);
  EventRecord preempted = last_event(victim, "preempted");
  EXPECT_EQ(preempted.detail["by"], urgent);
  EXPECT_EQ(preempted.detail["grace_ms"], 5000);
  // The victim's ranks are told to stop with the preemption's grace; they exit 75.
  for (auto& [name, ranks] : assigned) {
    AgentAnswer a = report(name);
    ASSERT_EQ(a.ranks.size(), 2u);
    std::vector<RankReport> stopped;
    for (const RankAssignment& assignment : a.ranks) {
      EXPECT_TRUE(assignment.stop);
      EXPECT_EQ(assignment.grace_ms, 5000);
      stopped.push_back(ended(assignment, 3, 75, true));
    }
    report(name, stopped);
  }
  coordinator_->tick();
  const JobRecord v = job(victim);
  EXPECT_EQ(v.state, "queued");
  EXPECT_EQ(v.attempt, 1);
  EXPECT_EQ(v.restarts, 0);
  EXPECT_EQ(job(urgent).state, "placed");
  const std::vector<std::string> types = event_types(victim);
  EXPECT_EQ(std::vector<std::string>(types.end() - 4, types.end()),
            (std::vector<std::string>{"preempted", "stopping", "requeued", "queued"}));
}

TEST_F(CoordinatorTest, AJobPastItsTimeLimitIsStoppedAndFails) {
  JobSpec s = spec(1);
  s.time_limit_ms = 2000;
  const std::string id = submit(s);
  auto assigned = run_all(1);
  clock_.advance_ns(1500 * kMs);
  coordinator_->tick();
  EXPECT_EQ(job(id).state, "running");
  clock_.advance_ns(1000 * kMs);
  coordinator_->tick();
  EXPECT_EQ(job(id).state, "stopping");
  for (auto& [name, ranks] : assigned) {
    if (ranks.empty()) continue;
    report(name, {ended(ranks[0], 1, 75, true)});
  }
  coordinator_->tick();
  const JobRecord j = job(id);
  EXPECT_EQ(j.state, "failed");
  EXPECT_NE(j.reason.find("time limit reached"), std::string::npos) << j.reason;
}

TEST_F(CoordinatorTest, APreemptedJobWhoseRanksAllFinishInTheGraceSucceeds) {
  JobSpec low = spec(4);
  low.ranks_per_node = 2;
  const std::string victim = submit(low);
  run_all(3);
  JobSpec high = spec(2);
  high.name = "urgent";
  high.priority = 10;
  submit(high);
  ASSERT_EQ(job(victim).state, "stopping");
  for (int i = 0; i < 4; ++i) {
    AgentAnswer a = report(node(i));
    std::vector<RankReport> stopped;
    for (const RankAssignment& assignment : a.ranks) {
      if (assignment.job_id != victim) continue;
      stopped.push_back(ended(assignment, 3, 0, false));  // it had just finished its last step
    }
    report(node(i), stopped);
  }
  coordinator_->tick();
  EXPECT_EQ(job(victim).state, "succeeded");
}

// --- the preflight gate ---------------------------------------------------------------------

class GateTest : public CoordinatorTest {
 protected:
  void SetUp() override {
    preflight_level_ = "quick";
    for (int i = 0; i < 4; ++i)
      incarnations_[node(i)] = "100" + std::to_string(i) + ".1";
    CoordinatorTest::SetUp();
  }
  std::vector<std::string> due_names() {
    std::vector<std::string> out;
    for (const NodeRecord& n : coordinator_->preflight_due(30'000))
      out.push_back(n.name);
    return out;
  }
  NodeRecord node_record(const std::string& name) {
    for (const NodeRecord& n : nodes())
      if (n.name == name) return n;
    return NodeRecord{};
  }
};

TEST_F(GateTest, NoJobIsPlacedOnANodeBeforeItPassesAndTheJobSaysSo) {
  const std::string id = submit(spec(2));
  EXPECT_EQ(job(id).state, "queued");
  Result<JobStatus> st = coordinator_->job(admin_, id);
  EXPECT_NE(st->waiting.find("4 node(s) await preflight (quick): local-0, local-1, local-2, "
                             "local-3"),
            std::string::npos)
      << st->waiting;
  EXPECT_EQ(due_names(), (std::vector<std::string>{"local-0", "local-1", "local-2", "local-3"}));
  ASSERT_TRUE(
      coordinator_
          ->record_preflight(preflight_of({"local-2", "local-3"}, {}, incarnations_), "quick")
          .ok());
  EXPECT_EQ(job(id).state, "placed");
  EXPECT_EQ(job(id).nodes, (std::vector<std::string>{"local-2", "local-3"}));
  EXPECT_EQ(due_names(), (std::vector<std::string>{"local-0", "local-1"}));
  const NodeRecord n2 = node_record("local-2");
  EXPECT_EQ(n2.preflight.level, "quick");
  EXPECT_TRUE(n2.preflight.passed);
  EXPECT_EQ(n2.preflight.checked_ns, clock_.wall_ns());
}

TEST_F(GateTest, AJobThatAsksFullRunsOnlyOnNodesThatPassedFull) {
  ASSERT_TRUE(coordinator_
                  ->record_preflight(
                      preflight_of({"local-0", "local-1", "local-2", "local-3"}, {}, incarnations_),
                      "quick")
                  .ok());
  EXPECT_EQ(coordinator_->preflight_level(), "quick");
  EXPECT_TRUE(due_names().empty());
  JobSpec full = spec(2);
  full.preflight = PreflightLevel::kFull;
  const std::string id = submit(full);
  // Quick passes do not admit it; the runner checks the idle nodes at full now.
  EXPECT_EQ(job(id).state, "queued");
  Result<JobStatus> st = coordinator_->job(admin_, id);
  EXPECT_NE(st->waiting.find("4 matching node(s) without a valid preflight pass at full (the "
                             "job's `preflight:`)"),
            std::string::npos)
      << st->waiting;
  EXPECT_EQ(coordinator_->preflight_level(), "full");
  EXPECT_EQ(due_names(), (std::vector<std::string>{"local-0", "local-1", "local-2", "local-3"}));
  // A job that asks nothing still runs on quick passes meanwhile.
  const std::string plain = submit(spec(1));
  EXPECT_EQ(job(plain).state, "placed");
  ASSERT_EQ(job(plain).nodes.size(), 1u);
  std::vector<std::string> idle;
  for (const char* n : {"local-0", "local-1", "local-2", "local-3"})
    if (n != job(plain).nodes[0] && idle.size() < 2) idle.push_back(n);
  ASSERT_TRUE(coordinator_->record_preflight(preflight_of(idle, {}, incarnations_), "full").ok());
  EXPECT_EQ(job(id).state, "placed");
  EXPECT_EQ(job(id).nodes, idle);
  // Nothing waits for full any more: the gate's own level again.
  EXPECT_EQ(coordinator_->preflight_level(), "quick");
}

TEST_F(CoordinatorTest, AJobThatAsksPreflightIsRefusedWhereNothingChecksNodes) {
  JobSpec s = spec(1);
  s.preflight = PreflightLevel::kQuick;
  Result<JobRecord> j = coordinator_->submit(admin_, s, "/work");
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("asks preflight: quick, but this coordinator runs no "
                                      "preflight gate (kiln serve --preflight off)"),
            std::string::npos)
      << j.status().to_string();
}

TEST_F(GateTest, AFailingNodeIsCordonedWithItsFindingsAndTheJobRunsOnTheConsistentOnes) {
  ASSERT_TRUE(
      coordinator_
          ->record_preflight(
              preflight_of({"local-0", "local-2", "local-3"}, {"local-1"}, incarnations_), "quick")
          .ok());
  const NodeRecord odd = node_record("local-1");
  EXPECT_EQ(odd.state, "cordoned");
  EXPECT_EQ(odd.reason,
            "preflight quick: stack environment.OMP_NUM_THREADS: expected 2, found 3 (majority)");
  EXPECT_FALSE(odd.preflight.passed);
  EXPECT_EQ(odd.preflight.summary,
            "stack environment.OMP_NUM_THREADS: expected 2, found 3 (majority)");
  // A three-node job runs on the three consistent nodes, never across the odd one.
  const std::string id = submit(spec(3));
  EXPECT_EQ(job(id).state, "placed");
  EXPECT_EQ(job(id).nodes, (std::vector<std::string>{"local-0", "local-2", "local-3"}));
  // Failed: checked again only after the retry interval.
  EXPECT_TRUE(due_names().empty());
  clock_.advance_ns(31'000 * kMs);
  for (int i = 0; i < 4; ++i)
    report(node(i));
  EXPECT_EQ(due_names(), (std::vector<std::string>{"local-1"}));
  // Fixed: it passes and is ready again, with no fault held against it.
  ASSERT_TRUE(
      coordinator_->record_preflight(preflight_of({"local-1"}, {}, incarnations_), "quick").ok());
  EXPECT_EQ(node_record("local-1").state, "ready");
  EXPECT_EQ(node_record("local-1").reason, "");
  // A cordon by an operator is not preflight's to lift.
  ASSERT_TRUE(coordinator_->cordon(admin_, "local-1", "bad fan").ok());
  ASSERT_TRUE(
      coordinator_->record_preflight(preflight_of({"local-1"}, {}, incarnations_), "quick").ok());
  EXPECT_EQ(node_record("local-1").state, "cordoned");
  EXPECT_EQ(node_record("local-1").reason, "bad fan (by admin)");
}

TEST_F(GateTest, ARestartedAgentAndAnExpiredPassAreCheckedAgainBeforeAnyPlacement) {
  ASSERT_TRUE(coordinator_
                  ->record_preflight(
                      preflight_of({"local-0", "local-1", "local-2", "local-3"}, {}, incarnations_),
                      "quick")
                  .ok());
  EXPECT_TRUE(due_names().empty());
  // local-0's agent restarts (perhaps another build): its pass was the old agent's.
  incarnations_["local-0"] = "2000.2";
  report("local-0");
  EXPECT_EQ(due_names(), (std::vector<std::string>{"local-0"}));
  const std::string id = submit(spec(4));
  EXPECT_EQ(job(id).state, "queued");
  Result<JobStatus> st = coordinator_->job(admin_, id);
  EXPECT_NE(st->waiting.find("1 node(s) await preflight (quick): local-0"), std::string::npos)
      << st->waiting;
  ASSERT_TRUE(
      coordinator_->record_preflight(preflight_of({"local-0"}, {}, incarnations_), "quick").ok());
  EXPECT_EQ(job(id).state, "placed");
  ASSERT_TRUE(coordinator_->cancel(admin_, id).ok());
  for (int i = 0; i < 4; ++i) {  // its ranks stop as told: the nodes are idle again
    std::vector<RankReport> stopped;
    for (const RankAssignment& a : report(node(i)).ranks)
      stopped.push_back(ended(a, -1, 75, true));
    report(node(i), stopped);
  }
  coordinator_->tick();
  ASSERT_EQ(job(id).state, "cancelled");
  // Nine tenths of the validity on: due again; past it, no new placement.
  clock_.advance_ns(55'000 * kMs);
  for (int i = 0; i < 4; ++i)
    report(node(i));
  EXPECT_EQ(due_names().size(), 4u);
  clock_.advance_ns(10'000 * kMs);
  const std::string next = submit(spec(1));
  for (int i = 0; i < 4; ++i)
    report(node(i));
  coordinator_->tick();
  EXPECT_EQ(job(next).state, "queued");
  EXPECT_NE(coordinator_->job(admin_, next)->waiting.find("4 node(s) await preflight"),
            std::string::npos)
      << coordinator_->job(admin_, next)->waiting;
}

TEST_F(GateTest, ACoordinatorRestartKeepsResultsAndWaitsForTheAgentsToReport) {
  ASSERT_TRUE(coordinator_
                  ->record_preflight(
                      preflight_of({"local-0", "local-1"}, {"local-2"}, incarnations_), "quick")
                  .ok());
  open();
  EXPECT_EQ(node_record("local-2").state, "cordoned");
  EXPECT_TRUE(node_record("local-0").preflight.passed);
  // Which agent runs on a node is unknown until it reports: nothing is placed before.
  const std::string id = submit(spec(1));
  EXPECT_EQ(job(id).state, "queued");
  report("local-1");
  coordinator_->tick();
  EXPECT_EQ(job(id).state, "placed");
  EXPECT_EQ(job(id).nodes, (std::vector<std::string>{"local-1"}));
}

TEST_F(GateTest, ACordonAfterFaultsIsLiftedOnlyAfterAFullPassSinceIt) {
  ASSERT_TRUE(
      coordinator_
          ->record_preflight(preflight_of({node(0), node(1), node(2), node(3)}, {}, incarnations_),
                             "quick")
          .ok());
  std::string id, where;
  fault_one_node_twice(&id, &where);
  if (HasFatalFailure()) return;
  ASSERT_EQ(node_record(where).state, "cordoned");
  Result<NodeRecord> refused = coordinator_->uncordon(admin_, where);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(refused.status().is_aborted()) << refused.status().to_string();
  EXPECT_NE(refused.status().message().find("kiln preflight --nodes " + where + " --level full"),
            std::string::npos)
      << refused.status().message();
  ASSERT_TRUE(
      coordinator_->record_preflight(preflight_of({where}, {}, incarnations_), "quick").ok());
  refused = coordinator_->uncordon(admin_, where);
  ASSERT_FALSE(refused.ok()) << "a quick pass is not enough";
  EXPECT_NE(refused.status().message().find("at level quick, passed"), std::string::npos)
      << refused.status().message();
  EXPECT_EQ(node_record(where).state, "cordoned") << "preflight does not lift a fault cordon";
  ASSERT_TRUE(
      coordinator_->record_preflight(preflight_of({}, {where}, incarnations_), "full").ok());
  EXPECT_FALSE(coordinator_->uncordon(admin_, where).ok()) << "a failed full is not enough";
  ASSERT_TRUE(
      coordinator_->record_preflight(preflight_of({where}, {}, incarnations_), "full").ok());
  Result<NodeRecord> back = coordinator_->uncordon(admin_, where);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->state, "ready");
}

TEST_F(GateTest, AQuickPassDoesNotLiftAFullCordonAndOperatorsCannotForgeOne) {
  ASSERT_TRUE(coordinator_
                  ->record_preflight(
                      preflight_of({node(0), node(1), node(2)}, {node(3)}, incarnations_), "full")
                  .ok());
  ASSERT_EQ(node_record(node(3)).state, "cordoned");
  EXPECT_EQ(preflight_cordon_level(node_record(node(3))), "full");
  ASSERT_TRUE(
      coordinator_->record_preflight(preflight_of({node(3)}, {}, incarnations_), "quick").ok());
  EXPECT_EQ(node_record(node(3)).state, "cordoned") << "quick says nothing of the links";
  ASSERT_TRUE(
      coordinator_->record_preflight(preflight_of({node(3)}, {}, incarnations_), "full").ok());
  EXPECT_EQ(node_record(node(3)).state, "ready");
  // The prefix marks preflight's own cordons: an operator may not use it.
  Result<NodeRecord> forged = coordinator_->cordon(admin_, node(2), "preflight maintenance");
  ASSERT_FALSE(forged.ok());
  EXPECT_NE(forged.status().message().find("may not start with 'preflight '"), std::string::npos);
}

TEST_F(GateTest, AnUnreachableAgentIsAskedAgainOnlyAfterTheRetryInterval) {
  preflight::PreflightReport r;
  preflight::NodeVerdict v;
  v.node = node(1);
  v.verdict = "unreachable";
  v.error = "connection refused";
  r.nodes.push_back(v);
  ASSERT_TRUE(coordinator_->record_preflight(r, "quick").ok());
  std::vector<std::string> due = due_names();
  EXPECT_EQ(std::count(due.begin(), due.end(), node(1)), 0) << "not every second";
  EXPECT_EQ(due.size(), 3u);
  EXPECT_TRUE(node_record(node(1)).preflight.level.empty()) << "nothing learned, nothing recorded";
  clock_.advance_ns(31'000 * kMs);
  for (int i = 0; i < 4; ++i)
    report(node(i));
  due = due_names();
  EXPECT_EQ(std::count(due.begin(), due.end(), node(1)), 1);
}

TEST_F(GateTest, ABusyNodesExpiringPassIsRenewedOnlyWhenItIsIdle) {
  ASSERT_TRUE(
      coordinator_
          ->record_preflight(preflight_of({node(0), node(1), node(2), node(3)}, {}, incarnations_),
                             "quick")
          .ok());
  const std::string id = submit(spec(2));
  ASSERT_EQ(job(id).state, "placed");
  clock_.advance_ns(55'000 * kMs);  // past nine tenths of the 60 s validity
  for (int i = 0; i < 4; ++i)
    report(node(i));
  const std::vector<std::string> due = due_names();
  EXPECT_EQ(due, (std::vector<std::string>{"local-2", "local-3"})) << "local-0, local-1 run it";
  const std::vector<NodeRecord> partners = coordinator_->preflight_partners({"local-2"}, 3);
  ASSERT_EQ(partners.size(), 1u);
  EXPECT_EQ(partners[0].name, "local-3");
}

}  // namespace
}  // namespace kiln::sched
