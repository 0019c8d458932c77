// The policy's working form of a snapshot, node choice with failure-domain packing, and the
// explanation of why nothing fits. See cluster.h.
#include "sched/policy/cluster.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace kiln::sched::policy_internal {
namespace {

// Unknown capacity: plenty, so the comparison always passes without a branch per field.
constexpr int64_t kPlenty = int64_t{1} << 60;
// Model id of a node without a GPU model, and the id of names beyond the 62 a mask can hold:
// nothing asks for the latter, so such nodes only take jobs that accept any model.
constexpr uint8_t kNoModel = 62;
constexpr uint8_t kOverflow = 63;

uint8_t intern(const std::string& name, std::map<std::string, uint8_t>* ids,
               std::vector<std::string>* names) {
  auto it = ids->find(name);
  if (it != ids->end()) return it->second;
  if (names->size() >= kNoModel) return kOverflow;
  const auto id = static_cast<uint8_t>(names->size());
  ids->emplace(name, id);
  names->push_back(name);
  return id;
}

int32_t intern32(const std::string& key, std::map<std::string, int32_t>* ids,
                 std::vector<std::string>* names) {
  auto [it, inserted] = ids->emplace(key, static_cast<int32_t>(names->size()));
  if (inserted) names->push_back(key);
  return it->second;
}

std::string need_text(const Shape& s) {
  std::string out;
  auto add = [&](int64_t v, const char* unit) {
    if (v <= 0) return;
    if (!out.empty()) out += ", ";
    out += std::to_string(v) + unit;
  };
  add(s.need.gpus, " GPU(s)");
  add(s.need.cpus, " CPU(s)");
  if (s.need.memory > 0) add(s.need.memory >> 20, " MiB");
  add(s.need.slots, " slot(s)");
  return out.empty() ? "nothing" : out;
}

struct Entry {
  int32_t node;
  uint8_t unhealthy;
  Amount left;  // free after the job's share: smaller is a better fit
};

// Up to max_nodes of `pool` (every entry fits one node's share), packed into failure domains:
// the smallest switch that holds the gang (best fit among domains keeps big ones free for big
// jobs), else the smallest rack, else the fewest racks; or spread one per rack. nullopt when
// fewer than min_nodes, or no domain holds a required `same` even shrunk to min_nodes.
std::optional<Choice> pick_domain(const Cluster& cluster, const std::vector<Entry>& pool,
                                  const Shape& shape) {
  const auto min_nodes = static_cast<size_t>(shape.min_nodes);
  const auto max_nodes = static_cast<size_t>(shape.max_nodes);
  if (pool.size() < min_nodes) return std::nullopt;
  size_t want = std::min(max_nodes, pool.size());

  std::vector<int32_t> per_switch(cluster.switch_names.size()), per_rack(cluster.rack_names.size());
  for (const Entry& e : pool) {
    ++per_switch[static_cast<size_t>(cluster.sw[static_cast<size_t>(e.node)])];
    ++per_rack[static_cast<size_t>(cluster.rack[static_cast<size_t>(e.node)])];
  }
  auto fuller = [](const Entry& a, const Entry& b) {
    return std::tie(a.unhealthy, a.left.gpus, a.left.cpus, a.left.slots, a.left.memory, a.node) <
           std::tie(b.unhealthy, b.left.gpus, b.left.cpus, b.left.slots, b.left.memory, b.node);
  };
  Choice c;
  std::vector<Entry> picked;
  if (shape.topology.spread == DomainLevel::kRack) {
    // One node per rack per round, racks with the most candidates first.
    std::vector<std::vector<Entry>> by_rack(per_rack.size());
    for (const Entry& e : pool)
      by_rack[static_cast<size_t>(cluster.rack[static_cast<size_t>(e.node)])].push_back(e);
    std::vector<size_t> order;
    for (size_t r = 0; r < by_rack.size(); ++r) {
      if (by_rack[r].empty()) continue;
      std::sort(by_rack[r].begin(), by_rack[r].end(), fuller);
      order.push_back(r);
    }
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return by_rack[a].size() > by_rack[b].size(); });
    for (size_t round = 0; picked.size() < want; ++round)
      for (size_t r : order)
        if (round < by_rack[r].size() && picked.size() < want) picked.push_back(by_rack[r][round]);
    c.why = "spread over " + std::to_string(std::min(order.size(), want)) + " rack(s)";
  } else {
    // The smallest switch that holds the whole gang (best fit among domains keeps big ones free
    // for big jobs), else the smallest rack, else the fewest racks.
    auto smallest_holding = [&](const std::vector<int32_t>& counts) {
      int32_t best = -1;
      for (size_t d = 0; d < counts.size(); ++d)
        if (static_cast<size_t>(counts[d]) >= want &&
            (best < 0 || counts[d] < counts[static_cast<size_t>(best)]))
          best = static_cast<int32_t>(d);
      return best;
    };
    // A required domain that cannot hold `want`: an elastic job shrinks into the largest one
    // that still holds min_nodes.
    auto shrink_into_largest = [&](const std::vector<int32_t>& counts) {
      int32_t best = -1;
      for (size_t d = 0; d < counts.size(); ++d)
        if (best < 0 || counts[d] > counts[static_cast<size_t>(best)])
          best = static_cast<int32_t>(d);
      if (best < 0 || static_cast<size_t>(counts[static_cast<size_t>(best)]) < min_nodes) return -1;
      want = static_cast<size_t>(counts[static_cast<size_t>(best)]);
      return best;
    };
    int32_t one_switch = smallest_holding(per_switch);
    int32_t one_rack = one_switch >= 0 ? -1 : smallest_holding(per_rack);
    const DomainLevel same = shape.topology.required ? shape.topology.same : DomainLevel::kNone;
    if (one_switch < 0 && same == DomainLevel::kSwitch) {
      one_rack = -1;
      one_switch = shrink_into_largest(per_switch);
      if (one_switch < 0) return std::nullopt;
    }
    if (one_switch < 0 && one_rack < 0 && same == DomainLevel::kRack) {
      one_rack = shrink_into_largest(per_rack);
      if (one_rack < 0) return std::nullopt;
    }
    for (const Entry& e : pool) {
      const auto i = static_cast<size_t>(e.node);
      if ((one_switch >= 0 && cluster.sw[i] != one_switch) ||
          (one_rack >= 0 && cluster.rack[i] != one_rack)) {
        continue;
      }
      picked.push_back(e);
    }
    auto key = [&](const Entry& e) {
      const auto i = static_cast<size_t>(e.node);
      return std::make_tuple(-per_rack[static_cast<size_t>(cluster.rack[i])], cluster.rack[i],
                             -per_switch[static_cast<size_t>(cluster.sw[i])], cluster.sw[i]);
    };
    std::sort(picked.begin(), picked.end(), [&](const Entry& a, const Entry& b) {
      const auto ka = key(a), kb = key(b);
      if (ka != kb) return ka < kb;
      return fuller(a, b);
    });
    picked.resize(want);
    if (one_switch >= 0) {
      c.why = "switch " + cluster.switch_names[static_cast<size_t>(one_switch)];
    } else if (one_rack >= 0) {
      c.why = "rack " + cluster.rack_names[static_cast<size_t>(one_rack)];
    } else {
      std::vector<int32_t> racks;
      for (const Entry& e : picked)
        racks.push_back(cluster.rack[static_cast<size_t>(e.node)]);
      std::sort(racks.begin(), racks.end());
      c.why = std::to_string(std::unique(racks.begin(), racks.end()) - racks.begin()) +
              " racks (no rack holds the gang)";
    }
  }
  for (const Entry& e : picked)
    c.nodes.push_back(e.node);
  std::sort(c.nodes.begin(), c.nodes.end());
  c.why += ": " + std::to_string(c.nodes.size()) + " node(s)";
  if (c.nodes.size() < max_nodes) {
    c.why += ", shrunk from " + std::to_string(max_nodes) + " (min_nodes " +
             std::to_string(min_nodes) + ")";
  }
  return c;
}

}  // namespace

Amount amount_of(const NodeResources& r) {
  return Amount{r.slots, r.cpus, r.memory_bytes, r.gpus};
}

Cluster::Cluster(const Snapshot& snapshot) : nodes_(&snapshot.nodes) {
  const size_t n = snapshot.nodes.size();
  free.resize(n);
  usable.resize(n);
  suspect.resize(n);
  preflight.resize(n);
  model.resize(n);
  pool.resize(n);
  rack.resize(n);
  sw.resize(n);
  std::map<std::string, uint8_t> pool_ids, model_ids;
  std::map<std::string, int32_t> rack_ids, switch_ids;
  for (size_t i = 0; i < n; ++i) {
    const NodeView& v = snapshot.nodes[i];
    const NodeResources& c = v.capacity;
    const NodeResources& u = v.used;
    free[i] =
        Amount{c.slots > 0 ? c.slots - u.slots : kPlenty, c.cpus > 0 ? c.cpus - u.cpus : kPlenty,
               c.memory_bytes > 0 ? c.memory_bytes - u.memory_bytes : kPlenty, c.gpus - u.gpus};
    usable[i] = v.state != NodeState::kCordoned && v.state != NodeState::kDown;
    suspect[i] = v.state == NodeState::kSuspect;
    preflight[i] = static_cast<uint8_t>(std::clamp(v.preflight_level, 0, 2));
    model[i] = v.gpu_model.empty() ? kNoModel : intern(v.gpu_model, &model_ids, &model_names);
    pool[i] = intern(v.pool, &pool_ids, &pool_names);
    const std::string r = v.domain.empty() ? std::string() : v.domain[0];
    std::string s = r + "/";
    for (size_t d = 1; d < v.domain.size(); ++d)
      s += (d > 1 ? "/" : "") + v.domain[d];
    rack[i] = intern32(r, &rack_ids, &rack_names);
    sw[i] = intern32(s, &switch_ids, &switch_names);
  }
}

Shape Cluster::shape_of(const JobView& job) const {
  Shape s;
  s.need = amount_of(job.per_node);
  if (!job.gpu_models.empty()) {
    s.models = 0;
    for (const std::string& m : job.gpu_models)
      for (size_t i = 0; i < model_names.size(); ++i)
        if (model_names[i] == m) s.models |= uint64_t{1} << i;
  }
  s.preflight = static_cast<uint8_t>(std::clamp(job.preflight_level, 0, 2));
  s.min_nodes = std::max(job.min_nodes, 1);
  s.max_nodes = std::max(job.nodes, s.min_nodes);
  s.topology = job.topology;
  return s;
}

std::optional<Choice> choose_nodes(const Cluster& cluster, const std::vector<Amount>& free,
                                   const Shape& shape, const std::vector<uint8_t>* avoid, Fit fit,
                                   const ReservedNodes* limit) {
  const size_t n = cluster.size();
  const auto min_nodes = static_cast<size_t>(shape.min_nodes);
  const auto max_nodes = static_cast<size_t>(shape.max_nodes);
  auto eligible = [&](size_t i) {
    return cluster.matches(i, shape) && covers(free[i], shape.need) &&
           (limit == nullptr || !limit->reserved[i] || covers(limit->spare[i], shape.need));
  };
  if (fit == Fit::kFirst) {
    Choice c;
    for (size_t i = 0; i < n && c.nodes.size() < max_nodes; ++i)
      if (eligible(i)) c.nodes.push_back(static_cast<int32_t>(i));
    if (c.nodes.size() < min_nodes) return std::nullopt;
    c.why = "first fit: " + std::to_string(c.nodes.size()) + " node(s)";
    return c;
  }
  std::vector<Entry> healthy, others;
  for (size_t i = 0; i < n; ++i) {
    if (!eligible(i)) continue;
    Amount left = free[i];
    take(&left, shape.need);
    const bool bad = cluster.suspect[i] || (avoid != nullptr && (*avoid)[i]);
    (bad ? others : healthy).push_back(Entry{static_cast<int32_t>(i), bad, left});
  }
  // Healthy nodes alone when they are enough: an elastic job shrinks rather than run on a node
  // that just faulted; otherwise (or when no domain of them holds the gang) suspect and avoided
  // nodes join, last. So `avoid` and suspicion never change whether a job can be placed, only
  // where: the failure cache relies on that.
  if (healthy.size() >= min_nodes) {
    if (std::optional<Choice> c = pick_domain(cluster, healthy, shape)) return c;
    if (others.empty()) return std::nullopt;
  }
  healthy.insert(healthy.end(), others.begin(), others.end());
  return pick_domain(cluster, healthy, shape);
}

std::string explain_no_fit(const Cluster& cluster, const std::vector<Amount>& free,
                           const Shape& shape, std::string* kind) {
  size_t fit_now = 0, offline = 0, matching = 0, unchecked = 0;
  for (size_t i = 0; i < cluster.size(); ++i) {
    const bool model_ok =
        ((shape.models >> cluster.model[i]) & 1) && ((shape.pools >> cluster.pool[i]) & 1);
    if (!model_ok) continue;
    ++matching;
    if (!cluster.usable[i]) {
      ++offline;
      continue;
    }
    if (cluster.preflight[i] < shape.preflight) {
      ++unchecked;
      continue;
    }
    if (covers(free[i], shape.need)) ++fit_now;
  }
  std::string out =
      "needs " + std::to_string(shape.min_nodes) + " node(s) with " + need_text(shape) + " free";
  if (shape.models != ~uint64_t{0}) {
    out += " (";
    bool first = true;
    for (size_t m = 0; m < cluster.model_names.size(); ++m) {
      if (!((shape.models >> m) & 1)) continue;
      out += (first ? "" : "|") + cluster.model_names[m];
      first = false;
    }
    out += ")";
  }
  out += ", " + std::to_string(fit_now) + " have it now";
  if (fit_now >= static_cast<size_t>(shape.min_nodes) && shape.topology.required) {
    out += " but no " + std::string(domain_level_name(shape.topology.same)) + " holds " +
           std::to_string(shape.min_nodes);
  }
  if (offline > 0) out += "; " + std::to_string(offline) + " matching node(s) cordoned or down";
  if (unchecked > 0) {
    out += "; " + std::to_string(unchecked) +
           " matching node(s) without a valid preflight pass at " +
           (shape.preflight >= 2 ? "full" : "quick") + " (the job's `preflight:`)";
  }
  *kind = (offline > 0 || unchecked > 0) &&
                  matching - offline - unchecked < static_cast<size_t>(shape.min_nodes)
              ? "cordoned"
              : "capacity";
  return out;
}

}  // namespace kiln::sched::policy_internal
