// The filter and scorer units of placement. Each is a plain function with a name, so a plan's
// "why" and a test can name the unit that decided.
#include <algorithm>
#include <string>

#include <kiln/sched/policy.h>

namespace kiln::sched {
namespace {

std::optional<std::string> reject_unschedulable(const JobView&, const NodeView& node) {
  if (node.state == NodeState::kCordoned || node.state == NodeState::kDown) {
    return std::string(node_state_name(node.state));
  }
  return std::nullopt;
}

std::optional<std::string> reject_full(const JobView& job, const NodeView& node) {
  const int free = node.slots - node.slots_used;
  if (free < job.ranks_per_node) {
    return std::to_string(free) + " free slot(s), needs " + std::to_string(job.ranks_per_node);
  }
  return std::nullopt;
}

std::optional<std::string> reject_no_cpus(const JobView& job, const NodeView& node) {
  if (node.cpus <= 0) return std::nullopt;  // the node did not say: slots decide
  const int need = job.ranks_per_node * job.cpus_per_rank;
  const int free = node.cpus - node.cpus_used;
  if (free < need) {
    return std::to_string(free) + " free CPU(s), needs " + std::to_string(need);
  }
  return std::nullopt;
}

std::optional<std::string> reject_no_memory(const JobView& job, const NodeView& node) {
  if (node.memory_bytes <= 0 || job.memory_per_rank_bytes <= 0) return std::nullopt;
  const int64_t need = job.ranks_per_node * job.memory_per_rank_bytes;
  const int64_t free = node.memory_bytes - node.memory_used_bytes;
  if (free < need) {
    return std::to_string(free >> 20) + " MiB free memory, needs " + std::to_string(need >> 20) +
           " MiB";
  }
  return std::nullopt;
}

std::optional<std::string> reject_no_gpus(const JobView& job, const NodeView& node) {
  const int need = job.ranks_per_node * job.gpus_per_rank;
  if (need == 0) return std::nullopt;
  const int free = node.gpus - node.gpus_used;
  if (free < need) {
    return std::to_string(free) + " free GPU(s), needs " + std::to_string(need);
  }
  return std::nullopt;
}

// A suspect node took a fault recently; one the job's own last attempt faulted on is worse.
double score_health(const JobView& job, const NodeView& node) {
  double s = 0;
  if (node.state == NodeState::kSuspect) s -= 100;
  if (std::find(job.avoid.begin(), job.avoid.end(), node.name) != job.avoid.end()) s -= 1000;
  return s;
}

// Emptier nodes first, so jobs spread their load rather than stack on one node.
double score_free_slots(const JobView&, const NodeView& node) {
  return node.slots > 0 ? static_cast<double>(node.slots - node.slots_used) / node.slots : 0;
}

}  // namespace

const std::vector<NodeFilter>& default_filters() {
  static const std::vector<NodeFilter> filters{
      {"schedulable", reject_unschedulable}, {"slots", reject_full},   {"cpus", reject_no_cpus},
      {"memory", reject_no_memory},          {"gpus", reject_no_gpus},
  };
  return filters;
}

const std::vector<NodeScorer>& default_scorers() {
  static const std::vector<NodeScorer> scorers{
      {"health", score_health},
      {"free_slots", score_free_slots},
  };
  return scorers;
}

}  // namespace kiln::sched
