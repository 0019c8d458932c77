// The policy registry, and the submit-time test that a job fits the idle cluster.
#include <kiln/sched/policy.h>

#include "sched/policy/cluster.h"

namespace kiln::sched {

std::string_view domain_level_name(DomainLevel level) {
  switch (level) {
    case DomainLevel::kNone: return "none";
    case DomainLevel::kRack: return "rack";
    case DomainLevel::kSwitch: return "switch";
  }
  return "none";
}

std::vector<std::string> split_gpu_models(std::string_view models) {
  std::vector<std::string> out;
  if (models.empty()) return out;
  size_t start = 0;
  while (true) {
    const size_t bar = models.find('|', start);
    out.emplace_back(models.substr(start, bar == std::string_view::npos ? bar : bar - start));
    if (bar == std::string_view::npos) return out;
    start = bar + 1;
  }
}

std::unique_ptr<Policy> make_policy(std::string_view name) {
  if (name == "kiln") return make_kiln_policy();
  if (name == "fifo") return make_fifo_policy();
  if (name == "easy") return make_easy_policy();
  return nullptr;
}

bool fits_idle_cluster(const JobView& job, std::vector<NodeView> nodes, std::string* why) {
  Snapshot idle;
  idle.nodes = std::move(nodes);
  for (NodeView& n : idle.nodes) {
    n.used = NodeResources{};
    n.state = NodeState::kReady;  // cordoned and down nodes come back
    n.preflight_level = 2;        // and pass their checks
  }
  const policy_internal::Cluster cluster(idle);
  policy_internal::Shape shape = cluster.shape_of(job);
  shape.max_nodes = shape.min_nodes;
  // One pool at a time: a gang never spans pools.
  for (size_t p = 0; p < cluster.pool_names.size(); ++p) {
    shape.pools = uint64_t{1} << p;
    if (policy_internal::choose_nodes(cluster, cluster.free, shape, nullptr,
                                      policy_internal::Fit::kBest, nullptr)) {
      return true;
    }
  }
  shape.pools = ~uint64_t{0};
  std::string kind;
  *why = policy_internal::explain_no_fit(cluster, cluster.free, shape, &kind);
  const auto at = why->find(" have it now");
  if (at != std::string::npos) why->replace(at, 12, " have it even when idle");
  return false;
}

}  // namespace kiln::sched
