// What one job's status adds to the list's (Coordinator::job_detail): its ranks, its error
// signatures; and its step points for the curves (Coordinator::steps).
#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "sched/coordinator/coordinator_impl.h"
#include "sched/coordinator/error_signature.h"

namespace kiln::sched {

std::vector<RankStatus> Coordinator::Impl::rank_statuses(const JobRecord& job) {
  std::vector<RankStatus> out;
  if (!has_processes(state_of(job))) return out;
  auto rt = runtime.find(job.id);
  if (rt == runtime.end() || rt->second.attempt != job.attempt) return out;
  const int per_node = std::max(job.spec.ranks_per_node, 1);
  for (size_t i = 0; i < rt->second.ranks.size(); ++i) {
    const RankRuntime& r = rt->second.ranks[i];
    RankStatus st;
    st.rank = static_cast<int>(i);
    const size_t node = i / static_cast<size_t>(per_node);
    if (node < job.nodes.size()) st.node = job.nodes[node];
    st.state = r.ended               ? "ended"
               : r.proc_state == 'T' ? "stopped"
               : r.running           ? "running"
                                     : "waiting";
    st.step = r.step;
    st.step_ms = r.step_ms;
    st.comm_exposed_ms = r.comm_exposed_ms;
    st.compute_ms = std::max(0.0, r.step_ms - r.comm_exposed_ms);
    if (r.ended) st.describe = r.end.describe;
    st.straggler = r.straggler;
    st.z = r.straggler_z;
    out.push_back(std::move(st));
  }
  return out;
}

std::vector<ErrorSignature> Coordinator::Impl::signatures_of(const std::string& id) {
  std::vector<ErrorSignature> out;
  Result<std::vector<EventRecord>> events = store->newest_events(id, "fault", kSignaturesMax);
  if (!events.ok()) {
    log.warn("reading a job's events for its signatures",
             {{"job", id}, {"error", events.status().to_string()}});
    return out;
  }
  for (const EventRecord& e : *events) {
    if (std::optional<ErrorSignature> sig = error_signature(e)) out.push_back(std::move(*sig));
  }
  return out;
}

Result<JobSteps> Coordinator::steps(const Caller& caller, const std::string& id,
                                    size_t max_points) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  KILN_RETURN_IF_ERROR(s.check_visible(caller, id));
  KILN_ASSIGN_OR_RETURN(std::vector<StepPoint> points, s.store->steps_for_job(id));
  // The points not written yet are added here, not flushed: a reader must not be able to make
  // the coordinator write (and fsync) as often as it likes.
  std::map<std::pair<int, int64_t>, size_t> stored;
  for (size_t i = 0; i < points.size(); ++i)
    stored[{points[i].attempt, points[i].sample.step}] = i;
  for (const StepPoint& p : s.pending_steps) {
    if (p.job_id == id && stored.count({p.attempt, p.sample.step}) == 0) points.push_back(p);
  }
  std::stable_sort(points.begin(), points.end(), [](const StepPoint& a, const StepPoint& b) {
    return a.attempt != b.attempt ? a.attempt < b.attempt : a.sample.step < b.sample.step;
  });
  JobSteps out;
  out.stored = points.size();
  max_points = std::max<size_t>(max_points, 64);
  if (points.size() <= max_points) {
    out.points = std::move(points);
    return out;
  }
  for (size_t i : thin_steps(points, max_points))
    out.points.push_back(std::move(points[i]));
  return out;
}

Status Coordinator::Impl::check_visible(const Caller& caller, const std::string& id) {
  auto it = jobs.find(id);
  if (it != jobs.end()) {
    return visible_to(caller, it->second) ? Status() : Status::not_found("no job " + id);
  }
  KILN_ASSIGN_OR_RETURN(JobRecord stored, store->get_job(id));
  // Another team's job is reported as absent: its existence is not theirs to learn.
  return visible_to(caller, stored) ? Status() : Status::not_found("no job " + id);
}

Coordinator::ClusterFigures Coordinator::cluster_figures(const Caller& caller) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  ClusterFigures f;
  double productive_ms = 0, admitted_ms = 0, ran_ms = 0;
  const int64_t now = s.wall();
  for (const auto& [id, job] : s.jobs) {
    if (!s.visible_to(caller, job)) continue;
    ++f.jobs_by_state[job.state];
    if (job.admitted_ns == 0) continue;
    productive_ms += job.productive_ms;
    admitted_ms += static_cast<double>(now - job.admitted_ns) / 1e6;
    if (job.running_ns != 0) ran_ms += static_cast<double>(now - job.running_ns) / 1e6;
  }
  if (admitted_ms > 0) f.goodput = std::min(1.0, productive_ms / admitted_ms);
  if (ran_ms > 0) f.ettr = std::min(1.0, productive_ms / ran_ms);
  const std::set<std::string> busy = s.busy_nodes();
  for (const auto& [name, node] : s.nodes) {
    ++f.nodes_by_state[node.state];
    if (node.state == "ready" && busy.count(name) == 0) f.idle_nodes.push_back(name);
  }
  return f;
}

}  // namespace kiln::sched
