// Properties of the policies over whole simulated traces: nothing lost or overcommitted, EASY's
// promise to the head job, fair share converging to the weights, cooperative preemption keeping
// the victim's work, and no starvation.
#include <kiln/sched/sim.h>

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "sched/policy/test_util.h"

namespace kiln::sched {
namespace {

// Heavy-tailed random jobs on `nodes` 8-GPU nodes: 1-GPU, 8-GPU and multi-node gangs.
// exact: time limits equal durations (the estimates EASY's guarantee assumes).
Trace random_trace(uint32_t seed, int nodes, int jobs, bool exact, int priorities = 1,
                   int queues = 1) {
  std::mt19937 rng(seed);
  std::lognormal_distribution<double> duration(std::log(600.0), 1.2);
  std::uniform_real_distribution<double> u(0, 1);
  Trace t;
  t.nodes = testing::grid(1, (nodes + 3) / 4, 4);
  t.nodes.resize(static_cast<size_t>(nodes));
  double at = 0;
  for (int i = 0; i < jobs; ++i) {
    SimJob s;
    const double kind = u(rng);
    const int n = kind < 0.85 ? 1 : 1 + static_cast<int>(u(rng) * (nodes / 2));
    const int64_t g = kind < 0.6 ? 1 : 8;
    s.job = testing::gpu_job("j" + std::to_string(i), i, n, g);
    s.duration_s = std::clamp(std::round(duration(rng)), 30.0, 20000.0);
    s.job.time_limit_s = exact ? s.duration_s : std::ceil(s.duration_s * (1 + 2 * u(rng)));
    s.job.priority = static_cast<int>(u(rng) * priorities);
    s.job.queue = "q" + std::to_string(static_cast<int>(u(rng) * queues));
    at += -std::log(1 - u(rng)) * 60;  // Poisson arrivals, a minute apart on average
    s.job.submit_s = std::round(at);
    t.jobs.push_back(std::move(s));
  }
  return t;
}

SimReport run(const Trace& t, const Policy& p, SimOptions o = {}) {
  FakeClock clock;
  Result<SimReport> r = simulate(t, p, o, clock);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : SimReport{};
}

TEST(SimulatorTest, EveryJobCompletesOrIsRejectedUnderEveryPolicy) {
  Trace t = random_trace(1, 12, 300, false, 3, 3);
  SimJob huge = t.jobs[0];
  huge.job.id = "huge";
  huge.job.per_node.gpus = 16;
  t.jobs.push_back(huge);
  for (const char* name : {"kiln", "fifo", "easy"}) {
    SimReport r = run(t, *make_policy(name));
    EXPECT_EQ(r.jobs, 301u) << name;
    EXPECT_EQ(r.rejected, 1u) << name;
    EXPECT_EQ(r.completed, 300u) << name;
    EXPECT_TRUE(r.outcomes.back().rejected);
    EXPECT_NE(r.outcomes.back().reject_reason.find("16 GPU(s)"), std::string::npos);
    EXPECT_GT(r.utilization, 0) << name;
    EXPECT_LE(r.utilization, 1.0 + 1e-9) << name;
    for (const SimOutcome& o : r.outcomes) {
      if (!o.completed || o.preemptions > 0) continue;
      // Service is the duration cut at the time limit: nothing lost, nothing invented.
      const SimJob& j = t.jobs[static_cast<size_t>(&o - r.outcomes.data())];
      EXPECT_NEAR(o.service_s, std::min(j.duration_s, j.job.time_limit_s), 1e-6) << o.name;
      EXPECT_GE(o.first_start_s, o.submit_s);
    }
  }
}

// EASY's promise, as a property over random traces with exact time limits: a job that becomes
// the head of the queue starts no later than the start reserved for it then, and the first job
// that has to wait starts no later with backfill than without it.
TEST(SimulatorTest, BackfillNeverDelaysTheHeadJob) {
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    const Trace t = random_trace(seed, 8, 150, true);
    // Kiln's policy with starvation promotion off: a promoted job legitimately becomes the head
    // in front of one that held the reservation.
    KilnPolicyOptions kiln_options;
    kiln_options.starvation_factor = kNever;
    kiln_options.starvation_no_limit_s = kNever;
    KilnPolicyOptions kiln_no_backfill = kiln_options;
    kiln_no_backfill.backfill = false;
    // Each backfilling policy against the same placement without backfill.
    const std::pair<std::unique_ptr<Policy>, std::unique_ptr<Policy>> pairs[] = {
        {make_easy_policy(), make_fifo_policy()},
        {make_kiln_policy(kiln_options), make_kiln_policy(kiln_no_backfill)}};
    for (const auto& [policy, without] : pairs) {
      const std::string name(policy->name());
      const SimReport r = run(t, *policy);
      const SimReport plain = run(t, *without);
      size_t heads = 0;
      for (const SimOutcome& o : r.outcomes) {
        if (!o.reserved_head || o.first_reserved_start_s == kNever) continue;
        ++heads;
        EXPECT_LE(o.first_start_s, o.first_reserved_start_s + 1e-6)
            << name << " seed " << seed << " job " << o.name;
      }
      EXPECT_GT(heads, 0u) << name << " seed " << seed << ": no job ever waited";
      // The first job that waited at all, in submit order.
      for (size_t j = 0; j < t.jobs.size(); ++j) {
        if (plain.outcomes[j].first_start_s <= plain.outcomes[j].submit_s) continue;
        EXPECT_LE(r.outcomes[j].first_start_s, plain.outcomes[j].first_start_s + 1e-6)
            << name << " seed " << seed << " job " << t.jobs[j].job.id;
        break;
      }
    }
  }
}

TEST(SimulatorTest, FairShareConvergesToTheTeamsWeights) {
  // Two teams, weights 3:1, each with far more random work than the cluster can do.
  Trace t;
  t.nodes = testing::grid(1, 4, 4);
  t.queues = {QueueSpec{"a", "a", "", 3, {}, {}}, QueueSpec{"b", "b", "", 1, {}, {}}};
  std::mt19937 rng(7);
  std::lognormal_distribution<double> duration(std::log(300.0), 1.0);
  for (int i = 0; i < 4000; ++i) {
    SimJob s;
    // Whole-node jobs: with mixed sizes the small jobs of a team over its share backfill around
    // the blocked big jobs of a team under it, and the shares converge more loosely
    // (docs/sched.md, "Known limits").
    s.job = testing::gpu_job("j" + std::to_string(i), i, 1, 8);
    s.job.queue = i % 2 == 0 ? "a" : "b";
    s.job.submit_s = 0;
    s.duration_s = std::clamp(std::round(duration(rng)), 10.0, 5000.0);
    s.job.time_limit_s = s.duration_s * 2;
    t.jobs.push_back(std::move(s));
  }
  SimOptions o;
  o.fair_share_half_life_s = 3600;
  const SimReport r = run(t, *make_kiln_policy(), o);
  // GPU-seconds per team over the window where both still had jobs waiting: until the last
  // start of the team whose queue emptied first.
  double last_start[2] = {0, 0};
  for (const SimOutcome& x : r.outcomes) {
    double& l = last_start[x.queue == "a" ? 0 : 1];
    l = std::max(l, x.first_start_s);
  }
  const double window = std::min(last_start[0], last_start[1]);
  double used[2] = {0, 0};
  for (size_t j = 0; j < t.jobs.size(); ++j) {
    const SimOutcome& x = r.outcomes[j];
    const double from = x.end_s - x.service_s;  // no preemptions here: one contiguous run
    const double overlap = std::max(0.0, std::min(x.end_s, window) - from);
    used[x.queue == "a" ? 0 : 1] +=
        overlap * static_cast<double>(t.jobs[j].job.per_node.gpus * t.jobs[j].job.nodes);
  }
  const double share_a = used[0] / (used[0] + used[1]);
  EXPECT_NEAR(share_a, 0.75, 0.05) << "a " << used[0] << " b " << used[1];
  EXPECT_EQ(r.preemptions, 0u);
}

TEST(SimulatorTest, PreemptedJobsCheckpointRequeueAndLoseNoWork) {
  Trace t;
  t.nodes = testing::grid(1, 1, 2);
  for (int i = 0; i < 2; ++i) {
    SimJob low;
    low.job = testing::gpu_job("low" + std::to_string(i), i, 1);
    low.job.submit_s = 0;
    low.duration_s = 2000;
    low.job.time_limit_s = 4000;
    t.jobs.push_back(low);
  }
  SimJob urgent;
  urgent.job = testing::gpu_job("urgent", 2, 2);
  urgent.job.priority = 100;
  urgent.job.submit_s = 1000;  // past the victims' minimum run time (600 s)
  urgent.duration_s = 200;
  urgent.job.time_limit_s = 300;
  t.jobs.push_back(urgent);
  SimOptions o;
  o.preempt_grace_s = 30;
  const SimReport kiln = run(t, *make_kiln_policy(), o);
  EXPECT_EQ(kiln.preemptions, 2u);
  EXPECT_EQ(kiln.outcomes[2].first_start_s, 1030);  // submit + grace
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(kiln.outcomes[static_cast<size_t>(i)].preemptions, 1);
    // The 1000 s before the stop began are kept (the 30 s of grace went into the checkpoint):
    // 1000 s are left after the urgent job ends at 1230.
    EXPECT_EQ(kiln.outcomes[static_cast<size_t>(i)].end_s, 1230 + 1000);
  }
  const SimReport easy = run(t, *make_easy_policy(), o);
  EXPECT_EQ(easy.preemptions, 0u);
  EXPECT_EQ(easy.outcomes[2].first_start_s, 2000);
}

TEST(SimulatorTest, NoJobStarvesUnderKilnsPolicy) {
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    Trace t = random_trace(seed, 16, 600, false, 1, 4);
    // A few urgent jobs, as on a real cluster (urgent work is the exception).
    for (size_t j = 0; j < t.jobs.size(); j += 17)
      t.jobs[j].job.priority = 100;
    const SimReport r = run(t, *make_kiln_policy());
    EXPECT_LE(r.starvation_ratio_max, 1.0) << "seed " << seed;
    double max_limit = 0;
    for (const SimJob& j : t.jobs)
      max_limit = std::max(max_limit, j.job.time_limit_s);
    for (size_t j = 0; j < t.jobs.size(); ++j) {
      const SimOutcome& o = r.outcomes[j];
      const SimJob& sj = t.jobs[j];
      const double bound = 5 * sj.duration_s + max_limit;
      EXPECT_LE(o.wait_s, bound) << sj.job.id << " waited " << o.wait_s << " s: " << sj.job.nodes
                                 << " node(s) x " << sj.job.per_node.gpus << " GPU(s), "
                                 << sj.duration_s << " s, priority " << sj.job.priority
                                 << ", queue " << sj.job.queue << ", submitted " << sj.job.submit_s;
    }
  }
}

TEST(SimulatorTest, CyclesMaxStopsEarly) {
  const Trace t = random_trace(3, 8, 200, false);
  SimOptions o;
  o.cycles_max = 10;
  const SimReport r = run(t, *make_kiln_policy(), o);
  EXPECT_EQ(r.cycles, 10u);
  EXPECT_LT(r.completed, 200u);
}

}  // namespace
}  // namespace kiln::sched
