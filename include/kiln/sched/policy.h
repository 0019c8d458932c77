// The scheduling policy: a pure function from a snapshot of the cluster to a plan.
//
// Nomad's model (scheduler/README.md in its repository): the caller takes a read-only snapshot
// (nodes with capacity and use, jobs waiting, allocations running, queues and their quotas, each
// team's past use, the time), asks the policy for a plan (place these jobs on these nodes, preempt
// these jobs, and why every other job waits) and applies it. The policy reads no clock, database
// or network and keeps nothing between calls, so the same function runs in the coordinator
// (`kiln serve`), in unit tests and in the simulator (`kiln sched-sim`, sim.h) at 10,000 nodes.
//
// Three policies share the types:
//   kiln  the production policy (kiln_policy.cc):
//         order    priority, then fair share (each team's dominant-resource use over a decaying
//                  window, divided by its weight; fair_share.h), then submit order. A starving
//                  job (waited longer than its time limit) goes first within its team, and
//                  before every other team's jobs while its team holds less than its entitled
//                  share (its weight over the active teams' weights): so a sustained backlog,
//                  where every job starves, still divides the cluster by the weights;
//         quota    a queue uses up to its nominal quota per pool, and borrows idle capacity of its
//                  cohort up to its borrow limit; a job over quota waits (and never blocks others);
//         gang     a job gets all its nodes in one plan or none: nothing is held while it waits,
//                  so two gangs can never each hold part of what the other needs;
//         place    best fit (the fullest node that holds a share first, so whole nodes stay free
//                  for whole-node jobs) into as few failure domains as possible: one switch, else
//                  one rack, else the fewest racks; healthy nodes before suspect ones;
//         backfill EASY: the first job that cannot start gets a reservation (the earliest time the
//                  running jobs' time limits free enough nodes, and which nodes); a job behind it
//                  starts now only where it cannot delay that reservation. The jobs behind it are
//                  tried by priority, then shortest time limit first;
//         preempt  a job blocked by lower-priority jobs of its own queue, or by other queues of
//                  its cohort borrowing what its quota guarantees, evicts the fewest of them that
//                  let it fit: borrowed first, then lowest priority, then least work lost since
//                  their last checkpoint. Victims stop cooperatively (SIGTERM, checkpoint, exit
//                  75) and requeue. No job is preempted within preempt_min_runtime_s of its
//                  start or of its time limit, nor more than preemptions_per_job_max times, and
//                  nothing more is preempted while stopping jobs already make room: no thrash,
//                  no cascade. The job victims were preempted for goes first in the order until
//                  it is placed, so what they free is its.
//   fifo  the baseline: strict submit order, first fit in node order, nothing behind a blocked job.
//   easy  the baseline: fifo plus EASY backfill, first fit.
// The baselines ignore priority, queues and topology: they are what `kiln sched-sim` compares
// Kiln's policy with.
//
// Placement's filters (schedulable, pool, GPU model, free slots/CPUs/memory/GPUs, the
// reservation's spare) and scores (health, best fit, failure domain) are named steps of one pass
// in src/sched/policy/cluster.cc (Cluster::matches, covers, choose_nodes, pick_domain) over flat
// arrays, not a list of function-pointer units as in the first policy: at 10,000 nodes and
// 5,000 waiting jobs a plan makes tens of millions of node checks, and explain_no_fit names the
// filter that stopped a job instead.
#ifndef KILN_SCHED_POLICY_H_
#define KILN_SCHED_POLICY_H_

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/sched/states.h>

namespace kiln::sched {

inline constexpr double kNever = std::numeric_limits<double>::infinity();

// What a node has, or what a job asks of each of its nodes. A node's cpus or memory of 0 means
// "unknown": not checked (slots decide). A node's slots of 0 means "no slot limit" (the simulator).
struct NodeResources {
  int64_t slots = 0;
  int64_t cpus = 0;
  int64_t memory_bytes = 0;
  int64_t gpus = 0;
};

struct NodeView {
  std::string name;
  NodeState state = NodeState::kReady;
  std::string pool = "default";
  // Failure domains, outermost first: {rack, switch}. Shorter or empty when unknown; nodes with
  // the same (empty) path share one domain.
  std::vector<std::string> domain;
  std::string gpu_model;
  NodeResources capacity;
  NodeResources used;  // by every allocation, stopping ones included
  // The level of the node's valid preflight pass (kiln/sched/preflight_gate.h): 0 none (or
  // expired), 1 quick, 2 full. A job that asks a level is placed only on nodes at or above it.
  int preflight_level = 2;
};

enum class DomainLevel { kNone = 0, kRack = 1, kSwitch = 2 };
std::string_view domain_level_name(DomainLevel level);  // "none", "rack", "switch"

struct TopologySpec {
  // Keep the job within one domain of this level: required (the job waits until one domain holds
  // it) or preferred (the default packing already prefers it; this only names it).
  DomainLevel same = DomainLevel::kNone;
  bool required = false;
  // kRack: replicas spread one node per rack, round robin (a serving or eval fleet that must
  // survive a rack). Excludes `same`.
  DomainLevel spread = DomainLevel::kNone;
};

struct JobView {
  std::string id;
  std::string queue = "default";
  int priority = 0;  // higher first
  int64_t seq = 0;   // submit order: ties of submit_s and the final tie-break
  double submit_s = 0;
  int nodes = 1;  // wanted
  int min_nodes = 1;
  NodeResources per_node;               // what each of its nodes must have free
  std::vector<std::string> gpu_models;  // any of these; empty: any node
  int preflight_level = 0;  // its nodes' NodeView::preflight_level must be at least this
  double time_limit_s = 0;  // 0: none (it can only backfill where it delays nobody)
  TopologySpec topology;
  // Nodes this job should avoid (its last attempt's culprit); used only when nothing else fits.
  std::vector<std::string> avoid;
  // A requeued victim of preemption: the job it was preempted for (that job goes first while it
  // waits, so the capacity the preemption freed goes to it).
  std::string preempted_by;
};

struct Allocation {
  std::string job_id;
  std::string queue = "default";
  int priority = 0;
  std::vector<int32_t> nodes;  // indices into Snapshot::nodes
  NodeResources per_node;
  double start_s = 0;
  double end_s = kNever;      // start + time limit; kNever: no limit
  bool stopping = false;      // already being stopped: its resources are on their way back
  std::string preempted_for;  // stopping because it was preempted for this job
  bool preemptible = true;
  double last_checkpoint_s = -1;  // -1: none yet (a preemption loses everything since start_s)
  int preemptions = 0;            // times this job was preempted before
};

// Per-pool quota: -1 means unlimited.
struct QuotaVector {
  int64_t nodes = -1;
  int64_t cpus = -1;
  int64_t gpus = -1;
};

struct QueueSpec {
  std::string name;
  std::string team;    // fair share is per team; empty: the queue's name
  std::string cohort;  // queues of one cohort lend each other idle quota; empty: none
  double weight = 1;   // the team's share of the cluster relative to other teams (> 0)
  std::map<std::string, QuotaVector> quota;   // per pool; a pool not named: unlimited
  std::map<std::string, QuotaVector> borrow;  // per pool; beyond quota; not named: 0 (no borrowing)
};

struct Snapshot {
  double now_s = 0;
  std::vector<NodeView> nodes;
  std::vector<JobView> waiting;  // queued, requeued, or restarting past their backoff
  std::vector<Allocation> running;
  // Empty: every queue is unlimited and is its own team with weight 1.
  std::vector<QueueSpec> queues;
  // Each team's decayed use (fair_share.h): dominant share x seconds.
  std::map<std::string, double> team_usage;
};

struct Placement {
  std::string job_id;
  std::vector<std::string> nodes;  // rank order: node i runs ranks [i*rpn, (i+1)*rpn)
  std::string why;                 // "switch r1/s3: 2 node(s)": for the placed event
  bool borrowed = false;           // beyond its queue's quota, on its cohort's idle capacity
  bool backfilled = false;         // started ahead of the reserved head job
};

struct Preemption {
  std::string victim;
  std::string for_job;
  std::string why;
};

// Why a job waits: the kind ("quota", "capacity", "reserved", "behind", "preempting",
// "cordoned", "unknown-queue") is stable for scripts; the reason is for people.
struct WaitInfo {
  std::string kind;
  std::string reason;
  std::string queue;
  int position = 0;     // 1-based, among this plan's waiting jobs of the same queue
  double start_s = -1;  // the reserved start (kind "reserved"), else -1
};

struct Plan {
  std::vector<Placement> placements;
  std::vector<Preemption> preemptions;
  std::map<std::string, WaitInfo> waiting;
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;
  virtual Plan decide(const Snapshot& snapshot) const = 0;
};

struct KilnPolicyOptions {
  // A job that has waited longer than max(this x its time limit, starvation_min_s) is starving:
  // it goes first in its team, and first overall while its team is below its entitled share.
  double starvation_factor = 1.0;
  double starvation_min_s = 600;
  // A job without a time limit starves after this long.
  double starvation_no_limit_s = 4 * 3600;
  bool preemption = true;
  // false: nothing starts behind the first job that cannot (for comparisons and tests).
  bool backfill = true;
  // Behind the reservation, candidates go by priority then shortest time limit (rather than
  // fair share then age): they cannot delay the head either way.
  bool shortest_backfill_first = true;
  size_t victims_max = 64;  // per preempting job: bounds the search
  // A job is not preempted within this long of its start (no preemption thrash), nor within
  // this long of its time limit (it ends soon anyway).
  double preempt_min_runtime_s = 600;
  // A job preempted this many times is not preempted again: it runs to its end.
  int preemptions_per_job_max = 1;
  // Fair share: team_usage counts this many seconds of a team's current allocation as already
  // used, so jobs admitted in one plan take turns between teams.
  double fair_share_lookahead_s = 3600;
};

std::unique_ptr<Policy> make_kiln_policy(KilnPolicyOptions options = {});
std::unique_ptr<Policy> make_fifo_policy();
std::unique_ptr<Policy> make_easy_policy();
// "kiln", "fifo", "easy"; nullptr for another name.
std::unique_ptr<Policy> make_policy(std::string_view name);

// "A100|H100" -> {"A100", "H100"}; "" -> {} (any model). The pieces are not checked here.
std::vector<std::string> split_gpu_models(std::string_view models);

// Whether `job` fits `nodes` when nothing runs (cordoned and down nodes count: they come back).
// False sets *why ("needs 4 node(s) with 8 GPU(s) (H100): the cluster has 2"). A job that fails
// this is rejected at submit, never left to block a queue.
bool fits_idle_cluster(const JobView& job, std::vector<NodeView> nodes, std::string* why);

}  // namespace kiln::sched

#endif  // KILN_SCHED_POLICY_H_
