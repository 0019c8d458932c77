// Queue quotas per pool and borrowing within a cohort (Kueue's model): the accounting the kiln
// policy admits against. Private to src/sched/policy/.
//
// A queue's use in a pool is the sum over its allocations there (stopping ones included: they
// still hold the nodes). A request fits the queue's nominal quota when use + request <= quota in
// every dimension (nodes, CPUs, GPUs); beyond it the queue borrows, which needs a cohort, use +
// request <= quota + borrow limit, and the cohort's total use + request <= the sum of its members'
// quotas (only idle capacity is lent).
#ifndef KILN_SCHED_POLICY_QUOTA_H_
#define KILN_SCHED_POLICY_QUOTA_H_

#include <map>
#include <string>
#include <vector>

#include "sched/policy/cluster.h"

namespace kiln::sched::policy_internal {

struct Usage {
  int64_t nodes = 0;
  int64_t cpus = 0;
  int64_t gpus = 0;
};
Usage usage_of(const NodeResources& per_node, int64_t nodes);

enum class Admit { kNominal, kBorrow, kNo };

class QuotaBook {
 public:
  QuotaBook(const Snapshot& snapshot, const Cluster& cluster);

  // The queue's index; -1 for a queue the configuration does not have (only when it has queues).
  int queue(const std::string& name) const;
  const std::string& team(int q) const { return queues_[static_cast<size_t>(q)].team; }
  double weight(int q) const { return queues_[static_cast<size_t>(q)].weight; }
  const std::string& name(int q) const { return queues_[static_cast<size_t>(q)].name; }
  bool same_cohort(int a, int b) const;

  // Whether queue q may take `r` in pool p; *why says what blocks it when kNo.
  Admit check(int q, size_t pool, const Usage& r, std::string* why) const;
  void charge(int q, size_t pool, const Usage& r, int sign = 1);

  // Per snapshot allocation: whether it runs on borrowed capacity (its queue is over quota in
  // its pool and it is among the newest of that queue's allocations there).
  std::vector<uint8_t> borrowed(const Snapshot& snapshot, const Cluster& cluster) const;

 private:
  struct Queue {
    std::string name, team, cohort;
    double weight = 1;
    std::vector<QuotaVector> quota, borrow;  // per pool id
    std::vector<Usage> used;                 // per pool id
  };
  std::vector<Queue> queues_;
  std::vector<std::string> pool_names_;
  std::map<std::string, int> index_;
  bool configured_ = false;  // false: every queue name in the snapshot is its own unlimited team
};

}  // namespace kiln::sched::policy_internal

#endif  // KILN_SCHED_POLICY_QUOTA_H_
