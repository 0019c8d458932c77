// Queue quotas and cohort borrowing. See quota.h.
#include "sched/policy/quota.h"

#include <algorithm>
#include <numeric>

namespace kiln::sched::policy_internal {
namespace {

// -1 (unlimited) plus anything stays unlimited.
int64_t add_limit(int64_t a, int64_t b) {
  return a < 0 || b < 0 ? -1 : a + b;
}
bool within(int64_t use, int64_t limit) {
  return limit < 0 || use <= limit;
}

}  // namespace

Usage usage_of(const NodeResources& per_node, int64_t nodes) {
  return Usage{nodes, per_node.cpus * nodes, per_node.gpus * nodes};
}

QuotaBook::QuotaBook(const Snapshot& snapshot, const Cluster& cluster) {
  const size_t pools = cluster.pool_names.size();
  pool_names_ = cluster.pool_names;
  auto add = [&](const std::string& name) {
    if (index_.count(name) != 0) return;
    Queue q;
    q.name = name;
    q.team = name;
    q.quota.assign(pools, QuotaVector{});
    q.borrow.assign(pools, QuotaVector{0, 0, 0});
    q.used.assign(pools, Usage{});
    index_[name] = static_cast<int>(queues_.size());
    queues_.push_back(std::move(q));
  };
  configured_ = !snapshot.queues.empty();
  for (const QueueSpec& spec : snapshot.queues) {
    add(spec.name);
    Queue& q = queues_[static_cast<size_t>(index_[spec.name])];
    q.team = spec.team.empty() ? spec.name : spec.team;
    q.cohort = spec.cohort;
    q.weight = spec.weight > 0 ? spec.weight : 1;
    for (size_t p = 0; p < pools; ++p) {
      auto qt = spec.quota.find(cluster.pool_names[p]);
      if (qt != spec.quota.end()) q.quota[p] = qt->second;
      auto bt = spec.borrow.find(cluster.pool_names[p]);
      if (bt != spec.borrow.end()) q.borrow[p] = bt->second;
    }
  }
  if (!configured_) {
    for (const JobView& j : snapshot.waiting)
      add(j.queue);
    for (const Allocation& a : snapshot.running)
      add(a.queue);
  }
  for (const Allocation& a : snapshot.running) {
    auto it = index_.find(a.queue);
    if (it == index_.end() || a.nodes.empty()) continue;
    const size_t pool = cluster.pool[static_cast<size_t>(a.nodes[0])];
    if (pool >= pools) continue;
    charge(it->second, pool, usage_of(a.per_node, static_cast<int64_t>(a.nodes.size())));
  }
}

int QuotaBook::queue(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? -1 : it->second;
}

bool QuotaBook::same_cohort(int a, int b) const {
  const std::string& ca = queues_[static_cast<size_t>(a)].cohort;
  return !ca.empty() && ca == queues_[static_cast<size_t>(b)].cohort;
}

void QuotaBook::charge(int q, size_t pool, const Usage& r, int sign) {
  Usage& u = queues_[static_cast<size_t>(q)].used[pool];
  u.nodes += sign * r.nodes;
  u.cpus += sign * r.cpus;
  u.gpus += sign * r.gpus;
}

Admit QuotaBook::check(int q, size_t pool, const Usage& r, std::string* why) const {
  const Queue& queue = queues_[static_cast<size_t>(q)];
  const Usage& u = queue.used[pool];
  const QuotaVector& quota = queue.quota[pool];
  const Usage after{u.nodes + r.nodes, u.cpus + r.cpus, u.gpus + r.gpus};
  if (within(after.nodes, quota.nodes) && within(after.cpus, quota.cpus) &&
      within(after.gpus, quota.gpus)) {
    return Admit::kNominal;
  }
  const QuotaVector& borrow = queue.borrow[pool];
  const QuotaVector ceiling{add_limit(quota.nodes, borrow.nodes),
                            add_limit(quota.cpus, borrow.cpus), add_limit(quota.gpus, borrow.gpus)};
  // The first dimension over quota, for the explanation.
  auto over = [&](const char* what, int64_t use, int64_t need, int64_t limit) {
    return std::string(what) + " " + std::to_string(use) + "+" + std::to_string(need) + " > " +
           std::to_string(limit);
  };
  std::string dim = !within(after.gpus, quota.gpus) ? over("GPUs", u.gpus, r.gpus, quota.gpus)
                    : !within(after.cpus, quota.cpus)
                        ? over("CPUs", u.cpus, r.cpus, quota.cpus)
                        : over("nodes", u.nodes, r.nodes, quota.nodes);
  const std::string head =
      "queue " + queue.name + " is at its quota in pool " + pool_names_[pool] + " (" + dim + ")";
  if (queue.cohort.empty()) {
    *why = head + "; no cohort to borrow from";
    return Admit::kNo;
  }
  if (!within(after.nodes, ceiling.nodes) || !within(after.cpus, ceiling.cpus) ||
      !within(after.gpus, ceiling.gpus)) {
    *why = head + "; borrow limit reached";
    return Admit::kNo;
  }
  // Only idle capacity is lent: the cohort's use must stay within its members' quotas.
  Usage cohort_use, cohort_quota;
  bool unlimited_member = false;
  for (const Queue& other : queues_) {
    if (other.cohort != queue.cohort) continue;
    const Usage& ou = other.used[pool];
    cohort_use.nodes += ou.nodes;
    cohort_use.cpus += ou.cpus;
    cohort_use.gpus += ou.gpus;
    const QuotaVector& oq = other.quota[pool];
    if (oq.nodes < 0 || oq.cpus < 0 || oq.gpus < 0) unlimited_member = true;
    cohort_quota.nodes += std::max<int64_t>(oq.nodes, 0);
    cohort_quota.cpus += std::max<int64_t>(oq.cpus, 0);
    cohort_quota.gpus += std::max<int64_t>(oq.gpus, 0);
  }
  auto lendable = [&](int64_t use, int64_t need, int64_t total, int64_t own_quota) {
    // A dimension this queue has no quota on needs no lending.
    return own_quota < 0 || unlimited_member || use + need <= total;
  };
  if (lendable(cohort_use.nodes, r.nodes, cohort_quota.nodes, quota.nodes) &&
      lendable(cohort_use.cpus, r.cpus, cohort_quota.cpus, quota.cpus) &&
      lendable(cohort_use.gpus, r.gpus, cohort_quota.gpus, quota.gpus)) {
    return Admit::kBorrow;
  }
  *why = head + "; cohort " + queue.cohort + " has no idle quota to lend";
  return Admit::kNo;
}

std::vector<uint8_t> QuotaBook::borrowed(const Snapshot& snapshot, const Cluster& cluster) const {
  std::vector<uint8_t> out(snapshot.running.size());
  const size_t pools = cluster.pool_names.size();
  for (size_t q = 0; q < queues_.size(); ++q) {
    for (size_t p = 0; p < pools; ++p) {
      const QuotaVector& quota = queues_[q].quota[p];
      Usage excess = queues_[q].used[p];
      excess.nodes = quota.nodes < 0 ? 0 : excess.nodes - quota.nodes;
      excess.cpus = quota.cpus < 0 ? 0 : excess.cpus - quota.cpus;
      excess.gpus = quota.gpus < 0 ? 0 : excess.gpus - quota.gpus;
      if (excess.nodes <= 0 && excess.cpus <= 0 && excess.gpus <= 0) continue;
      // The newest allocations are the borrowed ones: they were admitted last, over quota.
      std::vector<size_t> mine;
      for (size_t a = 0; a < snapshot.running.size(); ++a) {
        const Allocation& al = snapshot.running[a];
        if (al.nodes.empty() || al.queue != queues_[q].name) continue;
        if (cluster.pool[static_cast<size_t>(al.nodes[0])] != p) continue;
        mine.push_back(a);
      }
      std::sort(mine.begin(), mine.end(), [&](size_t a, size_t b) {
        return snapshot.running[a].start_s > snapshot.running[b].start_s;
      });
      for (size_t a : mine) {
        if (excess.nodes <= 0 && excess.cpus <= 0 && excess.gpus <= 0) break;
        out[a] = 1;
        const Allocation& al = snapshot.running[a];
        const Usage u = usage_of(al.per_node, static_cast<int64_t>(al.nodes.size()));
        excess.nodes -= u.nodes;
        excess.cpus -= u.cpus;
        excess.gpus -= u.gpus;
      }
    }
  }
  return out;
}

}  // namespace kiln::sched::policy_internal
