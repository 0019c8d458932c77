// See include/kiln/launch/placement.h.
#include <kiln/base/check.h>
#include <kiln/launch/placement.h>

#include <algorithm>
#include <map>

namespace kiln::launch {
namespace {

// The cores of each NUMA node, in topology order.
std::vector<std::vector<const CpuCore*>> cores_by_node(const CpuTopology& topology) {
  std::map<int, std::vector<const CpuCore*>> nodes;
  for (const CpuCore& core : topology.cores)
    nodes[core.node].push_back(&core);
  std::vector<std::vector<const CpuCore*>> out;
  for (auto& [node, cores] : nodes)
    out.push_back(std::move(cores));
  return out;
}

// How many of `ranks` ranks each node takes: in proportion to its cores, largest remainder
// first (ties to the lower node), so the counts add up to `ranks`.
std::vector<int> ranks_per_node(const std::vector<std::vector<const CpuCore*>>& nodes, int ranks) {
  int total = 0;
  for (const auto& cores : nodes)
    total += static_cast<int>(cores.size());
  std::vector<int> count(nodes.size());
  std::vector<std::pair<int64_t, size_t>> remainders;  // (-remainder, node)
  int given = 0;
  for (size_t n = 0; n < nodes.size(); ++n) {
    const int64_t share = static_cast<int64_t>(ranks) * static_cast<int64_t>(nodes[n].size());
    count[n] = static_cast<int>(share / total);
    given += count[n];
    remainders.emplace_back(-(share % total), n);
  }
  std::sort(remainders.begin(), remainders.end());
  for (int i = 0; given < ranks; ++i, ++given)
    ++count[remainders[static_cast<size_t>(i)].second];
  return count;
}

CpuSet cpus_of(const std::vector<const CpuCore*>& cores, size_t first, size_t count) {
  std::vector<int> cpus;
  for (size_t c = first; c < first + count; ++c) {
    cpus.insert(cpus.end(), cores[c]->cpus.cpus().begin(), cores[c]->cpus.cpus().end());
  }
  return CpuSet(std::move(cpus));
}

// The node's `ranks` ranks of `threads` threads over its cores, as described in the header.
std::vector<CpuSet> place_on_node(const std::vector<const CpuCore*>& cores, int ranks,
                                  int threads) {
  const size_t n_cores = cores.size();
  const auto n_ranks = static_cast<size_t>(ranks);
  std::vector<CpuSet> out;
  if (n_ranks * static_cast<size_t>(threads) <= n_cores) {
    for (size_t r = 0; r < n_ranks; ++r) {
      out.push_back(cpus_of(cores, r * static_cast<size_t>(threads), static_cast<size_t>(threads)));
    }
  } else if (n_ranks <= n_cores) {
    for (size_t r = 0; r < n_ranks; ++r) {
      const size_t first = r * n_cores / n_ranks;
      const size_t last = (r + 1) * n_cores / n_ranks;
      out.push_back(cpus_of(cores, first, last - first));
    }
  } else {
    for (size_t r = 0; r < n_ranks; ++r)
      out.push_back(cpus_of(cores, r * n_cores / n_ranks, 1));
  }
  return out;
}

int max_sharing(const std::vector<CpuSet>& sets) {
  std::map<int, int> users;
  int most = 0;
  for (const CpuSet& set : sets) {
    for (int cpu : set.cpus())
      most = std::max(most, ++users[cpu]);
  }
  return most;
}

int node_of(const CpuTopology& topology, int cpu) {
  for (const CpuCore& core : topology.cores) {
    if (core.cpus.contains(cpu)) return core.node;
  }
  return -1;
}

}  // namespace

Result<CpuBind> CpuBind::parse(std::string_view text) {
  CpuBind bind;
  if (text == "none") {
    bind.mode = Mode::kNone;
    return bind;
  }
  if (text == "cores") {
    bind.mode = Mode::kCores;
    return bind;
  }
  constexpr std::string_view kList = "list:";
  if (text.substr(0, kList.size()) != kList) {
    return Status::invalid_argument("--cpu-bind '" + std::string(text) +
                                    "': expected none, cores or list:<cpus>/<cpus>/...");
  }
  bind.mode = Mode::kList;
  std::string_view rest = text.substr(kList.size());
  while (true) {
    const size_t slash = rest.find('/');
    Result<CpuSet> set = CpuSet::parse(rest.substr(0, slash));
    if (!set.ok()) {
      return Status::invalid_argument("--cpu-bind '" + std::string(text) +
                                      "': " + set.status().message());
    }
    if (set->empty()) {
      return Status::invalid_argument("--cpu-bind '" + std::string(text) + "': rank " +
                                      std::to_string(bind.lists.size()) + "'s list is empty");
    }
    bind.lists.push_back(std::move(*set));
    if (slash == std::string_view::npos) break;
    rest = rest.substr(slash + 1);
  }
  return bind;
}

std::string CpuBind::to_string() const {
  switch (mode) {
    case Mode::kNone: return "none";
    case Mode::kCores: return "cores";
    case Mode::kList: {
      std::string s = "list:";
      for (size_t i = 0; i < lists.size(); ++i)
        s += (i > 0 ? "/" : "") + lists[i].to_string();
      return s;
    }
  }
  return "?";
}

Result<Placement> plan_placement(const CpuTopology& topology, int ranks, int threads,
                                 const CpuBind& bind) {
  KILN_CHECK_GE(ranks, 1);
  KILN_CHECK_GE(threads, 1);
  KILN_CHECK(!topology.cores.empty());
  Placement placement;
  const std::string shape = std::to_string(ranks) + (ranks == 1 ? " rank x " : " ranks x ") +
                            std::to_string(threads) +
                            (threads == 1 ? " thread on " : " threads on ") + topology.describe();
  switch (bind.mode) {
    case CpuBind::Mode::kNone:
      placement.ranks_per_cpu_max = ranks;  // as far as anyone knows
      placement.summary = "none: " + shape + ", left to the OS";
      return placement;
    case CpuBind::Mode::kList: {
      const CpuSet usable = topology.all_cpus();
      for (size_t i = 0; i < bind.lists.size(); ++i) {
        for (int cpu : bind.lists[i].cpus()) {
          if (!usable.contains(cpu)) {
            return Status::invalid_argument("--cpu-bind " + bind.to_string() + ": CPU " +
                                            std::to_string(cpu) + " (list " + std::to_string(i) +
                                            ") is not one this process may use (" +
                                            usable.to_string() + ")");
          }
        }
      }
      for (int r = 0; r < ranks; ++r) {
        placement.rank_cpus.push_back(bind.lists[static_cast<size_t>(r) % bind.lists.size()]);
      }
      break;
    }
    case CpuBind::Mode::kCores: {
      const auto nodes = cores_by_node(topology);
      const std::vector<int> counts = ranks_per_node(nodes, ranks);
      for (size_t n = 0; n < nodes.size(); ++n) {
        if (counts[n] == 0) continue;
        for (CpuSet& set : place_on_node(nodes[n], counts[n], threads)) {
          placement.rank_cpus.push_back(std::move(set));
        }
      }
      break;
    }
  }
  KILN_CHECK_EQ(placement.rank_cpus.size(), static_cast<size_t>(ranks));
  placement.ranks_per_cpu_max = max_sharing(placement.rank_cpus);
  placement.summary = bind.to_string() + ": " + shape;
  for (int r = 0; r < ranks; ++r) {
    const CpuSet& set = placement.rank_cpus[static_cast<size_t>(r)];
    placement.summary += (r == 0 ? ": rank " : ", rank ") + std::to_string(r) + " on CPUs " +
                         set.to_string() + " (node " +
                         std::to_string(node_of(topology, set.cpus().front())) + ")";
  }
  if (placement.ranks_per_cpu_max > 1) {
    placement.summary += "; oversubscribed: up to " + std::to_string(placement.ranks_per_cpu_max) +
                         " ranks share a CPU";
  }
  return placement;
}

}  // namespace kiln::launch
