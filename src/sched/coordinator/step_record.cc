// What the coordinator makes of the steps ranks report: rank 0's steps for the job's curves
// (kiln/sched/step_series.h), taken from reports and written to SQLite in batches; and the
// ranks' straggler scores (kiln/sched/straggler.h).
#include <algorithm>
#include <cmath>

#include "sched/coordinator/coordinator_impl.h"

namespace kiln::sched {

void Coordinator::Impl::record_steps(const JobRecord& job, JobRuntime& rt, const RankReport& r) {
  const int64_t now_wall = wall();
  for (const StepSample& sample : r.recent) {
    // Reports repeat the agent's window: only steps past the newest taken are new. After a
    // coordinator restart the first report's window is taken again, and the store keeps the
    // copies it already has.
    if (sample.step <= rt.recorded_step) continue;
    rt.recorded_step = sample.step;
    if (pending_steps.size() >= kStepPendingMax) {
      if (!pending_steps_full_logged) {
        log.warn("step points are not being written; new ones are dropped",
                 {{"pending", pending_steps.size()}});
        pending_steps_full_logged = true;
      }
      continue;
    }
    StepPoint p;
    p.job_id = job.id;
    p.attempt = job.attempt;
    p.wall_ns = now_wall - sample.age_ms * 1'000'000;
    p.sample = sample;
    pending_steps.push_back(p);
  }
}

Status Coordinator::Impl::flush_steps(bool now) {
  if (pending_steps.empty()) return Status();
  const int64_t t = mono();
  // After a failure only the interval makes a write due: a store that refuses (busy, disk
  // full) is retried every kStepFlushMs, not on every tick.
  const bool due = now || (pending_steps.size() >= kStepFlushPoints && !steps_flush_failed) ||
                   t - steps_flushed_mono_ns >= kStepFlushMs * 1'000'000;
  if (!due) return Status();
  steps_flushed_mono_ns = t;
  Status s = store->append_steps(pending_steps, kStepPointsPerJobMax);
  if (s.is_invalid_argument()) {
    // A point the store will never take (its job is gone): retrying would wedge every later
    // point behind it. The curves lose this batch; the state loses nothing.
    log.error("step points refused; dropped",
              {{"points", pending_steps.size()}, {"error", s.to_string()}});
  } else if (!s.ok()) {
    steps_flush_failed = true;
    return s.with_context("writing " + std::to_string(pending_steps.size()) +
                          " step points (kept for the next try)");
  }
  steps_flush_failed = false;
  pending_steps.clear();
  pending_steps_full_logged = false;
  return Status();
}

Status Coordinator::Impl::judge_stragglers(const JobRecord& job, JobRuntime& rt) {
  std::vector<std::vector<double>> windows;
  windows.reserve(rt.ranks.size());
  for (const RankRuntime& r : rt.ranks)
    windows.emplace_back(r.compute_window.begin(), r.compute_window.end());
  const std::vector<double> z = straggler_z_scores(windows);
  std::vector<EventRecord> events;
  const int per_node = std::max(job.spec.ranks_per_node, 1);
  for (size_t i = 0; i < rt.ranks.size(); ++i) {
    RankRuntime& r = rt.ranks[i];
    r.straggler_z = z[i];
    const bool now_straggler =
        !std::isnan(z[i]) && (r.straggler ? z[i] >= kStragglerClearZ : z[i] > kStragglerZ);
    // An event when a rank becomes a straggler, not on every report while it is one; a rank
    // that recovers and slows again is a new event.
    if (now_straggler && !r.straggler) {
      const size_t node = i / static_cast<size_t>(per_node);
      std::vector<double> w(r.compute_window.begin(), r.compute_window.end());
      std::nth_element(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(w.size() / 2), w.end());
      events.push_back(event(job, "straggler",
                             {{"rank", static_cast<int>(i)},
                              {"node", node < job.nodes.size() ? job.nodes[node] : ""},
                              {"z", z[i]},
                              {"step", r.step},
                              {"compute_ms", w[w.size() / 2]}}));
      log.warn("straggler", {{"job", job.id}, {"rank", static_cast<int>(i)}, {"z", z[i]}});
    }
    r.straggler = now_straggler;
  }
  return events.empty() ? Status() : store->append_events(events);
}

}  // namespace kiln::sched
