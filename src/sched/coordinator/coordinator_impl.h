// The coordinator's state in memory and the helpers its three files share: coordinator.cc (the
// API), reports.cc (what agents report and are told), recovery.cc (faults, stops, restarts,
// scheduling). Private to src/sched/.
//
// Invariants (checked where they are relied on):
//   - `jobs` holds every job that is not terminal, as last written to SQLite (same version);
//     a terminal job leaves the map in the transaction that makes it terminal.
//   - `nodes` holds every node SQLite has, as last written.
//   - runtime state (ranks, progress, report times) is rebuilt from agent reports: losing it (a
//     coordinator restart) delays decisions by at most one report interval, never changes them.
#ifndef KILN_SCHED_COORDINATOR_COORDINATOR_IMPL_H_
#define KILN_SCHED_COORDINATOR_COORDINATOR_IMPL_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <kiln/sched/coordinator.h>
#include <kiln/sched/straggler.h>

namespace kiln::sched {

// How long a rank's own error exit waits for a peer's report that may explain it (the peer's
// death reaches the coordinator through another agent, usually within milliseconds).
inline constexpr int64_t kCulpritSettleMs = 1000;

// The settings key of the fair-share ledger (FairShareLedger::to_json).
inline constexpr const char* kFairShareSetting = "fair_share";
// How often the ledger is saved: a crash loses at most this much history.
inline constexpr int64_t kFairShareSaveMs = 60'000;

// One rank of a job's current attempt, as the agents last reported it.
struct RankRuntime {
  bool running = false;
  bool ended = false;
  bool ok = false;  // ended with 0 (or 75 while stopping)
  int64_t step = -1;
  double step_ms = 0;  // the newest step's time, for the checkpoint-age estimate
  double loss = 0;     // the newest step's (NaN: not finite)
  double tokens_per_s = 0;
  double comm_exposed_ms = 0;    // the newest step's wait on the gradient collective
  int64_t progress_mono_ns = 0;  // when its step counter last moved (or the attempt began)
  char proc_state = '?';
  RankReport end;  // how it ended
  // Its own work per step (step less its wait on the collective), newest last, at most
  // kStragglerWindow; and what the last judgement said (straggler.h).
  std::deque<double> compute_window;
  double straggler_z = kNoValue;
  bool straggler = false;
};

struct JobRuntime {
  int attempt = -1;  // the attempt `ranks` describe
  std::vector<RankRuntime> ranks;
  int64_t attempt_mono_ns = 0;  // placed (or first seen after a coordinator restart)
  int64_t stop_mono_ns = 0;     // when stopping began
  int64_t stop_grace_ms = 0;
  // The fault this attempt ended with, for the detection and recovery figures.
  int64_t fault_mono_ns = 0;
  bool awaiting_recovery = false;  // set at a fault; cleared at the next attempt's first step
  std::string waiting;             // why the policy left it waiting
  std::string waiting_kind;
  int queue_position = 0;
  // A rank's own error exit waiting (kCulpritSettleMs) for a peer's report that may explain it.
  int64_t pending_exit_mono_ns = 0;
  RankReport pending_exit;
  // Nodes its faults were blamed on: the policy places the next attempt elsewhere if it can.
  std::vector<std::string> avoid;
  // Under an external manager (options.executor != "local"): this attempt's allocation.
  std::string allocation_id;     // the manager's job id, once seen
  std::string allocation_state;  // as last reported
  bool allocation_running = false;
  bool allocation_ended = false;  // its ranks are gone with it
  // Rank 0's newest step taken into the curves (step_record.cc); -1: none this attempt.
  int64_t recorded_step = -1;
};

struct NodeRuntime {
  int64_t report_mono_ns = 0;  // the last report (or the coordinator's start)
  // The capacities below came from a report of this coordinator's lifetime (after a restart
  // they are unknown until the agent reports again).
  bool reported = false;
  int cpus = 0;
  int64_t memory_bytes = 0;
  int gpus = 0;
  // Under an external manager: the last report of the agent inside an allocation on this node.
  int64_t agent_mono_ns = 0;
  std::string incarnation;  // of the agent that reported last (AgentReport::incarnation)
  int64_t preflight_attempt_mono_ns = 0;  // its agent did not answer the last check; 0: it did
};

// How often buffered step points are written, and how many make a write due sooner; beyond
// kStepPendingMax (SQLite failing for a long while) new points are dropped, never the state.
inline constexpr int64_t kStepFlushMs = 2000;
inline constexpr size_t kStepFlushPoints = 4096;
inline constexpr size_t kStepPendingMax = 65536;

// A cordon the preflight gate made (and lifts when the node passes) starts with this.
inline constexpr const char* kPreflightCordonPrefix = "preflight ";
bool cordoned_by_preflight(const NodeRecord& node);

struct Coordinator::Impl {
  CoordinatorOptions options;
  StateStore* store = nullptr;
  std::unique_ptr<Policy> policy;
  const Clock* clock = nullptr;
  Logger log;

  std::mutex mu;
  std::map<std::string, JobRecord> jobs;  // non-terminal jobs
  std::map<std::string, JobRuntime> runtime;
  std::map<std::string, NodeRecord> nodes;
  std::map<std::string, NodeRuntime> node_runtime;
  Samples samples;
  // Each team's decayed use, for fair share; saved to the settings table now and then so a
  // coordinator restart keeps the history.
  FairShareLedger ledger;
  int64_t ledger_saved_mono_ns = 0;
  int64_t ledger_advanced_mono_ns = 0;
  // Step points taken from reports, not yet in SQLite (step_record.cc): written every
  // kStepFlushMs, or sooner when kStepFlushPoints wait, or when the API reads a job's curves.
  std::vector<StepPoint> pending_steps;
  int64_t steps_flushed_mono_ns = 0;
  bool pending_steps_full_logged = false;
  bool steps_flush_failed = false;  // the last write failed: wait the interval before the next

  int64_t mono() const { return clock->monotonic_ns(); }
  // Nodes and allocations come from an external resource manager's executor (external.cc).
  bool external() const { return options.executor != "local"; }
  int64_t wall() const { return clock->wall_ns(); }

  // reports.cc
  AgentAnswer answer_for(const std::string& node);
  bool manager_placement_known(std::map<std::string, JobRuntime>::const_iterator rt) const;
  Status take_report(const AgentReport& report, bool* changed);
  Status register_node(const AgentReport& report, bool* changed);

  bool other_culprit_known(const JobRuntime& rt, int rank) const;
  Status fault_from_exit(JobRecord* job, JobRuntime& rt, const RankReport& r);

  // recovery.cc
  Status detect_timeouts();
  Status detect_external_timeouts();
  Status detect_rank_timeouts();
  // `isolate`: the fault implicates the node (suspect, then cordon); a program that exited with
  // an error of its own (no signal, no peer blamed) implicates the job, not the machine.
  Status fault(JobRecord* job, FaultCause cause, int rank, const std::string& node,
               const std::string& message, bool isolate = true,
               nlohmann::json extra = nlohmann::json::object());
  Status finish_stops();
  Status schedule();
  Status preempt(JobRecord* job, const Preemption& p);
  Status enforce_time_limits();
  Status mark_node_faulty(const std::string& node, const std::string& why,
                          std::vector<EventRecord>* events, StateStore::Batch* batch);
  Status relax_suspects();

  // The policy's view of a node and of a job's spec (recovery.cc).
  NodeView node_view(const std::string& name, const NodeRecord& node);
  JobView job_view(const JobSpec& spec, const std::string& id,
                   const std::vector<std::string>& avoid) const;

  // gate.cc
  // With the gate on: the node passed preflight at the gate's level, within its validity, as
  // answered by the agent that reports for it now.
  bool preflight_admits(const std::string& name, const NodeRecord& node);
  // The level of the node's valid pass (0 none or expired, 1 quick, 2 full), for a job's own
  // `preflight:` level; 2 with the gate off or under an external manager (nothing is checked).
  int preflight_pass_level(const std::string& name, const NodeRecord& node);
  // What the gate's runner checks at: the gate's level, or full while a waiting job asks it.
  std::string preflight_wanted_level() const;
  // "N node(s) await preflight (quick): a, b" for a waiting job's reason; empty if none.
  std::string awaiting_preflight();
  bool cordoned_for_faults(const NodeRecord& node) const;
  std::set<std::string> busy_nodes() const;  // nodes of jobs that have processes
  // OK unless the node was cordoned after faults and has not passed `full` since.
  Status check_readmission(const NodeRecord& node) const;

  // job_detail.cc: what Coordinator::job() adds for one job.
  std::vector<RankStatus> rank_statuses(const JobRecord& job);
  std::vector<ErrorSignature> signatures_of(const std::string& id);
  // OK when the caller may see the job; kNotFound when there is none or it is another team's.
  Status check_visible(const Caller& caller, const std::string& id);

  // step_record.cc
  // Takes the steps of rank 0's report `r` that the job's curves do not have yet.
  void record_steps(const JobRecord& job, JobRuntime& rt, const RankReport& r);
  // Writes the pending step points (when due, or always with `now`).
  Status flush_steps(bool now);
  // Scores the job's ranks (straggler.h) and writes a "straggler" event for a rank that has
  // just become one.
  Status judge_stragglers(const JobRecord& job, JobRuntime& rt);

  // external.cc
  Status external_node(const ExternalNode& n, const std::string& manager);
  Status external_allocation(JobRecord job, const ExternalAllocation* seen,
                             const std::string& manager);

  // coordinator.cc
  JobRuntime& runtime_of(const JobRecord& job);
  Status write_job(JobRecord* job, JobState to, std::vector<EventRecord> events);
  EventRecord event(const JobRecord& job, const std::string& type,
                    nlohmann::json detail = nlohmann::json::object()) const;
  EventRecord node_event(const std::string& node, const std::string& type,
                         const std::string& reason) const;
  Status set_node_state(const std::string& name, NodeState to, const std::string& reason);
  bool visible_to(const Caller& caller, const JobRecord& job) const;
  double goodput_of(const JobRecord& job) const;
};

JobState state_of(const JobRecord& job);

}  // namespace kiln::sched

#endif  // KILN_SCHED_COORDINATOR_COORDINATOR_IMPL_H_
