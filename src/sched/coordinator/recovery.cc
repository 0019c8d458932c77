// The recovery loop: faults and whom they blame, stops, restarts with backoff, node isolation,
// and placing waiting jobs through the policy. All of it runs under the coordinator's mutex.
#include <algorithm>
#include <utility>

#include "sched/coordinator/coordinator_impl.h"

namespace kiln::sched {
namespace {

constexpr int64_t kNsPerMs = 1'000'000;

// Backoff of the n-th restart (n >= 1): the spec's first delay, doubling, capped.
int64_t backoff_ms(const JobSpec& spec, int restart) {
  int64_t delay = std::max<int64_t>(spec.restart_backoff_ms, 0);
  for (int i = 1; i < restart && delay < spec.restart_backoff_max_ms; ++i)
    delay *= 2;
  return std::min(delay, std::max(spec.restart_backoff_max_ms, spec.restart_backoff_ms));
}

bool cancelled(const JobRecord& job) {
  return job.reason.rfind("cancelled by ", 0) == 0;
}

// Whether the job's ranks are expected to report steps: `kiln train` (the default command)
// does; an arbitrary command may not, and is then judged by its exits alone.
bool reports_progress(const JobRecord& job, const JobRuntime& rt) {
  const std::vector<std::string>& argv = job.spec.command;
  if (argv.empty() || (argv.size() > 1 && argv[0] == "kiln" && argv[1] == "train")) return true;
  for (const RankRuntime& r : rt.ranks)
    if (r.step >= 0) return true;
  return false;
}

}  // namespace

Status Coordinator::Impl::mark_node_faulty(const std::string& name, const std::string& why,
                                           std::vector<EventRecord>* events,
                                           StateStore::Batch* batch) {
  auto it = nodes.find(name);
  if (it == nodes.end()) return Status();
  NodeRecord node = it->second;
  const int64_t now = wall();
  node.fault_ns.push_back(now);
  const int64_t window_start = now - options.cordon_window_ms * kNsPerMs;
  node.fault_ns.erase(std::remove_if(node.fault_ns.begin(), node.fault_ns.end(),
                                     [&](int64_t t) { return t < window_start; }),
                      node.fault_ns.end());
  const int faults = static_cast<int>(node.fault_ns.size());
  if (node.state == "ready" || node.state == "suspect") {
    if (faults >= options.cordon_faults) {
      node.state = "cordoned";
      node.reason = std::to_string(faults) + " faults within " +
                    std::to_string(options.cordon_window_ms / 1000) + " s; last: " + why;
      events->push_back(node_event(name, "node_cordoned", node.reason));
    } else if (node.state == "ready") {
      node.state = "suspect";
      node.reason = why;
      events->push_back(node_event(name, "node_suspect", why));
    } else {
      node.reason = why;
    }
    node.state_since_ns = now;
  }
  batch->nodes.push_back(node);
  return Status();
}

Status Coordinator::Impl::fault(JobRecord* job, FaultCause cause, int rank, const std::string& node,
                                const std::string& message, bool isolate) {
  const JobState st = state_of(*job);
  if (st != JobState::kPlaced && st != JobState::kRunning) return Status();
  JobRuntime& rt = runtime_of(*job);
  const std::string cause_name(fault_cause_name(cause));
  nlohmann::json detail = {{"cause", cause_name},
                           {"rank", rank},
                           {"node", node},
                           {"message", message},
                           {"blame", isolate ? "node" : "job"}};
  std::vector<EventRecord> events{event(*job, "fault", detail)};
  StateStore::Batch batch;
  if (!node.empty() && isolate) {
    KILN_RETURN_IF_ERROR(mark_node_faulty(node,
                                          "job " + job->id + " attempt " +
                                              std::to_string(job->attempt) + ": " + cause_name +
                                              " of rank " + std::to_string(rank),
                                          &events, &batch));
    if (std::find(rt.avoid.begin(), rt.avoid.end(), node) == rt.avoid.end()) {
      rt.avoid.push_back(node);
    }
  }
  job->reason = cause_name + ": " + message;
  KILN_RETURN_IF_ERROR(check_job_transition(st, JobState::kStopping));
  job->state = "stopping";
  events.push_back(event(*job, "stopping", {{"grace_ms", options.fault_stop_grace_ms}}));
  batch.jobs.push_back(*job);
  batch.events = events;
  KILN_RETURN_IF_ERROR(store->apply(batch));
  // The store bumped every written record's version by one; the caches follow.
  ++job->version;
  jobs[job->id] = *job;
  for (NodeRecord& n : batch.nodes) {
    ++n.version;
    nodes[n.name] = n;
  }
  for (const EventRecord& e : events) {
    log.info("job event", {{"job", e.job_id.empty() ? std::string("-") : e.job_id},
                           {"event", e.type},
                           {"attempt", e.attempt},
                           {"detail", e.detail.dump()}});
  }
  rt.stop_mono_ns = mono();
  rt.stop_grace_ms = options.fault_stop_grace_ms;
  rt.fault_mono_ns = rt.stop_mono_ns;
  rt.awaiting_recovery = true;
  samples.restart_causes.push_back(cause_name);
  return Status();
}

Status Coordinator::Impl::detect_timeouts() {
  const int64_t now = mono();
  // Lost agents first: their ranks are gone with them.
  for (auto& [name, node] : nodes) {
    if (node.state == "down") continue;
    const NodeRuntime& nrt = node_runtime[name];
    const int64_t silent_ms = (now - nrt.report_mono_ns) / kNsPerMs;
    if (silent_ms <= options.node_timeout_ms) continue;
    const std::string why = "no report from its agent for " + std::to_string(silent_ms) + " ms";
    std::vector<std::string> ids;
    for (const auto& [id, job] : jobs)
      if (std::find(job.nodes.begin(), job.nodes.end(), name) != job.nodes.end()) ids.push_back(id);
    if (node.state != "cordoned") {
      KILN_RETURN_IF_ERROR(set_node_state(name, NodeState::kDown, why));
    }
    for (const std::string& id : ids) {
      auto it = jobs.find(id);
      if (it == jobs.end()) continue;
      JobRecord job = it->second;
      const int per_node = std::max(job.spec.ranks_per_node, 1);
      int rank = -1;
      for (size_t i = 0; i < job.nodes.size() && rank < 0; ++i)
        if (job.nodes[i] == name) rank = static_cast<int>(i) * per_node;
      KILN_RETURN_IF_ERROR(
          fault(&job, FaultCause::kNodeLost, rank, name, "node " + name + " lost: " + why));
    }
  }
  // Error exits that no peer's report explained within the settle time: the program's fault.
  for (auto& [id, rt] : runtime) {
    if (rt.pending_exit_mono_ns == 0 ||
        now - rt.pending_exit_mono_ns < kCulpritSettleMs * kNsPerMs) {
      continue;
    }
    auto it = jobs.find(id);
    if (it == jobs.end() || rt.attempt != it->second.attempt) {
      rt.pending_exit_mono_ns = 0;
      continue;
    }
    JobRecord job = it->second;
    const RankReport pending = rt.pending_exit;
    KILN_RETURN_IF_ERROR(fault_from_exit(&job, rt, pending));
  }
  // Hung and never-started ranks.
  std::vector<std::string> ids;
  for (const auto& [id, job] : jobs)
    ids.push_back(id);
  for (const std::string& id : ids) {
    auto it = jobs.find(id);
    if (it == jobs.end()) continue;
    JobRecord job = it->second;
    const JobState st = state_of(job);
    if (st != JobState::kPlaced && st != JobState::kRunning) continue;
    JobRuntime& rt = runtime_of(job);
    if (!reports_progress(job, rt)) continue;
    int culprit = -1;
    FaultCause cause = FaultCause::kHung;
    int64_t stalled_ms = 0;
    for (size_t i = 0; i < rt.ranks.size(); ++i) {
      const RankRuntime& r = rt.ranks[i];
      if (r.ended) continue;
      const int64_t quiet_ms = (now - r.progress_mono_ns) / kNsPerMs;
      const bool started = r.step >= 0;
      const int64_t limit = started ? job.spec.progress_timeout_ms : job.spec.start_timeout_ms;
      if (quiet_ms <= limit) continue;
      // The culprit of a hang: a rank the kernel stopped, else the one furthest behind.
      const bool better =
          culprit < 0 ||
          (r.proc_state == 'T' && rt.ranks[static_cast<size_t>(culprit)].proc_state != 'T') ||
          r.step < rt.ranks[static_cast<size_t>(culprit)].step;
      if (better) {
        culprit = static_cast<int>(i);
        cause = started ? FaultCause::kHung : FaultCause::kStartTimeout;
        stalled_ms = quiet_ms;
      }
    }
    // A stopped rank among the others is the culprit even if its own counter is not the oldest.
    for (size_t i = 0; culprit >= 0 && i < rt.ranks.size(); ++i) {
      if (!rt.ranks[i].ended && rt.ranks[i].proc_state == 'T') {
        culprit = static_cast<int>(i);
        break;
      }
    }
    if (culprit < 0) continue;
    const size_t node_index = static_cast<size_t>(culprit / std::max(job.spec.ranks_per_node, 1));
    const std::string node = node_index < job.nodes.size() ? job.nodes[node_index] : "";
    const RankRuntime& r = rt.ranks[static_cast<size_t>(culprit)];
    std::string message = "rank " + std::to_string(culprit) + " at step " + std::to_string(r.step) +
                          " made no progress for " + std::to_string(stalled_ms) + " ms";
    if (r.proc_state == 'T') message += "; the process is stopped (SIGSTOP)";
    samples.detection_s.push_back(
        static_cast<double>(
            stalled_ms - (r.step >= 0 ? job.spec.progress_timeout_ms : job.spec.start_timeout_ms)) /
        1e3);
    KILN_RETURN_IF_ERROR(fault(&job, cause, culprit, node, message));
  }
  return Status();
}

Status Coordinator::Impl::finish_stops() {
  const int64_t now = mono();
  std::vector<std::string> ids;
  for (const auto& [id, job] : jobs)
    if (job.state == "stopping") ids.push_back(id);
  for (const std::string& id : ids) {
    JobRecord job = jobs[id];
    JobRuntime& rt = runtime_of(job);
    if (rt.stop_mono_ns == 0) rt.stop_mono_ns = now;  // stopping when the coordinator started
    const int per_node = std::max(job.spec.ranks_per_node, 1);
    bool all_gone = true;
    bool all_clean = true;
    for (size_t i = 0; i < rt.ranks.size(); ++i) {
      const RankRuntime& r = rt.ranks[i];
      const size_t node_index = i / static_cast<size_t>(per_node);
      const std::string& node = node_index < job.nodes.size() ? job.nodes[node_index] : "";
      auto n = nodes.find(node);
      const bool node_down = n == nodes.end() || n->second.state == "down";
      if (!r.ended && !node_down) all_gone = false;
      if (!r.ended || !r.end.exited || r.end.code != 0) all_clean = false;
    }
    const int64_t waited_ms = (now - rt.stop_mono_ns) / kNsPerMs;
    if (!all_gone) {
      if (waited_ms <= rt.stop_grace_ms + options.stop_report_slack_ms) continue;
      log.warn("finishing a stop without every rank's exit",
               {{"job", id}, {"waited_ms", waited_ms}});
    }
    if (cancelled(job)) {
      KILN_RETURN_IF_ERROR(write_job(&job, JobState::kCancelled, {}));
      continue;
    }
    if (all_clean && job.reason.empty()) {
      KILN_RETURN_IF_ERROR(write_job(&job, JobState::kSucceeded, {}));
      continue;
    }
    if (job.restarts >= job.spec.max_restarts) {
      job.reason = "restart budget spent (" + std::to_string(job.restarts) + " of " +
                   std::to_string(job.spec.max_restarts) + "); last fault: " + job.reason;
      KILN_RETURN_IF_ERROR(write_job(&job, JobState::kFailed, {}));
      continue;
    }
    ++job.restarts;
    ++job.attempt;
    const int64_t delay = backoff_ms(job.spec, job.restarts);
    job.not_before_ns = wall() + delay * kNsPerMs;
    // The restarting event carries the new attempt: it is the one that will run next.
    std::vector<EventRecord> events;
    JobRecord next = job;
    next.state = "restarting";
    events.push_back(event(next, "restarting",
                           {{"restart", job.restarts},
                            {"max_restarts", job.spec.max_restarts},
                            {"backoff_ms", delay}}));
    KILN_RETURN_IF_ERROR(check_job_transition(JobState::kStopping, JobState::kRestarting));
    job.state = "restarting";
    KILN_ASSIGN_OR_RETURN(JobRecord stored, store->update_job(job, events));
    log.info("job event", {{"job", id}, {"event", "restarting"}, {"attempt", stored.attempt}});
    jobs[id] = stored;
  }
  return Status();
}

Status Coordinator::Impl::relax_suspects() {
  const int64_t now = wall();
  std::vector<std::string> names;
  for (const auto& [name, node] : nodes) {
    if (node.state != "suspect") continue;
    const int64_t last = node.fault_ns.empty() ? node.state_since_ns : node.fault_ns.back();
    if (now - last > options.cordon_window_ms * kNsPerMs) names.push_back(name);
  }
  for (const std::string& name : names) {
    KILN_RETURN_IF_ERROR(set_node_state(name, NodeState::kReady, "no fault within the window"));
  }
  return Status();
}

Status Coordinator::Impl::schedule() {
  // Most calls find nothing waiting: answer before building a snapshot of every node.
  const int64_t now = wall();
  bool any_waiting = false;
  for (const auto& [id, job] : jobs) {
    const JobState st = state_of(job);
    if (st == JobState::kQueued || (st == JobState::kRestarting && job.not_before_ns <= now)) {
      any_waiting = true;
      break;
    }
  }
  if (!any_waiting) return Status();
  Snapshot snapshot;
  std::map<std::string, size_t> index;
  for (const auto& [name, node] : nodes) {
    NodeView v;
    v.name = name;
    v.state = parse_node_state(node.state).value_or(NodeState::kDown);
    v.labels = node.labels;
    v.slots = node.slots;
    v.cpus = node_runtime[name].cpus;
    v.memory_bytes = node_runtime[name].memory_bytes;
    v.gpus = node_runtime[name].gpus;
    index[name] = snapshot.nodes.size();
    snapshot.nodes.push_back(std::move(v));
  }
  for (const auto& [id, job] : jobs) {
    const JobState st = state_of(job);
    if (has_processes(st)) {
      for (const std::string& n : job.nodes) {
        auto it = index.find(n);
        if (it == index.end()) continue;
        snapshot.nodes[it->second].slots_used += job.spec.ranks_per_node;
        NodeView& used = snapshot.nodes[it->second];
        used.cpus_used += job.spec.ranks_per_node * job.spec.resources.cpus;
        used.memory_used_bytes += job.spec.ranks_per_node * job.spec.resources.memory_bytes;
        used.gpus_used += job.spec.ranks_per_node * job.spec.resources.gpus;
      }
      continue;
    }
    const bool waiting =
        st == JobState::kQueued || (st == JobState::kRestarting && job.not_before_ns <= now);
    if (!waiting) continue;
    JobView v;
    v.id = id;
    // Jobs keep their submit order; ids are zero-padded sequence numbers.
    v.seq = static_cast<int64_t>(job.submitted_ns);
    v.nodes = std::max(job.spec.nodes, 1);
    v.min_nodes = job.spec.effective_min_nodes();
    v.ranks_per_node = std::max(job.spec.ranks_per_node, 1);
    v.cpus_per_rank = std::max(job.spec.resources.cpus, 1);
    v.memory_per_rank_bytes = job.spec.resources.memory_bytes;
    v.gpus_per_rank = job.spec.resources.gpus;
    auto rt = runtime.find(id);
    if (rt != runtime.end()) v.avoid = rt->second.avoid;
    snapshot.waiting.push_back(std::move(v));
  }
  if (snapshot.waiting.empty()) return Status();
  Plan plan = policy->decide(snapshot);
  for (const auto& [id, why] : plan.waiting)
    runtime[id].waiting = why;
  for (const Placement& p : plan.placements) {
    auto it = jobs.find(p.job_id);
    if (it == jobs.end()) continue;
    JobRecord job = it->second;
    std::vector<EventRecord> events;
    if (state_of(job) == JobState::kQueued) {
      KILN_RETURN_IF_ERROR(check_job_transition(JobState::kQueued, JobState::kAdmitted));
      job.state = "admitted";
      job.admitted_ns = wall();
      events.push_back(event(job, "admitted", {{"policy", std::string(policy->name())}}));
    }
    job.nodes = p.nodes;
    events.push_back(event(job, "placed", {{"nodes", p.nodes}, {"why", p.why}}));
    const JobState from = state_of(job);
    KILN_RETURN_IF_ERROR(check_job_transition(from, JobState::kPlaced));
    job.state = "placed";
    KILN_ASSIGN_OR_RETURN(JobRecord stored, store->update_job(job, events));
    for (const EventRecord& e : events) {
      log.info("job event", {{"job", stored.id},
                             {"event", e.type},
                             {"attempt", e.attempt},
                             {"detail", e.detail.dump()}});
    }
    jobs[stored.id] = stored;
    JobRuntime& rt = runtime[stored.id];
    rt.attempt = -1;  // a fresh attempt: every rank starts unreported
    rt.waiting.clear();
    runtime_of(stored);
  }
  return Status();
}

}  // namespace kiln::sched
