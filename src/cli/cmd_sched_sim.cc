// `kiln sched-sim --nodes NODES.csv --jobs JOBS.csv [--queues QUEUES.csv]
//  [--policy kiln,fifo,easy] [--preempt-grace-s S] [--cycles-max N] [--timing-queued-min N]
//  [--outcomes FILE] [--json]`:
// replays a trace through each named policy (all three by default) in simulated time and prints
// one line per policy (JSON with --json; the fields are in include/kiln/sched/sim.h), so Kiln's
// policy and the fifo and easy baselines are compared in one invocation on one trace. Input
// errors exit 2 naming file:line and column.
#include <kiln/sched/policy.h>
#include <kiln/sched/sim.h>

#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/command.h"

namespace kiln::cli {
namespace {

struct SimFlags {
  std::string nodes, jobs, queues;
  std::string policies = "kiln,fifo,easy";
  double preempt_grace_s = 60;
  size_t cycles_max = 0;
  size_t timing_queued_min = 0;
  std::string outcomes;
  bool json = false;
};

int run_sched_sim(const SimFlags& f) {
  std::vector<std::unique_ptr<sched::Policy>> policies;
  std::stringstream names(f.policies);
  std::string name;
  while (std::getline(names, name, ',')) {
    auto p = sched::make_policy(name);
    if (p == nullptr) {
      return report_error("sched-sim", Status::invalid_argument("--policy: unknown policy '" +
                                                                name + "' (kiln, fifo, easy)"));
    }
    policies.push_back(std::move(p));
  }
  if (policies.empty()) {
    return report_error("sched-sim", Status::invalid_argument("--policy: no policy named"));
  }
  if (!f.outcomes.empty()) {
    Status s = check_output_path("--outcomes", f.outcomes);
    if (!s.ok()) return report_error("sched-sim", s);
  }
  Result<sched::Trace> trace = sched::load_trace(f.nodes, f.jobs, f.queues);
  if (!trace.ok()) return report_error("sched-sim", trace.status());
  sched::SimOptions options;
  options.preempt_grace_s = f.preempt_grace_s;
  options.cycles_max = f.cycles_max;
  options.timing_queued_min = f.timing_queued_min;
  std::ofstream outcomes;
  if (!f.outcomes.empty()) outcomes.open(f.outcomes, std::ios::trunc);
  if (!f.json) {
    std::cout << fmt::format(
        "{:<6} {:>6} {:>9} {:>8} {:>11} {:>6} {:>10} {:>10} {:>10} {:>8} "
        "{:>7} {:>10} {:>10}\n",
        "policy", "jobs", "completed", "rejected", "makespan_s", "util", "mean_wait", "p95_wait",
        "max_wait", "bsld", "preempt", "cycle_p50", "cycle_p99");
  }
  for (const auto& policy : policies) {
    Result<sched::SimReport> r = sched::simulate(*trace, *policy, options, system_clock());
    if (!r.ok()) return report_error("sched-sim", r.status());
    if (f.json) {
      std::cout << sched::sim_report_json(*r).dump() << std::endl;
    } else {
      std::cout << fmt::format(
                       "{:<6} {:>6} {:>9} {:>8} {:>11.0f} {:>6.3f} {:>10.0f} {:>10.0f} {:>10.0f} "
                       "{:>8.2f} {:>7} {:>8.2f}ms {:>8.2f}ms",
                       r->policy, r->jobs, r->completed, r->rejected, r->makespan_s, r->utilization,
                       r->mean_wait_s, r->p95_wait_s, r->max_wait_s, r->mean_bounded_slowdown,
                       r->preemptions, r->cycle_ms_median, r->cycle_ms_p99)
                << std::endl;
    }
    if (outcomes.is_open()) {
      for (const sched::SimOutcome& o : r->outcomes) {
        nlohmann::ordered_json j{{"policy", r->policy},        {"job", o.name},
                                 {"queue", o.queue},           {"rejected", o.rejected},
                                 {"completed", o.completed},   {"submit_s", o.submit_s},
                                 {"start_s", o.first_start_s}, {"end_s", o.end_s},
                                 {"wait_s", o.wait_s},         {"preemptions", o.preemptions}};
        if (o.rejected) j["reason"] = o.reject_reason;
        outcomes << j.dump() << "\n";
      }
    }
  }
  if (outcomes.is_open() && !outcomes.flush()) {
    return report_error("sched-sim",
                        Status::io_error("--outcomes " + f.outcomes + ": write failed"));
  }
  return kExitOk;
}

}  // namespace

Command add_sched_sim_command(CLI::App& parent) {
  auto f = std::make_shared<SimFlags>();
  CLI::App* app = parent.add_subcommand(
      "sched-sim", "Replay a job trace through scheduling policies in simulated time");
  app->add_option("--nodes", f->nodes, "NODES.csv: name,cpus,memory_mib,gpus,gpu_model,domain")
      ->required();
  app->add_option("--jobs", f->jobs,
                  "JOBS.csv: name,submit_s,duration_s,time_limit_s,nodes,cpus_per_node,"
                  "memory_mib_per_node,gpus_per_node,gpu_model,queue,priority")
      ->required();
  app->add_option("--queues", f->queues,
                  "QUEUES.csv: name,team,cohort,weight,quota_nodes,quota_cpus,quota_gpus,"
                  "borrow_nodes,borrow_cpus,borrow_gpus (kiln policy only)");
  app->add_option("--policy", f->policies, "comma-separated: kiln, fifo, easy")
      ->capture_default_str();
  app->add_option("--preempt-grace-s", f->preempt_grace_s,
                  "seconds a preempted job takes to checkpoint and stop")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  app->add_option("--cycles-max", f->cycles_max, "stop each policy after this many cycles (0: all)")
      ->capture_default_str();
  app->add_option("--timing-queued-min", f->timing_queued_min,
                  "time only the cycles that start with at least this many jobs waiting")
      ->capture_default_str();
  app->add_option("--outcomes", f->outcomes, "write one JSON line per job and policy here");
  app->add_flag("--json", f->json, "one JSON line per policy");
  return {app, [f](const GlobalOptions&) { return run_sched_sim(*f); }};
}

}  // namespace kiln::cli
