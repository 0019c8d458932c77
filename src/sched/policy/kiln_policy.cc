// The kiln policy: order (starvation, priority, fair share, age), quota and borrowing, gang
// placement packed into failure domains, EASY backfill and cooperative preemption. The rules and
// why are in policy.h; this file is the pass that applies them to one snapshot.
#include <algorithm>
#include <cmath>
#include <set>
#include <unordered_map>

#include <kiln/sched/fair_share.h>
#include <kiln/sched/policy.h>

#include "sched/policy/cluster.h"
#include "sched/policy/quota.h"
#include "sched/policy/reservation.h"

namespace kiln::sched {
namespace {

using policy_internal::Admit;
using policy_internal::Amount;
using policy_internal::Choice;
using policy_internal::Cluster;
using policy_internal::Fit;
using policy_internal::QuotaBook;
using policy_internal::Release;
using policy_internal::Reservation;
using policy_internal::Shape;
using policy_internal::Usage;

std::string seconds_text(double s) {
  if (s == kNever) return "unknown (jobs without a time limit hold the nodes)";
  return std::to_string(static_cast<int64_t>(std::ceil(s))) + " s";
}

// A shape that could not be placed in this plan. Within one plan free capacity only shrinks, so
// a job asking at least as much of at most the same nodes cannot be placed either: thousands of
// queued jobs cost a comparison each, not a pass over every node.
struct Failure {
  Shape shape;
  bool limited = false;  // failed under the reservation's limit
  std::string kind, reason;
};

// The pool a blocked job waits in: the first within its quota, then the first it may borrow in,
// that has enough matching nodes for it; else the first it may use at all.
uint64_t home_pool(const Cluster& cluster, const Shape& shape, uint64_t nominal, uint64_t borrow) {
  const size_t pools = cluster.pool_names.size();
  const uint64_t any = nominal | borrow;
  if (pools <= 1 || (any & (any - 1)) == 0) return any;
  for (const uint64_t mask : {nominal, borrow}) {
    for (size_t p = 0; p < pools; ++p) {
      if (!((mask >> p) & 1)) continue;
      Shape one = shape;
      one.pools = uint64_t{1} << p;
      int matching = 0;
      for (size_t i = 0; i < cluster.size() && matching < shape.min_nodes; ++i)
        matching += cluster.matches(i, one);
      if (matching >= shape.min_nodes) return one.pools;
    }
  }
  return any & (~any + 1);  // the lowest bit
}

// Failed shapes remembered per plan: a bound on the comparisons per job.
constexpr size_t kFailuresMax = 256;

bool dominated(const Shape& s, bool limited, const Failure& f) {
  const Shape& g = f.shape;
  return (!f.limited || limited) && s.need.slots >= g.need.slots && s.need.cpus >= g.need.cpus &&
         s.need.memory >= g.need.memory && s.need.gpus >= g.need.gpus &&
         (s.models & ~g.models) == 0 && (s.pools & ~g.pools) == 0 && s.min_nodes >= g.min_nodes &&
         static_cast<int>(s.topology.same) * s.topology.required >=
             static_cast<int>(g.topology.same) * g.topology.required &&
         s.topology.spread == g.topology.spread && s.preflight >= g.preflight;
}

class KilnPolicy final : public Policy {
 public:
  explicit KilnPolicy(KilnPolicyOptions options) : options_(options) {}
  std::string_view name() const override { return "kiln"; }

  Plan decide(const Snapshot& s) const override {
    Plan plan;
    const Cluster cluster(s);
    QuotaBook book(s, cluster);
    std::vector<Amount> free = cluster.free;
    const size_t pools = cluster.pool_names.size();
    const NodeResources totals = cluster_totals(s.nodes);
    std::vector<uint8_t> stopping(s.running.size());
    // Whom a stopping allocation's resources are for: the job it was preempted for (in an earlier
    // plan or this one); empty: whoever comes first (a fault, a cancel).
    std::vector<std::string> claimed_by(s.running.size());
    bool any_stopping = false;
    for (size_t a = 0; a < s.running.size(); ++a) {
      stopping[a] = s.running[a].stopping;
      if (stopping[a]) claimed_by[a] = s.running[a].preempted_for;
      any_stopping = any_stopping || stopping[a];
    }
    // `free` plus what the stopping allocations that `id` may have will release.
    auto with_stopping = [&](const std::string& id) {
      std::vector<Amount> after = free;
      for (size_t a = 0; a < s.running.size(); ++a) {
        if (!stopping[a] || (!claimed_by[a].empty() && claimed_by[a] != id)) continue;
        for (int32_t n : s.running[a].nodes)
          policy_internal::give(&after[static_cast<size_t>(n)],
                                policy_internal::amount_of(s.running[a].per_node));
      }
      return after;
    };
    const std::vector<uint8_t> borrowed = book.borrowed(s, cluster);
    // The allocations a preemption may take (victims()), and cheap tests before a victim search:
    // the lowest priority among them per queue, and the queues whose cohort has a borrower among
    // them to reclaim from. A cycle with 5,000 blocked jobs and no possible victim costs nothing.
    std::vector<size_t> victims_possible;
    std::map<std::string, int> lowest_priority;
    std::set<int> lenders;
    for (size_t a = 0; a < s.running.size(); ++a) {
      const Allocation& al = s.running[a];
      if (!victim_ok(al, s.now_s)) continue;
      victims_possible.push_back(a);
      auto [it, fresh] = lowest_priority.emplace(al.queue, al.priority);
      if (!fresh) it->second = std::min(it->second, al.priority);
      const int aq = book.queue(al.queue);
      if (!borrowed[a] || aq < 0) continue;
      for (const QueueSpec& other : s.queues) {
        const int oq = book.queue(other.name);
        if (oq != aq && book.same_cohort(oq, aq)) lenders.insert(oq);
      }
    }

    // Teams: weight, current share (fair share looks ahead at what is allocated now).
    std::map<std::string, double> weight, share;
    for (const QueueSpec& q : s.queues)
      weight.emplace(q.team.empty() ? q.name : q.team, q.weight > 0 ? q.weight : 1);
    auto team_of = [&](const std::string& queue) -> std::string {
      const int q = book.queue(queue);
      return q < 0 ? queue : book.team(q);
    };
    for (const Allocation& a : s.running)
      share[team_of(a.queue)] +=
          dominant_share(a.per_node, static_cast<int64_t>(a.nodes.size()), totals);
    auto fair_key = [&](const std::string& team) {
      auto u = s.team_usage.find(team);
      const double used =
          (u == s.team_usage.end() ? 0 : u->second) + options_.fair_share_lookahead_s * share[team];
      auto w = weight.find(team);
      return used / (w == weight.end() ? 1.0 : w->second);
    };

    // Per team, its jobs in order; the plan merges the teams' heads.
    struct Item {
      size_t job;
      bool starving;
      bool claims;  // jobs were preempted for it: what they free is its
    };
    // Jobs others were preempted for, while their victims stop or wait requeued: they go first,
    // or what the preemption freed would go to a job ahead of them and the preemption (and the
    // victim's lost time) would be for nothing.
    std::set<std::string> claimants;
    for (const Allocation& a : s.running)
      if (a.stopping && !a.preempted_for.empty()) claimants.insert(a.preempted_for);
    for (const JobView& j : s.waiting)
      if (!j.preempted_by.empty()) claimants.insert(j.preempted_by);
    std::map<std::string, std::vector<Item>> by_team;
    for (size_t j = 0; j < s.waiting.size(); ++j) {
      const JobView& job = s.waiting[j];
      const double waited = s.now_s - job.submit_s;
      const double bound =
          job.time_limit_s > 0
              ? std::max(options_.starvation_factor * job.time_limit_s, options_.starvation_min_s)
              : options_.starvation_no_limit_s;
      by_team[team_of(job.queue)].push_back(Item{j, waited > bound, claimants.count(job.id) != 0});
    }
    auto before = [&](const Item& a, const Item& b) {
      const JobView& x = s.waiting[a.job];
      const JobView& y = s.waiting[b.job];
      if (a.claims != b.claims) return a.claims;
      if (a.starving != b.starving) return a.starving;
      if (a.starving && x.submit_s != y.submit_s) return x.submit_s < y.submit_s;
      if (x.priority != y.priority) return x.priority > y.priority;
      return x.seq < y.seq;
    };
    struct Lane {
      std::string team;
      std::vector<Item> items;
      size_t next = 0;
    };
    // A team's entitled share: its weight over the weights of the teams that want the cluster
    // now (waiting or running).
    double weights_active = 0;
    std::set<std::string> active;
    for (const auto& [team, items] : by_team)
      active.insert(team);
    for (const auto& [team, sh] : share)
      active.insert(team);
    auto weight_of = [&](const std::string& team) {
      auto w = weight.find(team);
      return w == weight.end() ? 1.0 : w->second;
    };
    for (const std::string& team : active)
      weights_active += weight_of(team);
    auto entitled = [&](const std::string& team) { return weight_of(team) / weights_active; };
    std::vector<Lane> lanes;
    for (auto& [team, items] : by_team) {
      std::sort(items.begin(), items.end(), before);
      lanes.push_back(Lane{team, std::move(items), 0});
    }

    std::optional<Reservation> reservation;
    std::vector<Release> placed_releases;  // this plan's placements, for the reservation
    std::vector<std::vector<int32_t>> placed_nodes;
    placed_nodes.reserve(s.waiting.size());
    std::vector<Failure> failures;
    failures.reserve(kFailuresMax);  // `known` points into it: it must never reallocate
    std::map<std::string, int> positions;
    std::unordered_map<std::string, size_t> node_index;
    size_t preempt_tries = 0;

    auto wait = [&](const JobView& job, std::string kind, std::string reason, double start = -1) {
      WaitInfo& w = plan.waiting[job.id];
      w.kind = std::move(kind);
      w.reason = std::move(reason);
      w.queue = job.queue;
      w.position = ++positions[job.queue];
      w.start_s = start;
    };

    // Behind the reservation, the jobs left are backfill candidates: they only take what cannot
    // delay the head, so their order decides only which of them fill the holes. Shortest time
    // limit first (after jobs others were preempted for, then priority): short jobs fit more
    // holes and wait least relative to their length (Tsafrir et al.'s shortest-job-backfilled-
    // first), and none of them can pass the head.
    std::vector<std::pair<Lane*, Item>> backfill;
    size_t backfill_next = 0;
    bool backfill_ordered = false;
    while (true) {
      Lane* pick = nullptr;
      Item item{};
      if (reservation && options_.backfill && options_.shortest_backfill_first) {
        if (!backfill_ordered) {
          for (Lane& l : lanes)
            for (size_t k = l.next; k < l.items.size(); ++k)
              backfill.emplace_back(&l, l.items[k]);
          for (Lane& l : lanes)
            l.next = l.items.size();
          auto limit = [&](const Item& it) {
            const double t = s.waiting[it.job].time_limit_s;
            return t > 0 ? t : kNever;
          };
          std::stable_sort(backfill.begin(), backfill.end(), [&](const auto& a, const auto& b) {
            const JobView& x = s.waiting[a.second.job];
            const JobView& y = s.waiting[b.second.job];
            if (a.second.claims != b.second.claims) return a.second.claims;
            if (x.priority != y.priority) return x.priority > y.priority;
            if (limit(a.second) != limit(b.second)) return limit(a.second) < limit(b.second);
            return x.seq < y.seq;
          });
          backfill_ordered = true;
        }
        if (backfill_next >= backfill.size()) break;
        pick = backfill[backfill_next].first;
        item = backfill[backfill_next++].second;
      } else {
        // The next job among the lanes' heads: one others were preempted for, then a starving
        // one of a team below its entitled share, then priority, then the team furthest below
        // its fair share, then submit order. A starving job of a team at or above its share
        // waits its turn: under a sustained backlog every job starves, and letting all of them
        // jump would undo the teams' weights.
        int pick_urgent = 0;
        for (Lane& lane : lanes) {
          if (lane.next >= lane.items.size()) continue;
          const Item& a = lane.items[lane.next];
          // 2: jobs were preempted for it; 1: starving while its team is below its share.
          const int urgent = a.claims ? 2 : a.starving && share[lane.team] < entitled(lane.team);
          if (pick == nullptr) {
            pick = &lane;
            pick_urgent = urgent;
            continue;
          }
          const JobView& x = s.waiting[a.job];
          const JobView& y = s.waiting[pick->items[pick->next].job];
          bool better;
          if (urgent != pick_urgent) {
            better = urgent > pick_urgent;
          } else if (x.priority != y.priority) {
            better = x.priority > y.priority;
          } else {
            const double ka = fair_key(lane.team), kb = fair_key(pick->team);
            better = ka != kb ? ka < kb : x.seq < y.seq;
          }
          if (better) pick_urgent = urgent;
          if (better) pick = &lane;
        }
        if (pick == nullptr) break;
        item = pick->items[pick->next++];
      }
      Lane& lane = *pick;
      const JobView& job = s.waiting[item.job];
      if (reservation && !options_.backfill) {
        wait(job, "behind", "behind " + reservation->job_id + " (backfill is off)");
        continue;
      }
      const int q = book.queue(job.queue);
      if (q < 0) {
        wait(job, "unknown-queue", "queue " + job.queue + " is not configured");
        continue;
      }
      Shape shape = cluster.shape_of(job);
      const Usage request = policy_internal::usage_of(job.per_node, shape.max_nodes);
      uint64_t nominal = 0, borrow = 0;
      std::string quota_why;
      for (size_t p = 0; p < pools; ++p) {
        std::string why;
        switch (book.check(q, p, request, &why)) {
          case Admit::kNominal: nominal |= uint64_t{1} << p; break;
          case Admit::kBorrow: borrow |= uint64_t{1} << p; break;
          case Admit::kNo:
            if (quota_why.empty()) quota_why = why;
            break;
        }
      }
      if (nominal == 0 && borrow == 0) {
        wait(job, "quota", quota_why.empty() ? "no pool has nodes" : quota_why);
        continue;
      }
      const double end_s = job.time_limit_s > 0 ? s.now_s + job.time_limit_s : kNever;
      const bool limited =
          reservation.has_value() && policy_internal::outlives(end_s, *reservation);
      std::vector<uint8_t> avoid;
      if (!job.avoid.empty()) {
        if (node_index.empty())
          for (size_t i = 0; i < s.nodes.size(); ++i)
            node_index.emplace(s.nodes[i].name, i);
        avoid.assign(s.nodes.size(), 0);
        for (const std::string& n : job.avoid) {
          auto it = node_index.find(n);
          if (it != node_index.end()) avoid[it->second] = 1;
        }
      }
      const std::vector<uint8_t>* avoid_ptr = avoid.empty() ? nullptr : &avoid;

      // Place now: pools within quota first, then pools it may borrow in; one pool per gang.
      std::optional<Choice> choice;
      bool on_borrowed = false;
      size_t pool_used = 0;
      const Failure* known = nullptr;
      for (int pass = 0; pass < 2 && !choice; ++pass) {
        const uint64_t mask = pass == 0 ? nominal : borrow;
        for (size_t p = 0; p < pools && !choice; ++p) {
          if (!((mask >> p) & 1)) continue;
          shape.pools = uint64_t{1} << p;
          known = nullptr;
          for (const Failure& f : failures)
            if (dominated(shape, limited, f)) known = &f;
          if (known != nullptr) continue;
          choice = policy_internal::choose_nodes(cluster, free, shape, avoid_ptr, Fit::kBest,
                                                 limited ? &reservation->limit : nullptr);
          if (choice) {
            on_borrowed = pass == 1;
            pool_used = p;
          } else if (failures.size() < kFailuresMax) {
            Failure f{shape, limited, "", ""};
            f.reason = policy_internal::explain_no_fit(cluster, free, shape, &f.kind);
            if (limited) {
              f.kind = "behind";
              f.reason += "; the rest is held for the head job's reserved start";
            }
            failures.push_back(std::move(f));
            known = &failures.back();
          }
        }
      }
      // Blocked: what follows (waiting for stopping jobs, preemption, the reservation) looks at
      // one pool, as placement does: a gang never spans pools.
      shape.pools = home_pool(cluster, shape, nominal, borrow);
      if (choice) {
        Placement p;
        p.job_id = job.id;
        for (int32_t n : choice->nodes)
          p.nodes.push_back(cluster.name(static_cast<size_t>(n)));
        p.why = choice->why;
        if (pools > 1) p.why += " in pool " + cluster.pool_names[pool_used];
        p.borrowed = on_borrowed;
        p.backfilled = reservation.has_value();
        if (on_borrowed) p.why += " (borrowed from cohort)";
        if (p.backfilled) p.why += " (backfilled ahead of " + reservation->job_id + ")";
        plan.placements.push_back(std::move(p));
        policy_internal::commit(choice->nodes, shape.need, end_s, &free,
                                reservation ? &*reservation : nullptr);
        book.charge(
            q, pool_used,
            policy_internal::usage_of(job.per_node, static_cast<int64_t>(choice->nodes.size())));
        share[lane.team] +=
            dominant_share(job.per_node, static_cast<int64_t>(choice->nodes.size()), totals);
        placed_nodes.push_back(std::move(choice->nodes));
        placed_releases.push_back(Release{end_s, s.now_s, &placed_nodes.back(), shape.need});
        continue;
      }

      // Blocked. Stopping jobs release soon: if that is enough, wait for them. The releases
      // matter only to the first blocked job (the reservation), so later ones skip building them.
      std::vector<Release> releases;
      if (!reservation) {
        releases = placed_releases;
        for (size_t a = 0; a < s.running.size(); ++a) {
          const Allocation& al = s.running[a];
          releases.push_back(Release{stopping[a] ? s.now_s : al.end_s, al.start_s, &al.nodes,
                                     policy_internal::amount_of(al.per_node)});
        }
      }
      if (any_stopping && !reservation) {
        const std::vector<Amount> after = with_stopping(job.id);
        if (policy_internal::choose_nodes(cluster, after, shape, avoid_ptr, Fit::kBest, nullptr)) {
          reservation = policy_internal::reserve(cluster, free, releases, shape, avoid_ptr,
                                                 Fit::kBest, s.now_s);
          if (reservation) reservation->job_id = job.id;
          wait(job, "preempting", "waiting for stopping job(s) to release their nodes");
          continue;
        }
      }
      // Preemption: lower-priority jobs of its own queue, and borrowers of its cohort where its
      // own quota covers it.
      const bool may_preempt =
          (lowest_priority.count(job.queue) != 0 && lowest_priority[job.queue] < job.priority) ||
          (nominal != 0 && lenders.count(q) != 0);
      if (options_.preemption && may_preempt && preempt_tries < 16) {
        bool covered = false;
        std::vector<size_t> victims = find_victims(
            s, cluster, book, with_stopping(job.id), stopping, borrowed, victims_possible, job, q,
            shape, nominal, avoid_ptr, &preempt_tries, &covered);
        if (covered) {
          // What is already stopping makes room: preempting more would be a cascade.
          wait(job, "preempting", "waiting for stopping job(s) to release their nodes");
          continue;
        }
        if (!victims.empty()) {
          std::string names;
          any_stopping = true;
          for (size_t a : victims) {
            stopping[a] = 1;
            claimed_by[a] = job.id;
            const Allocation& al = s.running[a];
            const bool reclaim = al.queue != job.queue;
            plan.preemptions.push_back(Preemption{
                al.job_id, job.id,
                reclaim ? "reclaim: queue " + job.queue + " needs its quota back from " + al.queue
                        : "priority " + std::to_string(job.priority) + " job " + job.id +
                              " needs the nodes of priority " + std::to_string(al.priority)});
            names += (names.empty() ? "" : ", ") + al.job_id;
          }
          if (!reservation) {
            for (Release& r : releases)
              for (size_t a : victims)
                if (r.nodes == &s.running[a].nodes) r.end_s = s.now_s;
            reservation = policy_internal::reserve(cluster, free, releases, shape, avoid_ptr,
                                                   Fit::kBest, s.now_s);
            if (reservation) reservation->job_id = job.id;
          }
          wait(job, "preempting", "preempting " + names);
          continue;
        }
      }
      std::string kind = known != nullptr ? known->kind : "capacity";
      std::string reason = known != nullptr ? known->reason : "";
      if (reason.empty()) reason = policy_internal::explain_no_fit(cluster, free, shape, &kind);
      if (!reservation) {
        reservation = policy_internal::reserve(cluster, free, releases, shape, avoid_ptr,
                                               Fit::kBest, s.now_s);
        if (reservation) {
          reservation->job_id = job.id;
          wait(job, "reserved",
               "first in line: " + reason + "; reserved start in " +
                   seconds_text(reservation->start_s - s.now_s),
               reservation->start_s);
          continue;
        }
        wait(job, kind, reason);
        continue;
      }
      wait(job, "behind",
           "behind " + reservation->job_id + " (reserved start in " +
               seconds_text(reservation->start_s - s.now_s) + "); " + reason);
    }
    return plan;
  }

 private:
  // Whether `al` may be preempted at all: not already stopping, preemptible, not preempted too
  // often already, not just started (no thrash), not about to end by its limit anyway.
  bool victim_ok(const Allocation& al, double now_s) const {
    return !al.stopping && al.preemptible && !al.nodes.empty() &&
           now_s - al.start_s >= options_.preempt_min_runtime_s &&
           al.preemptions < options_.preemptions_per_job_max &&
           al.end_s - now_s >= options_.preempt_min_runtime_s;
  }

  // The fewest victims (by the order below) whose nodes let `job` fit; empty when none do.
  // `free` already holds what the stopping allocations this job may have will release.
  std::vector<size_t> find_victims(const Snapshot& s, const Cluster& cluster, const QuotaBook& book,
                                   const std::vector<Amount>& free,
                                   const std::vector<uint8_t>& stopping,
                                   const std::vector<uint8_t>& borrowed,
                                   const std::vector<size_t>& possible, const JobView& job, int q,
                                   const Shape& shape, uint64_t nominal,
                                   const std::vector<uint8_t>* avoid, size_t* tries,
                                   bool* covered) const {
    std::vector<size_t> candidates;
    for (size_t a : possible) {
      const Allocation& al = s.running[a];
      if (stopping[a]) continue;  // chosen earlier in this plan
      const size_t pool = cluster.pool[static_cast<size_t>(al.nodes[0])];
      if (!((shape.pools >> pool) & 1)) continue;
      const bool lower_in_queue = al.queue == job.queue && al.priority < job.priority;
      const int aq = book.queue(al.queue);
      const bool reclaim = al.queue != job.queue && ((nominal >> pool) & 1) && borrowed[a] &&
                           aq >= 0 && book.same_cohort(q, aq);
      if (lower_in_queue || reclaim) candidates.push_back(a);
    }
    if (candidates.empty()) return {};
    ++*tries;
    // Least harm first: borrowed capacity, then lowest priority, then least work since the last
    // checkpoint, then the most recently started.
    auto lost = [&](const Allocation& al) {
      return s.now_s - std::max(al.last_checkpoint_s, al.start_s);
    };
    std::sort(candidates.begin(), candidates.end(), [&](size_t x, size_t y) {
      const Allocation& a = s.running[x];
      const Allocation& b = s.running[y];
      if (borrowed[x] != borrowed[y]) return borrowed[x] > borrowed[y];
      if (a.priority != b.priority) return a.priority < b.priority;
      if (lost(a) != lost(b)) return lost(a) < lost(b);
      return a.start_s > b.start_s;
    });
    if (candidates.size() > options_.victims_max) candidates.resize(options_.victims_max);
    std::vector<Amount> after = free;  // with what stopping jobs release for this one
    auto release = [&](size_t a, bool back) {
      const Amount need = policy_internal::amount_of(s.running[a].per_node);
      for (int32_t n : s.running[a].nodes) {
        Amount& f = after[static_cast<size_t>(n)];
        back ? policy_internal::give(&f, need) : policy_internal::take(&f, need);
      }
    };
    auto fits = [&] {
      return policy_internal::choose_nodes(cluster, after, shape, avoid, Fit::kBest, nullptr)
          .has_value();
    };
    if (fits()) {
      *covered = true;
      return {};
    }
    std::vector<size_t> victims;
    bool ok = false;
    for (size_t a : candidates) {
      release(a, true);
      victims.push_back(a);
      if (fits()) {
        ok = true;
        break;
      }
    }
    if (!ok) return {};
    // Keep only the victims it needs: the first ones may have been too small to matter.
    for (size_t k = victims.size() - 1; k-- > 0;) {
      release(victims[k], false);
      if (fits()) {
        victims.erase(victims.begin() + static_cast<std::ptrdiff_t>(k));
      } else {
        release(victims[k], true);
      }
    }
    return victims;
  }

  KilnPolicyOptions options_;
};

}  // namespace

std::unique_ptr<Policy> make_kiln_policy(KilnPolicyOptions options) {
  return std::make_unique<KilnPolicy>(options);
}

}  // namespace kiln::sched
