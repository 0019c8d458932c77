// The baselines `kiln sched-sim` compares the kiln policy with, written plainly:
//   fifo  strict submit order, first fit in node order; nothing starts behind a blocked job.
//   easy  fifo with EASY backfill (Lifka 1995; Slurm's sched/backfill with one reservation): the
//         first blocked job gets a reservation from the running jobs' time limits, and a job
//         behind it starts now if it fits and cannot delay that reservation.
// Neither looks at priority, queues, quotas, fair share or topology.
#include <algorithm>

#include <kiln/sched/policy.h>

#include "sched/policy/cluster.h"
#include "sched/policy/reservation.h"

namespace kiln::sched {
namespace {

using policy_internal::Amount;
using policy_internal::Choice;
using policy_internal::Cluster;
using policy_internal::Fit;
using policy_internal::Release;
using policy_internal::Reservation;
using policy_internal::Shape;

class OrderedPolicy final : public Policy {
 public:
  explicit OrderedPolicy(bool backfill) : backfill_(backfill) {}
  std::string_view name() const override { return backfill_ ? "easy" : "fifo"; }

  Plan decide(const Snapshot& s) const override {
    Plan plan;
    const Cluster cluster(s);
    std::vector<Amount> free = cluster.free;
    std::vector<size_t> order(s.waiting.size());
    for (size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      const JobView& x = s.waiting[a];
      const JobView& y = s.waiting[b];
      return x.submit_s != y.submit_s ? x.submit_s < y.submit_s : x.seq < y.seq;
    });
    std::optional<Reservation> reservation;
    std::vector<std::vector<int32_t>> placed;
    placed.reserve(order.size());
    std::vector<Release> releases;
    for (const Allocation& a : s.running)
      releases.push_back(Release{a.stopping ? s.now_s : a.end_s, a.start_s, &a.nodes,
                                 policy_internal::amount_of(a.per_node)});
    std::string head;
    int position = 0;
    for (size_t j : order) {
      const JobView& job = s.waiting[j];
      auto wait = [&](std::string kind, std::string reason, double start = -1) {
        plan.waiting[job.id] =
            WaitInfo{std::move(kind), std::move(reason), job.queue, ++position, start};
      };
      if (!head.empty() && !backfill_) {
        wait("behind", "behind " + head + " (first in, first out)");
        continue;
      }
      const Shape shape = cluster.shape_of(job);
      const double end_s = job.time_limit_s > 0 ? s.now_s + job.time_limit_s : kNever;
      const bool limited =
          reservation.has_value() && policy_internal::outlives(end_s, *reservation);
      std::optional<Choice> c = policy_internal::choose_nodes(
          cluster, free, shape, nullptr, Fit::kFirst, limited ? &reservation->limit : nullptr);
      if (c) {
        plan.placements.push_back(Placement{job.id, {}, c->why, false, !head.empty()});
        for (int32_t n : c->nodes)
          plan.placements.back().nodes.push_back(cluster.name(static_cast<size_t>(n)));
        policy_internal::commit(c->nodes, shape.need, end_s, &free,
                                reservation ? &*reservation : nullptr);
        placed.push_back(std::move(c->nodes));
        releases.push_back(Release{end_s, s.now_s, &placed.back(), shape.need});
        continue;
      }
      std::string kind;
      std::string reason = policy_internal::explain_no_fit(cluster, free, shape, &kind);
      if (!head.empty()) {
        wait("behind", "behind " + head + "; " + reason);
        continue;
      }
      head = job.id;
      if (backfill_) {
        reservation =
            policy_internal::reserve(cluster, free, releases, shape, nullptr, Fit::kFirst, s.now_s);
      }
      if (reservation) {
        wait("reserved", "first in line: " + reason, reservation->start_s);
      } else {
        wait(kind, reason);
      }
    }
    return plan;
  }

 private:
  bool backfill_;
};

}  // namespace

std::unique_ptr<Policy> make_fifo_policy() {
  return std::make_unique<OrderedPolicy>(false);
}
std::unique_ptr<Policy> make_easy_policy() {
  return std::make_unique<OrderedPolicy>(true);
}

}  // namespace kiln::sched
