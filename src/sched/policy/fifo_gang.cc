// FifoGangPolicy: jobs in submit order, each placed as a whole gang or not at all, packed into
// one failure domain where one can hold it. See policy.h for the rules and why.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <kiln/sched/policy.h>

namespace kiln::sched {
namespace {

struct Candidate {
  size_t node = 0;  // index into the plan's working copy of the nodes
  double score = 0;
  bool healthy = true;  // not suspect, not avoided by the job
};

bool better(const Candidate& a, const Candidate& b, const std::vector<NodeView>& nodes) {
  if (a.score != b.score) return a.score > b.score;
  return nodes[a.node].name < nodes[b.node].name;
}

std::string rack_of(const NodeView& node) {
  auto it = node.labels.find(std::string(kRackLabel));
  return it == node.labels.end() ? std::string() : it->second;
}

// Chooses `want` of `pool`: the best-scoring rack that holds them all, else the best overall.
std::vector<Candidate> choose(std::vector<Candidate> pool, size_t want,
                              const std::vector<NodeView>& nodes, std::string* why) {
  std::sort(pool.begin(), pool.end(),
            [&](const Candidate& a, const Candidate& b) { return better(a, b, nodes); });
  std::map<std::string, std::vector<Candidate>> by_rack;  // each list keeps the pool's order
  for (const Candidate& c : pool)
    by_rack[rack_of(nodes[c.node])].push_back(c);
  const std::vector<Candidate>* best = nullptr;
  double best_sum = 0;
  std::string best_rack;
  for (const auto& [rack, members] : by_rack) {
    if (rack.empty() || members.size() < want) continue;
    double sum = 0;
    for (size_t i = 0; i < want; ++i)
      sum += members[i].score;
    if (best == nullptr || sum > best_sum) {
      best = &members;
      best_sum = sum;
      best_rack = rack;
    }
  }
  std::vector<Candidate> out;
  if (best != nullptr) {
    out.assign(best->begin(), best->begin() + static_cast<std::ptrdiff_t>(want));
    *why = "rack " + best_rack + ": " + std::to_string(want) + " node(s)";
  } else {
    out.assign(pool.begin(), pool.begin() + static_cast<std::ptrdiff_t>(want));
    *why = std::to_string(want) + " node(s) across racks (no rack holds the gang)";
  }
  // Rank order follows node names, so the same nodes always give the same ranks.
  std::sort(out.begin(), out.end(), [&](const Candidate& a, const Candidate& b) {
    return nodes[a.node].name < nodes[b.node].name;
  });
  return out;
}

class FifoGangPolicy final : public Policy {
 public:
  std::string_view name() const override { return "fifo-gang"; }

  Plan decide(const Snapshot& snapshot) const override {
    Plan plan;
    std::vector<NodeView> nodes = snapshot.nodes;  // slots_used grows as the plan places jobs
    std::vector<JobView> jobs = snapshot.waiting;
    std::stable_sort(jobs.begin(), jobs.end(),
                     [](const JobView& a, const JobView& b) { return a.seq < b.seq; });
    std::string blocked_by;
    for (const JobView& job : jobs) {
      if (!blocked_by.empty()) {
        plan.waiting[job.id] = "behind " + blocked_by + " (first in, first out)";
        continue;
      }
      std::string reason;
      std::optional<Placement> placement = place(job, &nodes, &reason);
      if (!placement) {
        plan.waiting[job.id] = reason;
        blocked_by = job.id;
        continue;
      }
      plan.placements.push_back(std::move(*placement));
    }
    return plan;
  }

 private:
  static std::optional<Placement> place(const JobView& job, std::vector<NodeView>* nodes,
                                        std::string* reason) {
    std::vector<Candidate> feasible;
    std::map<std::string, std::vector<std::string>> rejected;  // reason -> nodes
    for (size_t i = 0; i < nodes->size(); ++i) {
      const NodeView& node = (*nodes)[i];
      std::optional<std::string> why_not;
      for (const NodeFilter& filter : default_filters()) {
        why_not = filter.reject(job, node);
        if (why_not) break;
      }
      if (why_not) {
        rejected[*why_not].push_back(node.name);
        continue;
      }
      Candidate c{i, 0, true};
      for (const NodeScorer& scorer : default_scorers())
        c.score += scorer.score(job, node);
      c.healthy = node.state == NodeState::kReady &&
                  std::find(job.avoid.begin(), job.avoid.end(), node.name) == job.avoid.end();
      feasible.push_back(c);
    }
    const size_t min_nodes = static_cast<size_t>(std::max(job.min_nodes, 1));
    const size_t max_nodes = static_cast<size_t>(std::max(job.nodes, job.min_nodes));
    if (feasible.size() < min_nodes) {
      *reason = "needs " + std::to_string(min_nodes) + " node(s) with " +
                std::to_string(job.ranks_per_node) + " free slot(s), " +
                std::to_string(feasible.size()) + " feasible";
      for (const auto& [why, names] : rejected) {
        *reason += "; " + why + ":";
        for (const std::string& n : names)
          *reason += " " + n;
      }
      return std::nullopt;
    }
    // Healthy nodes alone when they reach min_nodes (an elastic job shrinks rather than run on
    // a node that just faulted); otherwise every feasible node, suspect ones last.
    std::vector<Candidate> healthy;
    for (const Candidate& c : feasible)
      if (c.healthy) healthy.push_back(c);
    const std::vector<Candidate>& pool = healthy.size() >= min_nodes ? healthy : feasible;
    const size_t want = std::min(max_nodes, pool.size());
    Placement placement;
    placement.job_id = job.id;
    for (const Candidate& c : choose(pool, want, *nodes, &placement.why)) {
      NodeView& node = (*nodes)[c.node];
      node.slots_used += job.ranks_per_node;
      node.cpus_used += job.ranks_per_node * job.cpus_per_rank;
      node.memory_used_bytes += job.ranks_per_node * job.memory_per_rank_bytes;
      node.gpus_used += job.ranks_per_node * job.gpus_per_rank;
      placement.nodes.push_back(node.name);
    }
    if (want < max_nodes) {
      placement.why += ", shrunk from " + std::to_string(max_nodes) + " (min_nodes " +
                       std::to_string(min_nodes) + ")";
    }
    return placement;
  }
};

}  // namespace

std::unique_ptr<Policy> make_fifo_gang_policy() {
  return std::make_unique<FifoGangPolicy>();
}

}  // namespace kiln::sched
