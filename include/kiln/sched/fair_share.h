// Fair share: each team's use of the cluster over a decaying window, the input to the kiln
// policy's order (policy.h).
//
// A team's use is the integral of its dominant share (the largest of its fractions of the
// cluster's nodes, CPUs and GPUs, as in DRF) over time, decayed with a half-life: a team that used
// half the cluster for an hour an hour ago counts as much as one that uses a quarter now for an
// hour. The policy divides each team's use by its weight and lets the lowest go first, so over a
// long contended run the teams' allocations converge to their weights.
//
// Pure: advance() is given the time and the current shares, so the coordinator (wall clock), the
// simulator (simulated time) and tests drive it the same way.
#ifndef KILN_SCHED_FAIR_SHARE_H_
#define KILN_SCHED_FAIR_SHARE_H_

#include <map>
#include <string>

#include <kiln/sched/policy.h>

#include <nlohmann/json.hpp>

namespace kiln::sched {

// The cluster's totals over schedulable nodes (for shares): nodes counted in `slots`.
NodeResources cluster_totals(const std::vector<NodeView>& nodes);

// The dominant share of `nodes` nodes each using `per_node`, on a cluster with `totals`.
double dominant_share(const NodeResources& per_node, int64_t nodes, const NodeResources& totals);

// Each team's current dominant share from the snapshot's running allocations (team: the queue's
// team per snapshot.queues, else the queue's name).
std::map<std::string, double> team_shares(const Snapshot& snapshot);

class FairShareLedger {
 public:
  explicit FairShareLedger(double half_life_s = 7 * 24 * 3600.0) : half_life_s_(half_life_s) {}

  // Decays every team's use to now_s and adds each share held constant since the last call.
  // A clock that goes backwards adds nothing.
  void advance(double now_s, const std::map<std::string, double>& shares);

  const std::map<std::string, double>& usage() const { return usage_; }

  // For the coordinator's settings table, so a restart keeps the history.
  nlohmann::json to_json() const;
  static FairShareLedger from_json(const nlohmann::json& json, double half_life_s);

 private:
  double half_life_s_;
  double last_s_ = -1;
  std::map<std::string, double> shares_;  // held since last_s_
  std::map<std::string, double> usage_;
};

}  // namespace kiln::sched

#endif  // KILN_SCHED_FAIR_SHARE_H_
