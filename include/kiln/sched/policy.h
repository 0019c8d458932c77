// The scheduling policy: a pure function from a snapshot of the cluster to a plan.
//
// Nomad's model (scheduler/README.md in its repository): the coordinator takes a read-only
// snapshot (nodes with what they have free, jobs waiting for nodes), asks the policy for a plan
// (which job goes on which nodes), and applies the plan and its events in one SQLite transaction,
// rejecting it if the state moved underneath. The policy never reads the clock, the database or
// the network, so the same function runs in the coordinator, in tests and (next) in the simulator.
//
// Placement is a pipeline of small named units, as in the Kubernetes scheduling framework:
// filters say whether a node can take one node's share of a job (ranks_per_node ranks) and why
// not; scorers say how good a node is for it. A new constraint is a new unit with its own test.
//
// The first policy, FifoGangPolicy:
//   - FIFO: jobs are considered in submit order (restarting jobs keep their place); when the head
//     job cannot be placed nothing behind it is (no backfill yet: that is the next policy).
//   - Gang: a job gets all its nodes at once or none. An elastic job (min_nodes < nodes) gets as
//     many as are feasible up to `nodes`, and none below min_nodes.
//   - Failure domains: nodes carry labels, outermost first (rack=r1,switch=s1). A gang is packed
//     into one rack where one rack can hold it (a training gang fails as a whole when any node
//     fails, so spreading buys nothing and costs bandwidth); suspect nodes, and nodes the job's
//     last attempt faulted on, are used only when nothing else fits.
#ifndef KILN_SCHED_POLICY_H_
#define KILN_SCHED_POLICY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/sched/states.h>

namespace kiln::sched {

// The label that names a node's failure domain for packing.
inline constexpr std::string_view kRackLabel = "rack";

struct NodeView {
  std::string name;
  NodeState state = NodeState::kReady;
  std::map<std::string, std::string> labels;
  int slots = 1;       // ranks the node can run
  int slots_used = 0;  // by jobs that have processes there
  int cpus = 0;        // 0: unknown (not checked)
  int cpus_used = 0;
  int64_t memory_bytes = 0;  // 0: unknown (not checked)
  int64_t memory_used_bytes = 0;
  int gpus = 0;  // what the node has: a job that needs GPUs needs them here
  int gpus_used = 0;
};

struct JobView {
  std::string id;
  int64_t seq = 0;  // submit order
  int nodes = 1;    // wanted
  int min_nodes = 1;
  int ranks_per_node = 1;
  int cpus_per_rank = 1;
  int64_t memory_per_rank_bytes = 0;  // 0: no claim
  int gpus_per_rank = 0;
  // Nodes this job should avoid (its last attempt's culprit); used only when nothing else fits.
  std::vector<std::string> avoid;
};

struct Snapshot {
  std::vector<NodeView> nodes;
  std::vector<JobView> waiting;  // jobs that need nodes: queued, or restarting past their backoff
};

struct Placement {
  std::string job_id;
  std::vector<std::string> nodes;  // rank order: node i runs ranks [i*rpn, (i+1)*rpn)
  std::string why;                 // "rack r1: 2 of 2 nodes" — for the placed event
};

struct Plan {
  std::vector<Placement> placements;
  // Jobs left waiting and why ("needs 2 nodes with 1 free slot, 1 feasible: local-2 cordoned").
  std::map<std::string, std::string> waiting;
};

// A filter: nullopt when `node` can take one node's share of `job`, else why not.
struct NodeFilter {
  std::string_view name;
  std::optional<std::string> (*reject)(const JobView& job, const NodeView& node);
};
// A scorer: higher is better; scores of all units are summed.
struct NodeScorer {
  std::string_view name;
  double (*score)(const JobView& job, const NodeView& node);
};

const std::vector<NodeFilter>& default_filters();
const std::vector<NodeScorer>& default_scorers();

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;
  virtual Plan decide(const Snapshot& snapshot) const = 0;
};

std::unique_ptr<Policy> make_fifo_gang_policy();

}  // namespace kiln::sched

#endif  // KILN_SCHED_POLICY_H_
