// Coordinator: owns every job from submission to its end (`kiln serve`).
//
// Intent lives here, processes on the nodes (slurmd/kubelet's split): the coordinator keeps jobs,
// nodes and events in SQLite (state_store.h) and tells each node agent which ranks should run on
// it; agents start and stop them and report what runs, how far it got and how it ended. Both
// directions are level-triggered: every agent report carries the whole state of the node's ranks
// and every answer the whole desired set for the node, so a lost message, an agent restart or a
// coordinator restart is repaired by the next report. A coordinator restart re-reads SQLite and
// waits for the agents to report again; it never needs a rank to stop.
//
// The recovery loop (docs/sched.md):
//   detect   a rank exit (pushed by its agent at once), a stalled step counter (progress_timeout),
//            no first step (start_timeout), a lost agent (no report for node_timeout_ms);
//   blame    the culprit: a rank killed by a signal nobody in Kiln sent, else the rank named by
//            the collective's flight recorder (a rank whose collective failed because a peer died
//            points at the peer), else a rank the kernel has stopped (SIGSTOP), else the rank
//            that reported;
//   isolate  the culprit's node turns suspect; cordon_faults faults within cordon_window_ms
//            cordon it (reason and time in `kiln nodes`);
//   stop     every other rank of the attempt: SIGTERM, a grace period, SIGKILL of its group;
//   restart  a new attempt after the job's backoff (doubling, capped), placed by the policy on
//            healthy nodes (shrinking where min_nodes allows), resuming from the newest checkpoint
//            that verifies (the trainer does that), until max_restarts restarts are spent.
//
// Scheduling (policy.h): on every event and every tick the coordinator snapshots nodes, waiting
// jobs, running allocations, queues and fair-share use, asks the policy for a plan and applies
// it: placements become admitted/placed events, preemptions become a "preempted" event and a
// cooperative stop (SIGTERM, preempt_grace_ms to checkpoint and exit 75, then SIGKILL) after
// which the job is queued again (attempt + 1, no restart spent) and resumes from its checkpoint.
// A job past its spec's time_limit is stopped the same way and fails.
// Every transition is an event in the same transaction as the state it records.
//
// Thread-safe: one mutex serializes the API, the agents' reports and tick(). A report that
// changes nothing writes nothing, so 10,000 heartbeating agents cost memory updates, not writes.
#ifndef KILN_SCHED_COORDINATOR_H_
#define KILN_SCHED_COORDINATOR_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <kiln/base/clock.h>
#include <kiln/base/log.h>
#include <kiln/base/result.h>
#include <kiln/preflight/report.h>
#include <kiln/sched/fair_share.h>
#include <kiln/sched/job_spec.h>
#include <kiln/sched/policy.h>
#include <kiln/sched/state_store.h>
#include <kiln/sched/states.h>
#include <kiln/sched/step_series.h>

namespace kiln::sched {

// Who is calling: resolved from the bearer token by the API (auth.h).
struct Caller {
  std::string name;  // the token's name, for the audit log
  std::string team;
  bool admin = false;
};

struct CoordinatorOptions {
  // The rendezvous store the ranks use (host:port) and its token.
  std::string store_address;
  std::string store_token;
  // argv[0] of the default command (`kiln train CONFIG`): this kiln binary.
  std::string kiln_binary = "kiln";
  int64_t heartbeat_interval_ms = 500;  // told to agents
  int64_t node_timeout_ms = 5000;       // no report for this long: the node is down
  int64_t fault_stop_grace_ms = 2000;   // survivors of a fault: their peers are gone already
  int64_t cancel_grace_ms = 10000;      // a cancel lets ranks checkpoint and exit 75
  // A stop that takes longer than its grace plus this is finished without the missing reports.
  int64_t stop_report_slack_ms = 10000;
  int cordon_faults = 3;                      // faults on one node within the window cordon it
  int64_t cordon_window_ms = 10 * 60 * 1000;  // and a suspect node quiet this long is ready again
  size_t jobs_active_max = 100000;            // submits beyond this are refused (bounded state)
  // The Unix user each team's ranks run as (auth.h's team_users); absent: the agent's own user.
  std::map<std::string, std::string> team_users;
  // Queues, quotas, cohorts and fair-share weights (queue_config.h); empty: every queue is
  // accepted, unlimited, and its own team.
  std::vector<QueueSpec> queues;
  // A preempted job's ranks get SIGTERM, this long to checkpoint and exit 75, then SIGKILL.
  int64_t preempt_grace_ms = 30000;
  double fair_share_half_life_s = 7 * 24 * 3600.0;
  // Who owns the nodes: "local" (agents register their nodes by reporting) or an external
  // resource manager, "slurm" (nodes, their states and each attempt's allocation come from its
  // executor through executor_report(); agents run inside the allocations).
  std::string executor = "local";
  // With an external manager: who picks a gang's nodes. false: Kiln's policy, and the manager is
  // told exactly those (--nodelist). true: the manager, told only how many and which nodes Kiln
  // will not have (--exclude: suspect, cordoned, down). The policy still admits, orders and
  // counts capacity; its placement holds the capacity until the manager runs the allocation, and
  // then the manager's nodes become the job's (positions of nodes in both are kept, so a rank
  // never moves). Agents get no ranks of such an attempt before that.
  bool manager_places = false;
  // The preflight gate (preflight_gate.h runs the checks): "" (off), "quick" or "full". When on,
  // the policy places only on nodes whose last preflight, at this level or above, passed within
  // preflight_valid_ms and was answered by the agent that reports for the node now (an agent
  // restarted, perhaps from another build, is checked again). A node that fails is cordoned
  // with the findings; it is ready again when it passes.
  std::string preflight_level;
  int64_t preflight_valid_ms = 60 * 60 * 1000;
};

// One rank as an agent reports it.
struct RankReport {
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  pid_t pid = 0;
  bool running = false;
  int64_t step = -1;             // newest step the rank reported (-1: none yet)
  double step_ms = 0;            // that step's time
  int64_t progress_age_ms = -1;  // how long ago the newest progress line came (-1: never)
  double loss = 0;               // that step's train loss (NaN: not finite)
  double tokens_per_s = 0;       // that step's, over every rank
  double comm_exposed_ms = 0;    // that step's wait on the gradient collective
  // Rank 0's last steps (at most kRecentStepsMax, oldest first) for the job's curves; the
  // coordinator keeps the ones it has not seen. Empty for other ranks.
  std::vector<StepSample> recent;
  char proc_state = '?';  // /proc/<pid>/stat's state: 'T' is stopped by a signal
  // When !running: how it ended.
  bool exited = false;  // false: killed by a signal
  int code = 0;
  bool stopped_by_agent = false;
  std::string describe;
  int64_t ended_age_ms = 0;  // how long before the report the agent saw it end
  int culprit_rank = -1;     // from the attempt's flight-recorder dumps on this node, -1: none
  std::string start_error;   // the agent could not start it
  std::string last_error;    // its last stderr line (at most kLastStderrBytes), when it ended
  bool oom_killed = false;   // killed by the kernel's OOM killer (oom_kill.h)
};

struct AgentReport {
  std::string node;
  std::map<std::string, std::string> labels;
  int slots = 1;
  int cpus = 0;
  int64_t memory_bytes = 0;  // 0: unknown
  int gpus = 0;
  std::string address;  // the agent's own endpoint, informational
  // Which agent process reports ("<pid>.<start wall ns>"): a new one means the node may run
  // another build or environment, and its preflight is due again.
  std::string incarnation;
  std::vector<RankReport> ranks;
};

// One rank the node should run (or stop).
struct RankAssignment {
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  bool stop = false;  // stop it (grace_ms) if running; do not start it
  int64_t grace_ms = 0;
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  // includes secrets: never log it
  std::string cwd;
  std::string team;
  std::string user;  // the Unix user to run as; empty: the agent's own
  // The job's checkpoint directory (also in KILN_CHECKPOINT_DIR); the agent makes it, owned by
  // `user` with mode 0700 when there is one, so no other team's ranks can read it.
  std::string checkpoint_dir;
};

struct AgentAnswer {
  int64_t heartbeat_interval_ms = 500;
  std::vector<RankAssignment> ranks;
  bool cordoned = false;
};

// --- an external resource manager (Slurm), through its executor (slurm.h) ---
//
// Level-triggered like the agents: the executor asks for the whole intent (every allocation the
// coordinator wants to exist, every node it wants drained), makes the manager match it (submits,
// cancels, drains, resumes), and reports the whole observed state back. Losing any message, or a
// coordinator restart, is repaired by the next round.

// One attempt's allocation as the coordinator wants it.
struct AllocationIntent {
  std::string job_id;
  int attempt = 0;
  std::string name;                // the allocation's name in the manager: <prefix>.<job>.<attempt>
  std::vector<std::string> nodes;  // where the policy placed it
  // CoordinatorOptions::manager_places: the manager picks `nodes.size()` nodes itself, none of
  // `exclude` (those Kiln would not place a new attempt on); `nodes` is then only a count.
  bool manager_places = false;
  std::vector<std::string> exclude;
  int ranks_per_node = 1;
  int cpus_per_rank = 1;
  int64_t memory_per_rank_bytes = 0;  // 0: unset
  int gpus_per_rank = 0;
  int64_t time_limit_ms = 0;  // 0: none
  std::string team;
  std::string workdir;
};

struct ExecutorIntent {
  std::vector<AllocationIntent> allocations;
  // Nodes the coordinator wants drained, with the reason it gives ("kiln: cordoned: ...").
  std::map<std::string, std::string> drains;
};

// A node as the manager sees it.
struct ExternalNode {
  std::string name;
  bool responding = true;  // false: the manager cannot reach it (Slurm's "down*")
  bool down = false;       // set down (or failing) while it responds: an administrator's DOWN
  bool drained = false;    // drained or draining
  std::string reason;      // the manager's reason for a down or drained node
  int cpus = 0;
  int64_t memory_bytes = 0;  // 0: unknown
  int gpus = 0;
  std::string partition;
};

// An allocation of this coordinator as the manager sees it (found by its name).
struct ExternalAllocation {
  std::string job_id;
  int attempt = 0;
  std::string id;     // the manager's job id ("123")
  std::string state;  // the manager's state: PENDING, RUNNING, COMPLETED, NODE_FAIL, ...
  std::string reason;
  std::vector<std::string> nodes;
  bool ended = false;  // a terminal state
};

struct ExecutorReport {
  std::string manager = "slurm";
  std::vector<ExternalNode> nodes;
  std::vector<ExternalAllocation> allocations;
  // Allocations submitted this round (the manager's id for each intent), and submissions that
  // failed with the manager's error: both become events.
  std::vector<ExternalAllocation> submitted;
  std::map<std::string, std::string> submit_errors;  // job id -> error
};

// One rank of a job's current attempt, for `kiln status JOB` and the page.
struct RankStatus {
  int rank = 0;
  std::string node;
  std::string state;  // waiting (no report yet), running, stopped (SIGSTOP), ended
  int64_t step = -1;
  double step_ms = 0;
  double compute_ms = 0;  // step_ms less the wait on the gradient collective
  double comm_exposed_ms = 0;
  std::string describe;  // how it ended
  bool straggler = false;
  double z = kNoValue;  // its robust z-score among its peers (straggler.h); NaN: too few data
};

// What a job's failures came down to, one line each ("rank 3 on n2 killed by signal 9 at step
// 120"), from its fault events (error_signature.h).
struct ErrorSignature {
  std::string kind;  // signal, oom, nan_loss, comm, checkpoint, exit, hang, lost, start
  std::string text;
  int attempt = 0;
  int rank = -1;
  std::string node;
  int64_t step = -1;
};

// What `kiln status` shows of a job.
struct JobStatus {
  JobRecord record;          // spec secrets are redacted by the API, not here
  std::string waiting;       // why a waiting job waits (from the last plan)
  std::string waiting_kind;  // WaitInfo::kind: quota, capacity, reserved, behind, preempting, ..
  int queue_position = 0;    // 1-based among the waiting jobs of its queue; 0: not waiting
  double goodput = 0;        // productive step time / wall time since admission
  // Filled by Coordinator::job_detail() only (the list and the other callers stay light):
  std::vector<RankStatus> ranks;           // the current attempt's, while it has processes
  std::vector<ErrorSignature> signatures;  // oldest first, at most kSignaturesMax
};

// A job's points for its curves, thinned for one answer.
struct JobSteps {
  std::vector<StepPoint> points;  // by attempt and step
  size_t stored = 0;              // points the coordinator keeps for the job
};

// The level of a cordon the preflight gate made ("quick" or "full": its reason reads
// "preflight LEVEL: findings"); "" for a node that is not cordoned, or cordoned otherwise.
std::string preflight_cordon_level(const NodeRecord& node);

class Coordinator {
 public:
  static Result<std::unique_ptr<Coordinator>> open(CoordinatorOptions options, StateStore* store,
                                                   std::unique_ptr<Policy> policy,
                                                   const Clock* clock, Logger log);

  // --- the API (team-scoped: a caller sees and changes its team's jobs; an admin all) ---
  // Validates against the cluster (nodes > cluster size is kInvalidArgument), stores and queues.
  Result<JobRecord> submit(const Caller& caller, JobSpec spec, const std::string& workdir);
  Result<JobStatus> job(const Caller& caller, const std::string& id);
  // job() with its ranks and error signatures (one more read of the store): what `kiln status
  // JOB` and the page show; the other callers (logs, cancel) need only the record.
  Result<JobStatus> job_detail(const Caller& caller, const std::string& id);
  Result<std::vector<JobStatus>> jobs(const Caller& caller);
  Result<std::vector<EventRecord>> events(const Caller& caller, const std::string& id,
                                          int64_t after_seq, size_t limit);
  // The job's step points (step_series.h), thinned to at most max_points (>= 64) for this
  // answer; the points still buffered are written first, so the answer is current.
  Result<JobSteps> steps(const Caller& caller, const std::string& id, size_t max_points);
  Result<JobRecord> cancel(const Caller& caller, const std::string& id);
  Result<std::vector<NodeRecord>> nodes();
  Result<NodeRecord> cordon(const Caller& caller, const std::string& node,
                            const std::string& reason);
  // With the preflight gate on (local executor), a node cordoned after faults (cordon_faults
  // within the window) is readmitted only once it has passed preflight at level full since:
  // kAborted (HTTP 409) says so otherwise.
  Result<NodeRecord> uncordon(const Caller& caller, const std::string& node);
  // Which node ran `rank` of the job's `attempt` (-1: the current one), for `kiln logs`: from the
  // job record for the current attempt, from that attempt's placed event for an earlier one.
  // kNotFound when unknown.
  Result<std::string> node_of_rank(const Caller& caller, const std::string& id, int rank,
                                   int attempt = -1);

  // --- the agents ---
  Result<AgentAnswer> report(const AgentReport& report);

  // --- the preflight gate (CoordinatorOptions::preflight_level; preflight_gate.h) ---
  // (A cordon preflight made reads "preflight LEVEL: findings"; preflight_cordon_level() gives
  // its LEVEL, "" for any other node.)
  // Nodes whose check is due: never checked, checked below the gate's level (idle ones: below
  // preflight_level()), by another agent than the one reporting now, or nine tenths of the way
  // to its validity; failed ones again retry_ms after the check. Ready, suspect or cordoned by
  // preflight; with an agent to ask.
  std::vector<NodeRecord> preflight_due(int64_t retry_ms);
  // The level due nodes are checked at: the gate's, or "full" while a waiting job's spec asks
  // `preflight: full` (a job is placed only on nodes whose valid pass is at its level); "" with
  // the gate off.
  std::string preflight_level();
  // Nodes where a job's processes run (placed, running or stopping): not checked at full, and no
  // trial runs there (either would measure the job, and slow it).
  std::set<std::string> busy_nodes();
  // Ready nodes that run nothing, with an agent, none of `taken`: at most n link partners for a
  // full check of too few nodes.
  std::vector<NodeRecord> preflight_partners(const std::vector<std::string>& taken, size_t n);
  // Records each node's result at `level`. With the gate on, a failing node that is ready or
  // suspect is cordoned ("preflight LEVEL: findings") and a node that preflight cordoned is
  // ready again once it passes at that level or above. A node without facts (unreachable) keeps
  // its state and its last result, and is asked again after the retry interval.
  Status record_preflight(const preflight::PreflightReport& report, const std::string& level);

  // --- an external resource manager's executor (CoordinatorOptions::executor) ---
  ExecutorIntent executor_intent(const std::string& name_prefix);
  Status executor_report(const ExecutorReport& report);

  // Timeouts, restarts after backoff, scheduling. Called every ~100 ms by the server and after
  // every report that changed something.
  void tick();

  // Figures for /metrics.
  // What a running job's ranks last reported, for /metrics and its alerts.
  struct JobFigures {
    std::string name;
    std::string team;
    std::string queue;
    int attempt = 0;
    int64_t step = -1;          // the furthest rank's; -1: no step yet
    double progress_age_s = 0;  // since the rank that moved longest ago last moved
    double progress_timeout_s = 0;
    double loss = 0;  // rank 0's last step's (NaN: not finite)
    bool has_loss = false;
    double tokens_per_s = 0;          // rank 0's figure (every rank's tokens)
    std::vector<double> rank_step_s;  // each rank's last step time; 0: none yet
    // Each rank's own work in that step: its step time less its wait on the gradient
    // collective. In a synchronous step every rank waits for the slowest, so the step times are
    // alike and a straggler stands out only here. -1: none yet.
    std::vector<double> rank_compute_s;
    // Each rank's straggler score (straggler.h); NaN: too few data.
    std::vector<double> rank_straggler_z;
    // Productive step time over wall time since the job first ran (goodput counts from its
    // admission); NaN before it ran.
    double ettr = kNoValue;
  };
  struct Figures {
    std::map<std::string, int> jobs_by_state;
    std::map<std::string, int> nodes_by_state;
    int queued = 0;
    std::map<std::string, double> goodput_by_job;  // running jobs
    std::map<std::string, JobFigures> running;     // by job id
  };
  Figures figures();
  // The cluster at a glance (GET /v1/cluster, the page), over the caller's team's unfinished
  // jobs (an admin's: all).
  struct ClusterFigures {
    // Productive step time over wall time, summed over the admitted unfinished jobs: since
    // each job's admission (goodput) and since it first ran (ETTR, which leaves out the wait
    // for its first placement). NaN with no such job.
    double goodput = kNoValue;
    double ettr = kNoValue;
    std::map<std::string, int> jobs_by_state;
    std::map<std::string, int> nodes_by_state;
    std::vector<std::string> idle_nodes;  // ready, running nothing
  };
  ClusterFigures cluster_figures(const Caller& caller);
  // Samples since the last call (seconds), for the histograms.
  struct Samples {
    std::vector<double> submit_to_running_s;
    std::vector<double> detection_s;
    std::vector<double> recovery_s;
    std::vector<std::string> restart_causes;
  };
  Samples take_samples();

  ~Coordinator();

 private:
  struct Impl;
  explicit Coordinator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::sched

#endif  // KILN_SCHED_COORDINATOR_H_
