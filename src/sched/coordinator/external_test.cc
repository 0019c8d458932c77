// The coordinator under an external resource manager (Slurm): the executor is played by the test
// (intents out, reports in), agents inside allocations too, time by a FakeClock, state by a real
// SQLite file. tests/slurm/ shows the same against a real Slurm.
#include <kiln/sched/coordinator.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include <kiln/base/clock.h>
#include <kiln/sched/secret_box.h>

namespace kiln::sched {
namespace {

constexpr int64_t kMs = 1'000'000;

class ExternalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kiln-external-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    open();
    for (int i = 1; i <= 4; ++i)
      cluster_.push_back(slurm_node("n" + std::to_string(i)));
    ASSERT_TRUE(coordinator_->executor_report(report()).ok());
  }
  void TearDown() override {
    coordinator_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

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
    o.executor = "slurm";
    o.manager_places = manager_places_;
    Result<std::unique_ptr<Coordinator>> c =
        Coordinator::open(o, store_.get(), make_kiln_policy({}), &clock_, Logger());
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    coordinator_ = std::move(*c);
  }

  static ExternalNode slurm_node(const std::string& name) {
    ExternalNode n;
    n.name = name;
    n.cpus = 2;
    n.partition = "debug";
    return n;
  }

  // What the executor would report now: the cluster, and `allocations_` as Slurm holds them.
  ExecutorReport report() {
    ExecutorReport r;
    r.nodes = cluster_;
    for (const auto& [key, a] : allocations_)
      r.allocations.push_back(a);
    return r;
  }

  // One executor round: take the intent, "submit" what is new (Slurm ids from 100), report.
  ExecutorIntent round() {
    ExecutorIntent intent = coordinator_->executor_intent("kiln");
    ExecutorReport r = report();
    for (const AllocationIntent& a : intent.allocations) {
      auto key = std::make_pair(a.job_id, a.attempt);
      if (allocations_.count(key) != 0) continue;
      ExternalAllocation s;
      s.job_id = a.job_id;
      s.attempt = a.attempt;
      s.id = std::to_string(next_id_++);
      s.state = "PENDING";
      s.nodes = a.nodes;
      allocations_[key] = s;
      r.submitted.push_back(s);
    }
    EXPECT_TRUE(coordinator_->executor_report(r).ok());
    return intent;
  }

  void slurm_state(const std::string& job, int attempt, const std::string& state) {
    ExternalAllocation& a = allocations_.at({job, attempt});
    a.state = state;
    a.ended = state != "PENDING" && state != "RUNNING";
  }

  JobSpec spec(int nodes = 2) {
    JobSpec s;
    s.name = "job";
    s.command = {"kiln", "train", "c.yaml"};
    s.nodes = nodes;
    s.max_restarts = 2;
    s.restart_backoff_ms = 1000;
    s.start_timeout_ms = 10000;
    s.progress_timeout_ms = 3000;
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

  EventRecord last_event(const std::string& id, const std::string& type) {
    Result<std::vector<EventRecord>> e = coordinator_->events(admin_, id, 0, 1000);
    EventRecord found;
    for (const EventRecord& r : *e)
      if (r.type == type) found = r;
    return found;
  }

  NodeRecord node(const std::string& name) {
    // By value: a range-for over *coordinator_->nodes() would outlive the Result.
    const std::vector<NodeRecord> all = *coordinator_->nodes();
    for (const NodeRecord& n : all)
      if (n.name == name) return n;
    ADD_FAILURE() << "no node " << name;
    return {};
  }

  // The agent inside the allocation on `name` reports its ranks running at `step`.
  std::vector<RankAssignment> agent(const std::string& name, int64_t step) {
    AgentReport r;
    r.node = name;
    Result<AgentAnswer> a = coordinator_->report(r);
    EXPECT_TRUE(a.ok()) << a.status().to_string();
    for (const RankAssignment& x : a->ranks) {
      RankReport rr;
      rr.job_id = x.job_id;
      rr.attempt = x.attempt;
      rr.rank = x.rank;
      rr.running = true;
      rr.step = step;
      rr.step_ms = 100;
      rr.progress_age_ms = 0;
      r.ranks.push_back(rr);
    }
    EXPECT_TRUE(coordinator_->report(r).ok());
    return a->ranks;
  }

  // A 2-node job whose allocation Slurm runs, its agents on n1 and n2 reporting `step`.
  std::string running_job(int64_t step) {
    const std::string id = submit(spec());
    round();
    slurm_state(id, 0, "RUNNING");
    round();
    agent("n1", step);
    agent("n2", step);
    return id;
  }

  std::filesystem::path dir_;
  SecretBox box_ = SecretBox::from_key_for_test(std::string(32, 'k'));
  FakeClock clock_{1'700'000'000'000'000'000};
  std::unique_ptr<StateStore> store_;
  std::unique_ptr<Coordinator> coordinator_;
  Caller admin_{"admin", "ops", true};
  std::vector<ExternalNode> cluster_;
  std::map<std::pair<std::string, int>, ExternalAllocation> allocations_;
  int next_id_ = 100;
  bool manager_places_ = false;
};

TEST_F(ExternalTest, NodesComeFromTheManagerAndAJobTooLargeIsRefusedAtSubmit) {
  ASSERT_EQ(coordinator_->nodes()->size(), 4u);
  EXPECT_EQ(node("n1").state, "ready");
  EXPECT_EQ(node("n1").slots, 2);
  EXPECT_EQ(node("n1").labels.at("pool"), "debug");
  Result<JobRecord> big = coordinator_->submit(admin_, spec(5), "/work");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("needs 5 node(s) but the cluster has 4"), std::string::npos)
      << big.status().to_string();
  // An agent on a node the manager does not list is refused.
  AgentReport stray;
  stray.node = "elsewhere";
  EXPECT_FALSE(coordinator_->report(stray).ok());
}

TEST_F(ExternalTest, AnAttemptIsOneAllocationWhoseIdsAreEventsAndWhoseClocksStartWhenItRuns) {
  const std::string id = submit(spec());
  ExecutorIntent intent = round();
  ASSERT_EQ(intent.allocations.size(), 1u);
  const AllocationIntent& a = intent.allocations[0];
  EXPECT_EQ(a.name, "kiln." + id + ".0");
  EXPECT_EQ(a.nodes, (std::vector<std::string>{"n1", "n2"}));
  EXPECT_EQ(last_event(id, "allocation").detail.value("slurm_job_id", ""), "100");
  // Pending in Slurm for longer than the start timeout: no fault, the clock has not started.
  clock_.advance_ns(60'000 * kMs);
  coordinator_->tick();
  round();
  EXPECT_EQ(job(id).state, "placed");
  Result<JobStatus> st = coordinator_->job(admin_, id);
  EXPECT_NE(st->waiting.find("slurm job 100 pending"), std::string::npos) << st->waiting;
  slurm_state(id, 0, "RUNNING");
  round();
  EXPECT_EQ(last_event(id, "allocation_running").detail.value("slurm_job_id", ""), "100");
  agent("n1", 0);
  agent("n2", 0);
  EXPECT_EQ(job(id).state, "running");
  // A round that finds it as it was writes nothing new.
  round();
  EXPECT_EQ(job(id).state, "running");
}

TEST_F(ExternalTest, AKilledRankRestartsTheJobAsANewAllocationAndTheCulpritIsDrained) {
  const std::string id = submit(spec());
  round();
  slurm_state(id, 0, "RUNNING");
  round();
  agent("n1", 5);
  std::vector<RankAssignment> on_n2 = agent("n2", 5);
  ASSERT_EQ(on_n2.size(), 1u);
  // kill -9 of rank 1 on n2.
  AgentReport r;
  r.node = "n2";
  RankReport dead;
  dead.job_id = id;
  dead.attempt = 0;
  dead.rank = 1;
  dead.running = false;
  dead.exited = false;
  dead.code = 9;
  dead.step = 5;
  dead.describe = "killed by signal 9";
  r.ranks = {dead};
  ASSERT_TRUE(coordinator_->report(r).ok());
  EventRecord fault = last_event(id, "fault");
  EXPECT_EQ(fault.detail.value("node", ""), "n2");
  EXPECT_EQ(node("n2").state, "suspect");
  // The survivor stops; the attempt's allocation is no longer wanted (the executor scancels it)
  // and the culprit's node is drained with Kiln's reason.
  AgentReport r1;
  r1.node = "n1";
  RankReport stopped;
  stopped.job_id = id;
  stopped.attempt = 0;
  stopped.rank = 0;
  stopped.running = false;
  stopped.exited = true;
  stopped.code = 143;
  stopped.stopped_by_agent = true;
  r1.ranks = {stopped};
  ASSERT_TRUE(coordinator_->report(r1).ok());
  EXPECT_EQ(job(id).state, "restarting");
  ExecutorIntent intent = coordinator_->executor_intent("kiln");
  EXPECT_TRUE(intent.allocations.empty());
  ASSERT_EQ(intent.drains.count("n2"), 1u);
  EXPECT_EQ(intent.drains["n2"].rfind("kiln: suspect: ", 0), 0u) << intent.drains["n2"];
  slurm_state(id, 0, "CANCELLED");
  // Slurm reports n2 drained by Kiln: still Kiln's suspect, not an administrator's cordon.
  cluster_[1].drained = true;
  cluster_[1].reason = intent.drains["n2"];
  clock_.advance_ns(1500 * kMs);
  coordinator_->tick();
  EXPECT_EQ(job(id).state, "placed");
  EXPECT_EQ(job(id).attempt, 1);
  intent = round();
  EXPECT_EQ(node("n2").state, "suspect");
  ASSERT_EQ(intent.allocations.size(), 1u);
  EXPECT_EQ(intent.allocations[0].name, "kiln." + id + ".1");
  EXPECT_EQ(
      std::count(intent.allocations[0].nodes.begin(), intent.allocations[0].nodes.end(), "n2"), 0);
  EXPECT_EQ(last_event(id, "allocation").detail.value("slurm_job_id", ""), "101");
}

TEST_F(ExternalTest, NodesSlurmCannotUseAreDownOrCordonedUntilSlurmLetsThemBack) {
  const std::string id = running_job(0);
  // n2 stops answering slurmctld ("down*"): down in Kiln, and its job's fault blames it.
  cluster_[1].responding = false;
  cluster_[1].reason = "Not responding";
  round();
  EXPECT_EQ(node("n2").state, "down");
  EXPECT_EQ(node("n2").reason, "slurm: not responding: Not responding");
  EventRecord fault = last_event(id, "fault");
  EXPECT_EQ(fault.detail.value("cause", ""), "node_lost");
  EXPECT_EQ(fault.detail.value("node", ""), "n2");
  // scontrol update NodeName=n3 State=DOWN Reason=chaos: cordoned with Slurm's reason.
  cluster_[2].down = true;
  cluster_[2].reason = "chaos";
  // An administrator drains n4: cordoned too, and never resumed by Kiln.
  cluster_[3].drained = true;
  cluster_[3].reason = "bad DIMM";
  round();
  EXPECT_EQ(node("n3").state, "cordoned");
  EXPECT_EQ(node("n3").reason, "slurm: down: chaos");
  EXPECT_EQ(node("n4").state, "cordoned");
  EXPECT_EQ(node("n4").reason, "slurm: drained: bad DIMM");
  EXPECT_EQ(coordinator_->executor_intent("kiln").drains.count("n4"), 0u);
  // All come back when Slurm says so.
  for (ExternalNode& n : cluster_) {
    n.responding = true;
    n.down = n.drained = false;
    n.reason.clear();
  }
  round();
  for (const char* n : {"n2", "n3", "n4"})
    EXPECT_EQ(node(n).state, "ready") << n;
}

TEST_F(ExternalTest, ANodeSetDownUnderAJobFaultsItAndTheRestartAvoidsIt) {
  const std::string id = running_job(0);
  cluster_[1].down = true;
  cluster_[1].reason = "chaos";
  slurm_state(id, 0, "NODE_FAIL");  // Slurm ends the allocation in the same breath
  round();
  EventRecord fault = last_event(id, "fault");
  EXPECT_EQ(fault.detail.value("node", ""), "n2");
  EXPECT_NE(fault.detail.value("message", "").find("set down node n2: chaos"), std::string::npos)
      << fault.detail.dump();
  EXPECT_EQ(job(id).state, "restarting");
  clock_.advance_ns(1500 * kMs);
  coordinator_->tick();
  ExecutorIntent intent = round();
  ASSERT_EQ(intent.allocations.size(), 1u);
  // Two healthy nodes, neither of them n2 (n1 did nothing wrong and may serve again).
  const std::vector<std::string>& again = intent.allocations[0].nodes;
  EXPECT_EQ(again.size(), 2u);
  EXPECT_EQ(std::count(again.begin(), again.end(), "n2"), 0);
  EXPECT_EQ(node("n2").state, "cordoned");
}

TEST_F(ExternalTest, AKilnCordonIsADrainAndAnAllocationThatEndsUnderRunningRanksIsAFault) {
  Result<NodeRecord> c = coordinator_->cordon(admin_, "n4", "fan failure");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  ExecutorIntent intent = coordinator_->executor_intent("kiln");
  EXPECT_EQ(intent.drains["n4"], "kiln: cordoned: fan failure (by admin)");
  const std::string id = running_job(3);
  slurm_state(id, 0, "TIMEOUT");
  round();
  EventRecord fault = last_event(id, "fault");
  EXPECT_NE(fault.detail.value("message", "").find("slurm job 100 ended TIMEOUT"),
            std::string::npos)
      << fault.detail.dump();
  EXPECT_EQ(fault.detail.value("blame", ""), "job");
  // Its ranks are gone with the allocation: the stop does not wait for them.
  EXPECT_EQ(job(id).state, "restarting");
}

TEST_F(ExternalTest, ASilentAgentInARunningAllocationLosesItsNode) {
  const std::string id = running_job(1);
  clock_.advance_ns(2000 * kMs);
  agent("n1", 2);
  clock_.advance_ns(4000 * kMs);  // n2 silent 6 s > node_timeout 5 s; n1 4 s
  agent("n1", 3);
  coordinator_->tick();
  EventRecord fault = last_event(id, "fault");
  EXPECT_EQ(fault.detail.value("cause", ""), "node_lost");
  EXPECT_EQ(fault.detail.value("node", ""), "n2");
  EXPECT_NE(fault.detail.value("message", "").find("its agent in slurm job 100"),
            std::string::npos);
}

TEST_F(ExternalTest, ARestartedCoordinatorFindsItsAllocationsInsteadOfSubmittingAgain) {
  const std::string id = running_job(0);
  open();
  const int before = next_id_;
  ExecutorIntent intent = round();
  ASSERT_EQ(intent.allocations.size(), 1u);
  EXPECT_EQ(next_id_, before);  // the allocation of that name exists: nothing submitted
  EXPECT_EQ(job(id).state, "running");
}

TEST_F(ExternalTest, WhenSlurmPlacesTheGangItsNodesBecomeTheJobsAndNoRankChangesItsNumber) {
  manager_places_ = true;
  open();
  ASSERT_TRUE(coordinator_->executor_report(report()).ok());
  ASSERT_TRUE(coordinator_->cordon(admin_, "n4", "fan failure").ok());
  const std::string id = submit(spec());
  ExecutorIntent intent = round();
  ASSERT_EQ(intent.allocations.size(), 1u);
  EXPECT_TRUE(intent.allocations[0].manager_places);
  EXPECT_EQ(intent.allocations[0].nodes.size(), 2u);
  // Slurm may pick any node but the one Kiln cordoned.
  EXPECT_EQ(intent.allocations[0].exclude, std::vector<std::string>{"n4"});
  const std::vector<std::string> planned = job(id).nodes;
  ASSERT_EQ(planned.size(), 2u);
  ASSERT_EQ(std::count(planned.begin(), planned.end(), "n3"), 0) << "the test assumes n3 is free";

  // Before Kiln has seen the allocation run, its nodes are unknown: an agent gets no ranks.
  EXPECT_TRUE(agent(planned[1], 0).empty());
  // Slurm runs it on n3 and planned[1]: planned[1] keeps its position (and its ranks' numbers),
  // n3 takes the other.
  allocations_.at({id, 0}).nodes = {"n3", planned[1]};
  slurm_state(id, 0, "RUNNING");
  round();
  EXPECT_EQ(job(id).nodes, (std::vector<std::string>{"n3", planned[1]}));
  const EventRecord running = last_event(id, "allocation_running");
  EXPECT_EQ(running.detail["nodes"], (std::vector<std::string>{"n3", planned[1]}));
  EXPECT_EQ(running.detail["planned_nodes"], planned);
  std::vector<RankAssignment> on_n3 = agent("n3", 0);
  ASSERT_EQ(on_n3.size(), 1u);
  EXPECT_EQ(on_n3[0].rank, 0);
  std::vector<RankAssignment> on_other = agent(planned[1], 0);
  ASSERT_EQ(on_other.size(), 1u);
  EXPECT_EQ(on_other[0].rank, 1);

  // A restarted coordinator has not seen the allocation run yet, but an agent that reports a
  // rank of the attempt keeps it (an answer without it would stop it).
  open();
  AgentReport r;
  r.node = "n3";
  RankReport rr;
  rr.job_id = id;
  rr.attempt = 0;
  rr.rank = 0;
  rr.running = true;
  rr.step = 3;
  r.ranks.push_back(rr);
  Result<AgentAnswer> a = coordinator_->report(r);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_EQ(a->ranks.size(), 1u);
  EXPECT_EQ(a->ranks[0].rank, 0);
  EXPECT_FALSE(a->ranks[0].stop);
}

TEST_F(ExternalTest, WhenSlurmPlacesOnTooFewNodesTheAttemptFailsToStart) {
  manager_places_ = true;
  open();
  ASSERT_TRUE(coordinator_->executor_report(report()).ok());
  const std::string id = submit(spec());
  round();
  allocations_.at({id, 0}).nodes = {"n3"};
  slurm_state(id, 0, "RUNNING");
  round();
  const EventRecord fault = last_event(id, "fault");
  EXPECT_EQ(fault.detail.value("cause", ""), "start_failed");
  EXPECT_NE(fault.detail.value("message", "").find("runs on 1 node(s), the attempt needs 2"),
            std::string::npos)
      << fault.detail.dump();
}

}  // namespace
}  // namespace kiln::sched
