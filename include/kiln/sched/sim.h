// The scheduling simulator behind `kiln sched-sim`: replays a trace of jobs on a cluster through
// a policy (policy.h) in simulated time, with the same Snapshot/Plan interface the coordinator
// uses, and reports what users of a shared cluster feel (waits, slowdown) and what its owners pay
// for (utilization).
//
// Input (CSV with a header naming exactly these columns in this order; an extra, missing or
// misnamed column is an error; every bad row is an error naming file:line and the column):
//   NODES.csv   name,cpus,memory_mib,gpus,gpu_model,domain
//               domain: failure domains outermost first, "r1/s3" (rack r1, switch s3); may be
//               empty. Names are unique.
//   JOBS.csv    name,submit_s,duration_s,time_limit_s,nodes,cpus_per_node,memory_mib_per_node,
//               gpus_per_node,gpu_model,queue,priority
//               gpu_model: empty (any), a model, or models joined by '|'. queue empty: "default";
//               priority empty: 0. A job needs `nodes` nodes each with the per-node resources free
//               (possibly shared with other jobs). A job whose run passes its time limit is
//               stopped at the limit (as Slurm's TIMEOUT), and counts as completed.
//   QUEUES.csv  name,team,cohort,weight,quota_nodes,quota_cpus,quota_gpus,borrow_nodes,
//               borrow_cpus,borrow_gpus (optional; empty quota: unlimited, empty borrow: 0).
//               Quotas apply to the one pool the simulator has ("default").
//
// Model: every submit and every end is an event; at each distinct event time the policy runs
// once (a "cycle", timed on the injected clock) and its plan is applied at once. A preempted job
// stops `preempt_grace_s` later having checkpointed (cooperative preemption: its work so far is
// kept) and is requeued with the work left; a job's time limit restarts with each attempt.
#ifndef KILN_SCHED_SIM_H_
#define KILN_SCHED_SIM_H_

#include <string>
#include <string_view>
#include <vector>

#include <kiln/base/clock.h>
#include <kiln/base/result.h>
#include <kiln/sched/policy.h>

#include <nlohmann/json.hpp>

namespace kiln::sched {

// Bounds on what a trace may hold (a bad file fails fast, never exhausts the machine).
inline constexpr size_t kSimNodesMax = 100000;
inline constexpr size_t kSimJobsMax = 1000000;
inline constexpr size_t kSimCsvBytesMax = size_t{512} << 20;

struct SimJob {
  JobView job;  // id = name; submit_s, time_limit_s, nodes, per_node, gpu_models, queue, priority
  double duration_s = 0;
};

struct Trace {
  std::vector<NodeView> nodes;
  std::vector<SimJob> jobs;  // in file order
  std::vector<QueueSpec> queues;
};

Result<std::vector<NodeView>> parse_nodes_csv(std::string_view text, const std::string& source);
Result<std::vector<SimJob>> parse_jobs_csv(std::string_view text, const std::string& source);
Result<std::vector<QueueSpec>> parse_queues_csv(std::string_view text, const std::string& source);
// Reads and parses the files (queues_path may be empty); kNotFound / kInvalidArgument naming them.
Result<Trace> load_trace(const std::string& nodes_path, const std::string& jobs_path,
                         const std::string& queues_path);

struct SimOptions {
  double preempt_grace_s = 60;
  double fair_share_half_life_s = 24 * 3600.0;
  // Stop after this many cycles (0: run the trace to its end); the report covers what happened.
  size_t cycles_max = 0;
  // Time only the cycles that start with at least this many jobs waiting (the scale benchmark's
  // "cycle at N queued jobs"); the others still run.
  size_t timing_queued_min = 0;
};

// What happened to one job.
struct SimOutcome {
  std::string name;
  std::string queue;
  bool rejected = false;
  std::string reject_reason;
  bool completed = false;
  double submit_s = 0;
  double first_start_s = -1;
  double end_s = -1;
  double service_s = 0;  // time it ran, all attempts (min(duration, limit) when uninterrupted)
  double wait_s = 0;     // end - submit - service
  int preemptions = 0;
  bool reserved_head = false;  // it was the first blocked job (held the reservation) at some point
  double first_reserved_start_s = -1;  // the start reserved for it when it first became head
};

struct SimReport {
  std::string policy;
  size_t jobs = 0;
  size_t completed = 0;
  size_t rejected = 0;
  double makespan_s = 0;
  double utilization = 0;  // allocated GPU-seconds (CPU-seconds without GPUs) / capacity x makespan
  double mean_wait_s = 0;
  double p95_wait_s = 0;
  double max_wait_s = 0;
  double mean_bounded_slowdown = 0;  // max(1, (wait + service) / max(service, 10 s))
  size_t preemptions = 0;
  double cycle_ms_median = 0;
  double cycle_ms_p99 = 0;
  size_t cycles = 0;
  size_t cycles_timed = 0;   // those with at least timing_queued_min jobs waiting
  size_t queued_max = 0;     // the most jobs waiting at one cycle
  double queued_median = 0;  // waiting jobs at a cycle, median
  // Starvation: the largest wait / (5 x duration + the longest time limit) over completed jobs;
  // at most 1 means no job waited longer than the bound.
  double starvation_ratio_max = 0;
  std::vector<SimOutcome> outcomes;  // per job, in trace order
};

// The report's JSON line: the fields above but `outcomes`.
nlohmann::ordered_json sim_report_json(const SimReport& report);

// Replays `trace` through `policy`. `clock` times each cycle (the figure the report gives).
Result<SimReport> simulate(const Trace& trace, const Policy& policy, const SimOptions& options,
                           const Clock& clock);

}  // namespace kiln::sched

#endif  // KILN_SCHED_SIM_H_
