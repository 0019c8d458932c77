// The policy's working form of a snapshot: node capacities as flat arrays with small integer ids
// for pools, GPU models and failure domains, so one pass over 10,000 nodes is a few tens of
// microseconds. Private to src/sched/policy/.
//
// Invariants: every vector has one entry per snapshot node, in snapshot order (index i is
// Snapshot::nodes[i]); `free` never goes below zero through take() (callers check fits() first).
#ifndef KILN_SCHED_POLICY_CLUSTER_H_
#define KILN_SCHED_POLICY_CLUSTER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <kiln/sched/policy.h>

namespace kiln::sched::policy_internal {

// Free resources of a node (unknown capacity reads as plenty), or one node's share of a job.
struct Amount {
  int64_t slots = 0;
  int64_t cpus = 0;
  int64_t memory = 0;
  int64_t gpus = 0;
};

inline bool covers(const Amount& free, const Amount& need) {
  return free.slots >= need.slots && free.cpus >= need.cpus && free.memory >= need.memory &&
         free.gpus >= need.gpus;
}
inline void take(Amount* free, const Amount& need) {
  free->slots -= need.slots;
  free->cpus -= need.cpus;
  free->memory -= need.memory;
  free->gpus -= need.gpus;
}
inline void give(Amount* free, const Amount& need) {
  free->slots += need.slots;
  free->cpus += need.cpus;
  free->memory += need.memory;
  free->gpus += need.gpus;
}
Amount amount_of(const NodeResources& r);

// What a job asks, compiled once per plan.
struct Shape {
  Amount need;
  uint64_t models = ~uint64_t{0};  // bit per GPU model id; all ones: any
  uint64_t pools = ~uint64_t{0};   // bit per pool id the job may use
  uint8_t preflight = 0;           // the least NodeView::preflight_level it takes
  int min_nodes = 1;
  int max_nodes = 1;
  TopologySpec topology;
};

class Cluster {
 public:
  explicit Cluster(const Snapshot& snapshot);

  size_t size() const { return free.size(); }
  Shape shape_of(const JobView& job) const;  // pools: all
  const std::string& name(size_t i) const { return (*nodes_)[i].name; }

  // Static eligibility: usable, in one of the shape's pools, of one of its models.
  bool matches(size_t i, const Shape& s) const {
    return usable[i] && ((s.models >> model[i]) & 1) && ((s.pools >> pool[i]) & 1) &&
           preflight[i] >= s.preflight;
  }

  std::vector<Amount> free;
  std::vector<uint8_t> usable;     // not cordoned, not down
  std::vector<uint8_t> suspect;    // usable but a fault pointed at it recently
  std::vector<uint8_t> preflight;  // NodeView::preflight_level
  std::vector<uint8_t> model;      // id; 62: no GPU model; 63: a model beyond the 62 a mask holds
  std::vector<uint8_t> pool;  // id; 63: a pool beyond the 62 a mask holds (never matched alone)
  std::vector<int32_t> rack;  // id per distinct rack path
  std::vector<int32_t> sw;    // id per distinct (rack, switch) path
  std::vector<std::string> pool_names, model_names, rack_names, switch_names;

 private:
  const std::vector<NodeView>* nodes_;
};

// The nodes a shape may use beyond plain fit: a reservation's nodes keep `spare` for the job
// that holds it; a job that would still run at the reservation's start may take from a reserved
// node only what is spare.
struct ReservedNodes {
  std::vector<uint8_t> reserved;  // per node
  std::vector<Amount> spare;      // per node: free at the reserved start beyond the head's share
};

enum class Fit { kBest, kFirst };

struct Choice {
  std::vector<int32_t> nodes;  // ascending node index (rank order follows the snapshot's order)
  std::string why;
};

// Chooses nodes for `shape` with `free`: nullopt when fewer than min_nodes qualify (or no domain
// holds a required `same`). kBest packs into as few failure domains as possible and takes the
// fullest fitting nodes within them, healthy nodes before suspect or avoided ones; kFirst takes
// the first nodes in snapshot order (the baselines). `limit` (may be null) applies when the job
// would still run at the reservation's start.
std::optional<Choice> choose_nodes(const Cluster& cluster, const std::vector<Amount>& free,
                                   const Shape& shape, const std::vector<uint8_t>* avoid, Fit fit,
                                   const ReservedNodes* limit);

// Why nothing fits now: "needs 4 node(s) with 8 GPU(s) free of H100, 2 have them; 3 cordoned or
// down". `kind` is set to "cordoned" when the usable nodes would hold it if the cordoned or down
// ones were back, else "capacity".
std::string explain_no_fit(const Cluster& cluster, const std::vector<Amount>& free,
                           const Shape& shape, std::string* kind);

}  // namespace kiln::sched::policy_internal

#endif  // KILN_SCHED_POLICY_CLUSTER_H_
