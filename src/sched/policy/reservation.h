// EASY backfill's reservation: when the running jobs' time limits free enough nodes for the head
// job, and which nodes it will then take. Private to src/sched/policy/.
#ifndef KILN_SCHED_POLICY_RESERVATION_H_
#define KILN_SCHED_POLICY_RESERVATION_H_

#include <optional>
#include <string>
#include <vector>

#include "sched/policy/cluster.h"

namespace kiln::sched::policy_internal {

// Resources that come back at end_s (an allocation's time limit; a stopping one: now).
struct Release {
  double end_s = kNever;
  double start_s = 0;  // orders releases with no limit: the oldest is assumed to end first
  const std::vector<int32_t>* nodes = nullptr;
  Amount per_node;
};

struct Reservation {
  std::string job_id;
  double start_s = kNever;  // kNever: only jobs without a time limit stand in the way
  std::vector<int32_t> nodes;
  ReservedNodes limit;  // what a job still running at start_s may take from the reserved nodes
};

// Replays `releases` in order of end on top of `free` until `shape` fits, and reserves the nodes
// choose_nodes(fit) picks at that point. nullopt: it does not fit even with every release (the
// nodes it needs are cordoned or down).
std::optional<Reservation> reserve(const Cluster& cluster, const std::vector<Amount>& free,
                                   std::vector<Release> releases, const Shape& shape,
                                   const std::vector<uint8_t>* avoid, Fit fit, double now_s);

// Whether a job ending at end_s would still hold its nodes at the reservation's start: then it may
// take from the reserved nodes only what is spare. A reservation whose start is unknown (only
// jobs without a time limit stand in the way) limits every job.
inline bool outlives(double end_s, const Reservation& r) {
  return end_s > r.start_s || r.start_s == kNever;
}

// Takes `need` on `nodes` from `free`, and from the reservation's spare where the job would still
// run at its start (outlives()).
void commit(const std::vector<int32_t>& nodes, const Amount& need, double end_s,
            std::vector<Amount>* free, Reservation* reservation);

}  // namespace kiln::sched::policy_internal

#endif  // KILN_SCHED_POLICY_RESERVATION_H_
