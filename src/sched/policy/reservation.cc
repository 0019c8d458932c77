// The head job's reservation (EASY backfill). See reservation.h.
#include "sched/policy/reservation.h"

#include <algorithm>

namespace kiln::sched::policy_internal {

std::optional<Reservation> reserve(const Cluster& cluster, const std::vector<Amount>& free,
                                   std::vector<Release> releases, const Shape& asked,
                                   const std::vector<uint8_t>* avoid, Fit fit, double now_s) {
  // A job's preflight level does not bound where it may be reserved: the reserved nodes stay
  // idle, the gate checks idle nodes at the level a waiting job asks, and they pass in time.
  // Held to the level here, a job that asks full would never be reserved on a busy cluster, and
  // every job behind it would backfill past it for ever.
  Shape shape = asked;
  shape.preflight = 0;
  std::vector<Amount> at = free;
  // Nodes that would hold one share now: a cheap count decides when choose_nodes is worth a try.
  size_t fitting = 0;
  for (size_t i = 0; i < cluster.size(); ++i)
    if (cluster.matches(i, shape) && covers(at[i], shape.need)) ++fitting;
  const auto min_nodes = static_cast<size_t>(shape.min_nodes);
  auto attempt = [&](double start) -> std::optional<Reservation> {
    std::optional<Choice> c = choose_nodes(cluster, at, shape, avoid, fit, nullptr);
    if (!c) return std::nullopt;
    Reservation r;
    r.start_s = std::max(start, now_s);
    r.nodes = c->nodes;
    r.limit.reserved.assign(cluster.size(), 0);
    r.limit.spare.assign(cluster.size(), Amount{});
    for (int32_t n : c->nodes) {
      const auto i = static_cast<size_t>(n);
      r.limit.reserved[i] = 1;
      r.limit.spare[i] = at[i];
      take(&r.limit.spare[i], shape.need);
    }
    return r;
  };
  if (fitting >= min_nodes) {
    if (auto r = attempt(now_s)) return r;
  }
  std::sort(releases.begin(), releases.end(), [](const Release& a, const Release& b) {
    if (a.end_s != b.end_s) return a.end_s < b.end_s;
    return a.start_s < b.start_s;
  });
  // choose_nodes is O(nodes): bound the tries where the count passes but a required domain does
  // not, so one reservation stays O(releases + nodes x tries).
  int tries_left = 64;
  for (size_t k = 0; k < releases.size(); ++k) {
    const Release& rel = releases[k];
    for (int32_t n : *rel.nodes) {
      const auto i = static_cast<size_t>(n);
      const bool before = cluster.matches(i, shape) && covers(at[i], shape.need);
      give(&at[i], rel.per_node);
      if (!before && cluster.matches(i, shape) && covers(at[i], shape.need)) ++fitting;
    }
    const bool batch_done =
        k + 1 == releases.size() || releases[k + 1].end_s != rel.end_s || rel.end_s == kNever;
    if (!batch_done || fitting < min_nodes) continue;
    if (tries_left-- <= 0 && k + 1 != releases.size()) continue;
    if (auto r = attempt(rel.end_s)) return r;
  }
  return std::nullopt;
}

void commit(const std::vector<int32_t>& nodes, const Amount& need, double end_s,
            std::vector<Amount>* free, Reservation* reservation) {
  for (int32_t n : nodes) {
    const auto i = static_cast<size_t>(n);
    take(&(*free)[i], need);
    if (reservation != nullptr && outlives(end_s, *reservation) && reservation->limit.reserved[i]) {
      take(&reservation->limit.spare[i], need);
    }
  }
}

}  // namespace kiln::sched::policy_internal
