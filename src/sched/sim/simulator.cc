// The simulator's event loop and its report. See sim.h for the model.
#include <algorithm>
#include <cmath>
#include <queue>
#include <unordered_map>

#include <kiln/sched/fair_share.h>
#include <kiln/sched/sim.h>

namespace kiln::sched {
namespace {

enum class Phase { kPending, kWaiting, kRunning, kStopping, kDone, kRejected };

struct SimJobState {
  Phase phase = Phase::kPending;
  double remaining_s = 0;  // work left
  double attempt_start_s = 0;
  double attempt_run_s = 0;  // how long this attempt runs if nothing interrupts it
  uint64_t generation = 0;   // invalidates an end event of an earlier attempt
  std::vector<int32_t> nodes;
  size_t waiting_slot = 0;   // index in snapshot.waiting while waiting
  size_t running_slot = 0;   // index in snapshot.running while running or stopping
  std::string preempted_by;  // the job it was last preempted for, until it runs again
};

struct Event {
  double at_s;
  size_t job;
  uint64_t generation;
  bool operator>(const Event& o) const { return at_s != o.at_s ? at_s > o.at_s : job > o.job; }
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = p * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

// Removes element `slot` by moving the last one into it; `fix` updates the moved one's index.
template <typename T, typename Fix>
void swap_remove(std::vector<T>* v, size_t slot, Fix fix) {
  if (slot + 1 != v->size()) {
    (*v)[slot] = std::move(v->back());
    fix((*v)[slot], slot);
  }
  v->pop_back();
}

}  // namespace

nlohmann::ordered_json sim_report_json(const SimReport& r) {
  nlohmann::ordered_json j;
  j["policy"] = r.policy;
  j["jobs"] = r.jobs;
  j["completed"] = r.completed;
  j["rejected"] = r.rejected;
  j["makespan_s"] = r.makespan_s;
  j["utilization"] = r.utilization;
  j["mean_wait_s"] = r.mean_wait_s;
  j["p95_wait_s"] = r.p95_wait_s;
  j["max_wait_s"] = r.max_wait_s;
  j["mean_bounded_slowdown"] = r.mean_bounded_slowdown;
  j["preemptions"] = r.preemptions;
  j["cycle_ms_median"] = r.cycle_ms_median;
  j["cycle_ms_p99"] = r.cycle_ms_p99;
  j["cycles"] = r.cycles;
  j["cycles_timed"] = r.cycles_timed;
  j["queued_median"] = r.queued_median;
  j["queued_max"] = r.queued_max;
  j["starvation_ratio_max"] = r.starvation_ratio_max;
  return j;
}

Result<SimReport> simulate(const Trace& trace, const Policy& policy, const SimOptions& options,
                           const Clock& clock) {
  SimReport report;
  report.policy = std::string(policy.name());
  report.jobs = trace.jobs.size();
  const size_t n_jobs = trace.jobs.size();
  std::vector<SimJobState> state(n_jobs);
  report.outcomes.resize(n_jobs);

  Snapshot snap;
  snap.nodes = trace.nodes;
  snap.queues = trace.queues;
  std::vector<size_t> waiting_job, running_job;  // snapshot slot -> trace index
  std::unordered_map<std::string, size_t> by_id;
  for (size_t j = 0; j < n_jobs; ++j)
    by_id.emplace(trace.jobs[j].job.id, j);
  std::unordered_map<std::string, int32_t> node_index;
  for (size_t i = 0; i < trace.nodes.size(); ++i)
    node_index.emplace(trace.nodes[i].name, static_cast<int32_t>(i));

  // Jobs in submit order (stable: file order breaks ties).
  std::vector<size_t> arrivals(n_jobs);
  for (size_t j = 0; j < n_jobs; ++j)
    arrivals[j] = j;
  std::stable_sort(arrivals.begin(), arrivals.end(), [&](size_t a, size_t b) {
    return trace.jobs[a].job.submit_s < trace.jobs[b].job.submit_s;
  });
  std::unordered_map<std::string, std::string> idle_fit;  // shape -> why it never fits ("": fits)
  double max_limit = 0;
  for (const SimJob& j : trace.jobs)
    max_limit = std::max(max_limit, j.job.time_limit_s);

  const NodeResources totals = cluster_totals(trace.nodes);
  const bool by_gpu = totals.gpus > 0;
  FairShareLedger ledger(options.fair_share_half_life_s);
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events;
  double allocated = 0;  // GPU- (or CPU-) seconds
  std::vector<double> cycle_ms, queued;
  size_t next_arrival = 0;
  double first_submit = n_jobs > 0 ? trace.jobs[arrivals[0]].job.submit_s : 0;
  double last_end = first_submit;

  auto node_use = [&](size_t j, int sign) {
    const NodeResources& need = trace.jobs[j].job.per_node;
    for (int32_t n : state[j].nodes) {
      NodeResources& u = snap.nodes[static_cast<size_t>(n)].used;
      u.cpus += sign * need.cpus;
      u.memory_bytes += sign * need.memory_bytes;
      u.gpus += sign * need.gpus;
    }
  };
  auto to_waiting = [&](size_t j) {
    state[j].phase = Phase::kWaiting;
    state[j].waiting_slot = snap.waiting.size();
    snap.waiting.push_back(trace.jobs[j].job);
    snap.waiting.back().preempted_by = state[j].preempted_by;
    waiting_job.push_back(j);
  };
  auto leave_waiting = [&](size_t j) {
    const size_t slot = state[j].waiting_slot;
    swap_remove(&snap.waiting, slot, [](JobView&, size_t) {});
    swap_remove(&waiting_job, slot,
                [&](size_t& moved, size_t s) { state[moved].waiting_slot = s; });
  };
  auto leave_running = [&](size_t j, double at) {
    const size_t slot = state[j].running_slot;
    swap_remove(&snap.running, slot, [](Allocation&, size_t) {});
    swap_remove(&running_job, slot,
                [&](size_t& moved, size_t s) { state[moved].running_slot = s; });
    node_use(j, -1);
    const double ran = at - state[j].attempt_start_s;
    const JobView& v = trace.jobs[j].job;
    const double per_node = static_cast<double>(by_gpu ? v.per_node.gpus : v.per_node.cpus);
    allocated += ran * per_node * static_cast<double>(state[j].nodes.size());
    report.outcomes[j].service_s += ran;
  };

  double now = first_submit;  // the time of the last event handled
  while (true) {
    double t = kNever;
    if (next_arrival < n_jobs) t = trace.jobs[arrivals[next_arrival]].job.submit_s;
    while (!events.empty() && events.top().generation != state[events.top().job].generation)
      events.pop();  // an end of an attempt that was preempted
    if (!events.empty()) t = std::min(t, events.top().at_s);
    if (t == kNever) break;
    now = t;
    // Ends first: what they free is there for the jobs that arrive at the same time.
    while (!events.empty() && events.top().at_s <= t) {
      const Event e = events.top();
      events.pop();
      SimJobState& js = state[e.job];
      if (e.generation != js.generation) continue;
      leave_running(e.job, t);
      ++js.generation;
      last_end = std::max(last_end, t);
      if (js.phase == Phase::kStopping) {
        // Checkpointed at SIGTERM: the work done before the stop began is kept.
        js.remaining_s =
            std::max(0.0, js.remaining_s - (t - options.preempt_grace_s - js.attempt_start_s));
        to_waiting(e.job);
      } else {
        js.phase = Phase::kDone;
        report.outcomes[e.job].completed = true;
        report.outcomes[e.job].end_s = t;
      }
    }
    while (next_arrival < n_jobs && trace.jobs[arrivals[next_arrival]].job.submit_s <= t) {
      const size_t j = arrivals[next_arrival++];
      const SimJob& sj = trace.jobs[j];
      SimOutcome& o = report.outcomes[j];
      o.name = sj.job.id;
      o.queue = sj.job.queue;
      o.submit_s = sj.job.submit_s;
      state[j].remaining_s = sj.duration_s;
      // The idle-cluster test costs a pass over every node: jobs of one shape share its answer.
      std::string key = std::to_string(sj.job.nodes) + "/" + std::to_string(sj.job.per_node.cpus) +
                        "/" + std::to_string(sj.job.per_node.memory_bytes) + "/" +
                        std::to_string(sj.job.per_node.gpus);
      for (const std::string& m : sj.job.gpu_models)
        key += "/" + m;
      auto known = idle_fit.find(key);
      if (known == idle_fit.end()) {
        std::string why;
        const bool fits = fits_idle_cluster(sj.job, trace.nodes, &why);
        known = idle_fit.emplace(key, fits ? std::string() : why).first;
      }
      const std::string& why = known->second;
      if (!why.empty()) {
        state[j].phase = Phase::kRejected;
        o.rejected = true;
        o.reject_reason = why;
        ++report.rejected;
        continue;
      }
      to_waiting(j);
    }
    // Fair share follows every change of what runs, whether or not anything waits.
    ledger.advance(t, team_shares(snap));
    if (snap.waiting.empty()) continue;
    if (options.cycles_max > 0 && report.cycles >= options.cycles_max) break;

    snap.now_s = t;
    snap.team_usage = ledger.usage();
    const int64_t t0 = clock.monotonic_ns();
    const Plan plan = policy.decide(snap);
    if (snap.waiting.size() >= options.timing_queued_min) {
      cycle_ms.push_back(static_cast<double>(clock.monotonic_ns() - t0) / 1e6);
    }
    queued.push_back(static_cast<double>(snap.waiting.size()));
    report.queued_max = std::max(report.queued_max, snap.waiting.size());
    ++report.cycles;

    for (const Preemption& p : plan.preemptions) {
      auto it = by_id.find(p.victim);
      if (it == by_id.end() || state[it->second].phase != Phase::kRunning) {
        return Status::aborted(std::string(policy.name()) + " preempted " + p.victim +
                               ", which is not running");
      }
      const size_t j = it->second;
      SimJobState& js = state[j];
      snap.running[js.running_slot].stopping = true;
      snap.running[js.running_slot].preempted_for = p.for_job;
      // It stops after the grace period, unless it ends by itself first (then no requeue).
      const double stop_at = t + options.preempt_grace_s;
      if (js.attempt_start_s + js.attempt_run_s <= stop_at) continue;
      js.phase = Phase::kStopping;
      js.preempted_by = p.for_job;
      ++js.generation;
      events.push(Event{stop_at, j, js.generation});
      ++report.outcomes[j].preemptions;
      ++report.preemptions;
    }
    for (const Placement& p : plan.placements) {
      auto it = by_id.find(p.job_id);
      if (it == by_id.end() || state[it->second].phase != Phase::kWaiting) {
        return Status::aborted(std::string(policy.name()) + " placed " + p.job_id +
                               ", which is not waiting");
      }
      const size_t j = it->second;
      SimJobState& js = state[j];
      const JobView& v = trace.jobs[j].job;
      if (p.nodes.size() != static_cast<size_t>(v.nodes)) {
        return Status::aborted(std::string(policy.name()) + " placed " + p.job_id + " on " +
                               std::to_string(p.nodes.size()) + " nodes, it needs " +
                               std::to_string(v.nodes));
      }
      leave_waiting(j);
      js.preempted_by.clear();
      js.nodes.clear();
      for (const std::string& name : p.nodes) {
        auto n = node_index.find(name);
        if (n == node_index.end()) {
          return Status::aborted(std::string(policy.name()) + " placed " + p.job_id +
                                 " on unknown node " + name);
        }
        js.nodes.push_back(n->second);
      }
      node_use(j, +1);
      for (int32_t n : js.nodes) {
        const NodeView& nv = snap.nodes[static_cast<size_t>(n)];
        const NodeResources& c = nv.capacity;
        const NodeResources& u = nv.used;
        if (u.cpus > c.cpus || u.memory_bytes > c.memory_bytes || u.gpus > c.gpus) {
          return Status::aborted(std::string(policy.name()) + " overcommitted node " + nv.name +
                                 " with " + p.job_id);
        }
      }
      js.phase = Phase::kRunning;
      js.attempt_start_s = t;
      js.attempt_run_s = std::min(js.remaining_s, v.time_limit_s);
      if (report.outcomes[j].first_start_s < 0) report.outcomes[j].first_start_s = t;
      ++js.generation;
      events.push(Event{t + js.attempt_run_s, j, js.generation});
      js.running_slot = snap.running.size();
      running_job.push_back(j);
      Allocation a;
      a.job_id = v.id;
      a.queue = v.queue;
      a.priority = v.priority;
      a.nodes = js.nodes;
      a.per_node = v.per_node;
      a.start_s = t;
      a.end_s = t + v.time_limit_s;
      a.last_checkpoint_s = t;  // cooperative preemption checkpoints at SIGTERM: nothing is lost
      a.preemptions = report.outcomes[j].preemptions;
      snap.running.push_back(std::move(a));
    }
    if (!plan.placements.empty()) ledger.advance(t, team_shares(snap));  // from now on
    for (const auto& [id, w] : plan.waiting) {
      if (w.kind != "reserved") continue;
      auto it = by_id.find(id);
      if (it == by_id.end()) continue;
      SimOutcome& o = report.outcomes[it->second];
      if (!o.reserved_head) {
        o.reserved_head = true;
        o.first_reserved_start_s = w.start_s;
      }
    }
  }

  // Stopped early (cycles_max): what still runs counts up to the last event.
  while (!running_job.empty())
    leave_running(running_job.back(), now);
  last_end = std::max(last_end, now);

  // Figures over the jobs that completed.
  std::vector<double> waits;
  double slowdown = 0;
  for (size_t j = 0; j < n_jobs; ++j) {
    SimOutcome& o = report.outcomes[j];
    if (!o.completed) continue;
    ++report.completed;
    o.wait_s = std::max(0.0, o.end_s - o.submit_s - o.service_s);
    waits.push_back(o.wait_s);
    slowdown += std::max(1.0, (o.wait_s + o.service_s) / std::max(o.service_s, 10.0));
    const double bound = 5 * trace.jobs[j].duration_s + max_limit;
    report.starvation_ratio_max = std::max(report.starvation_ratio_max, o.wait_s / bound);
  }
  report.makespan_s = last_end - first_submit;
  const double capacity = static_cast<double>(by_gpu ? totals.gpus : totals.cpus);
  report.utilization =
      report.makespan_s > 0 && capacity > 0 ? allocated / (capacity * report.makespan_s) : 0;
  if (!waits.empty()) {
    double sum = 0;
    for (double w : waits)
      sum += w;
    report.mean_wait_s = sum / static_cast<double>(waits.size());
    report.p95_wait_s = percentile(waits, 0.95);
    report.max_wait_s = *std::max_element(waits.begin(), waits.end());
    report.mean_bounded_slowdown = slowdown / static_cast<double>(waits.size());
  }
  report.cycles_timed = cycle_ms.size();
  report.cycle_ms_median = percentile(cycle_ms, 0.5);
  report.cycle_ms_p99 = percentile(cycle_ms, 0.99);
  report.queued_median = percentile(queued, 0.5);
  return report;
}

}  // namespace kiln::sched
