// Decaying dominant-resource use per team. See fair_share.h.
#include <kiln/sched/fair_share.h>

#include <algorithm>
#include <cmath>

namespace kiln::sched {

NodeResources cluster_totals(const std::vector<NodeView>& nodes) {
  NodeResources t;
  for (const NodeView& n : nodes) {
    if (n.state == NodeState::kCordoned || n.state == NodeState::kDown) continue;
    t.slots += 1;
    t.cpus += n.capacity.cpus;
    t.memory_bytes += n.capacity.memory_bytes;
    t.gpus += n.capacity.gpus;
  }
  return t;
}

double dominant_share(const NodeResources& per_node, int64_t nodes, const NodeResources& totals) {
  double share =
      totals.slots > 0 ? static_cast<double>(nodes) / static_cast<double>(totals.slots) : 0;
  auto consider = [&](int64_t each, int64_t total) {
    if (total > 0) share = std::max(share, static_cast<double>(each * nodes) / total);
  };
  // A job that shares a node uses less than the node: count its CPUs and GPUs when it has them.
  if (per_node.gpus > 0 || per_node.cpus > 0) {
    share = 0;
    consider(per_node.gpus, totals.gpus);
    consider(per_node.cpus, totals.cpus);
  }
  return share;
}

std::map<std::string, double> team_shares(const Snapshot& snapshot) {
  std::map<std::string, std::string> team;
  for (const QueueSpec& q : snapshot.queues)
    team[q.name] = q.team.empty() ? q.name : q.team;
  const NodeResources totals = cluster_totals(snapshot.nodes);
  std::map<std::string, double> out;
  for (const Allocation& a : snapshot.running) {
    auto it = team.find(a.queue);
    out[it == team.end() ? a.queue : it->second] +=
        dominant_share(a.per_node, static_cast<int64_t>(a.nodes.size()), totals);
  }
  return out;
}

void FairShareLedger::advance(double now_s, const std::map<std::string, double>& shares) {
  if (last_s_ >= 0 && now_s > last_s_) {
    const double dt = now_s - last_s_;
    const double decay = std::exp2(-dt / half_life_s_);
    // The integral of a constant share over dt, decayed to now: share * H/ln2 * (1 - decay).
    const double gain = half_life_s_ / std::log(2.0) * (1 - decay);
    for (auto& [team, used] : usage_)
      used *= decay;
    for (const auto& [team, share] : shares_)
      usage_[team] += share * gain;
  }
  if (last_s_ < 0 || now_s > last_s_) last_s_ = now_s;
  shares_ = shares;
}

nlohmann::json FairShareLedger::to_json() const {
  return nlohmann::json{{"at_s", last_s_}, {"usage", usage_}, {"shares", shares_}};
}

FairShareLedger FairShareLedger::from_json(const nlohmann::json& json, double half_life_s) {
  FairShareLedger l(half_life_s);
  if (!json.is_object()) return l;
  if (json.contains("at_s") && json["at_s"].is_number()) l.last_s_ = json["at_s"].get<double>();
  for (const char* key : {"usage", "shares"}) {
    if (!json.contains(key) || !json[key].is_object()) continue;
    auto& target = std::string(key) == "usage" ? l.usage_ : l.shares_;
    for (auto it = json[key].begin(); it != json[key].end(); ++it)
      if (it.value().is_number() && std::isfinite(it.value().get<double>()))
        target[it.key()] = std::max(0.0, it.value().get<double>());
  }
  return l;
}

}  // namespace kiln::sched
