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

constexpr const char* kTimeLimitReason = "time limit reached";
constexpr const char* kPreemptedReason = "preempted by ";

// The job a preempted job was preempted for ("preempted by j-000007: ..."), else "".
std::string preempted_for(const JobRecord& job) {
  const std::string prefix = kPreemptedReason;
  if (job.reason.rfind(prefix, 0) != 0) return "";
  const size_t colon = job.reason.find(':', prefix.size());
  return job.reason.substr(prefix.size(),
                           colon == std::string::npos ? colon : colon - prefix.size());
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
                                const std::string& message, bool isolate, nlohmann::json extra) {
  const JobState st = state_of(*job);
  if (st != JobState::kPlaced && st != JobState::kRunning) return Status();
  JobRuntime& rt = runtime_of(*job);
  const std::string cause_name(fault_cause_name(cause));
  nlohmann::json detail = {{"cause", cause_name},
                           {"rank", rank},
                           {"node", node},
                           {"message", message},
                           {"blame", isolate ? "node" : "job"}};
  // Where the run was: the culprit's newest step, else the job's (the curves mark it there).
  const bool known_rank = rank >= 0 && static_cast<size_t>(rank) < rt.ranks.size();
  detail["step"] = known_rank && rt.ranks[static_cast<size_t>(rank)].step >= 0
                       ? rt.ranks[static_cast<size_t>(rank)].step
                       : job->last_step;
  if (extra.is_object()) {
    for (const auto& [key, value] : extra.items())
      if (!detail.contains(key)) detail[key] = value;
  }
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
  // Lost agents first: their ranks are gone with them. Under an external manager the node's
  // life is the manager's to judge (executor_report); here only an agent that reported inside
  // a running allocation and then fell silent.
  if (external()) return detect_external_timeouts();
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
  return detect_rank_timeouts();
}

// A running allocation whose agent on some node reported and then went silent: that node is lost.
Status Coordinator::Impl::detect_external_timeouts() {
  const int64_t now = mono();
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
    if (!rt.allocation_running) continue;
    for (size_t i = 0; i < job.nodes.size(); ++i) {
      const NodeRuntime& nrt = node_runtime[job.nodes[i]];
      if (nrt.agent_mono_ns < rt.attempt_mono_ns) continue;  // not reported in this attempt
      const int64_t silent_ms = (now - nrt.agent_mono_ns) / kNsPerMs;
      if (silent_ms <= options.node_timeout_ms) continue;
      KILN_RETURN_IF_ERROR(
          fault(&job, FaultCause::kNodeLost,
                static_cast<int>(i) * std::max(job.spec.ranks_per_node, 1), job.nodes[i],
                "node " + job.nodes[i] + " lost: its agent in " + options.executor + " job " +
                    rt.allocation_id + " sent no report for " + std::to_string(silent_ms) + " ms"));
      break;
    }
  }
  return detect_rank_timeouts();
}

Status Coordinator::Impl::detect_rank_timeouts() {
  const int64_t now = mono();
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
    // Ranks waiting for their allocation have not started: no clock runs for them yet.
    if (external() && !rt.allocation_running) continue;
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
      // Under an external manager, an allocation that ended or never ran holds no ranks.
      const bool node_down = n == nodes.end() || n->second.state == "down" ||
                             (external() && (rt.allocation_ended || !rt.allocation_running));
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
    const bool timed_out = job.reason.rfind(kTimeLimitReason, 0) == 0;
    const bool preempted = job.reason.rfind(kPreemptedReason, 0) == 0;
    if (all_clean && (timed_out || preempted)) {
      // Every rank finished its work (exit 0) within the grace: the job is done.
      job.reason.clear();
      KILN_RETURN_IF_ERROR(write_job(&job, JobState::kSucceeded, {}));
      continue;
    }
    if (timed_out) {
      KILN_RETURN_IF_ERROR(write_job(&job, JobState::kFailed, {}));
      continue;
    }
    if (preempted) {
      // Requeued: the next attempt resumes from the checkpoint it wrote at SIGTERM. It keeps its
      // submit time (its place in the order) and spends no restart.
      ++job.attempt;
      job.nodes.clear();
      job.not_before_ns = 0;
      KILN_RETURN_IF_ERROR(
          write_job(&job, JobState::kQueued, {event(job, "requeued", {{"reason", job.reason}})}));
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

NodeView Coordinator::Impl::node_view(const std::string& name, const NodeRecord& node) {
  NodeView v;
  v.name = name;
  v.state = parse_node_state(node.state).value_or(NodeState::kDown);
  auto label = [&](const char* key) {
    auto it = node.labels.find(key);
    return it == node.labels.end() ? std::string() : it->second;
  };
  v.pool = label("pool").empty() ? "default" : label("pool");
  v.gpu_model = label("gpu_model");
  // Failure domains from the rack and switch labels, outermost first.
  const std::string rack = label("rack");
  const std::string sw = label("switch");
  if (!rack.empty() || !sw.empty()) v.domain = {rack, sw};
  const NodeRuntime& nrt = node_runtime[name];
  v.capacity.slots = std::max(node.slots, 1);
  v.capacity.cpus = nrt.cpus;
  v.capacity.memory_bytes = nrt.memory_bytes;
  v.capacity.gpus = nrt.gpus;
  // The gate: a node without a valid pass is not placeable (its state says nothing of that).
  if ((v.state == NodeState::kReady || v.state == NodeState::kSuspect) &&
      !preflight_admits(name, node)) {
    v.state = NodeState::kCordoned;
  }
  v.preflight_level = preflight_pass_level(name, node);
  return v;
}

JobView Coordinator::Impl::job_view(const JobSpec& spec, const std::string& id,
                                    const std::vector<std::string>& avoid) const {
  JobView v;
  v.id = id;
  v.queue = spec.queue;
  v.priority = spec.priority;
  v.nodes = std::max(spec.nodes, 1);
  v.min_nodes = spec.effective_min_nodes();
  const int rpn = std::max(spec.ranks_per_node, 1);
  v.per_node.slots = rpn;
  v.per_node.cpus = int64_t{rpn} * std::max(spec.resources.cpus, 1);
  v.per_node.memory_bytes = int64_t{rpn} * spec.resources.memory_bytes;
  v.per_node.gpus = int64_t{rpn} * spec.resources.gpus;
  v.gpu_models = split_gpu_models(spec.gpu_model);
  v.preflight_level = static_cast<int>(spec.preflight);  // none 0, quick 1, full 2
  v.time_limit_s = static_cast<double>(spec.time_limit_ms) / 1e3;
  v.topology.same = spec.topology_same == "switch" ? DomainLevel::kSwitch
                    : spec.topology_same == "rack" ? DomainLevel::kRack
                                                   : DomainLevel::kNone;
  v.topology.required = spec.topology_required;
  v.topology.spread = spec.topology_spread == "rack" ? DomainLevel::kRack : DomainLevel::kNone;
  v.avoid = avoid;
  return v;
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
  // Nothing waits: only fair share needs the snapshot, and once a second is enough for it.
  if (!any_waiting && mono() - ledger_advanced_mono_ns < 1000 * kNsPerMs) return Status();
  ledger_advanced_mono_ns = mono();
  Snapshot snapshot;
  snapshot.now_s = static_cast<double>(now) / 1e9;
  snapshot.queues = options.queues;
  std::map<std::string, int32_t> index;
  for (const auto& [name, node] : nodes) {
    index[name] = static_cast<int32_t>(snapshot.nodes.size());
    snapshot.nodes.push_back(node_view(name, node));
  }
  for (const auto& [id, job] : jobs) {
    const JobState st = state_of(job);
    if (has_processes(st)) {
      JobView v = job_view(job.spec, id, {});
      Allocation a;
      a.job_id = id;
      a.queue = job.spec.queue;
      a.priority = job.spec.priority;
      a.per_node = v.per_node;
      for (const std::string& n : job.nodes) {
        auto it = index.find(n);
        if (it == index.end()) continue;
        a.nodes.push_back(it->second);
        NodeResources& used = snapshot.nodes[static_cast<size_t>(it->second)].used;
        used.slots += v.per_node.slots;
        used.cpus += v.per_node.cpus;
        used.memory_bytes += v.per_node.memory_bytes;
        used.gpus += v.per_node.gpus;
      }
      a.stopping = st == JobState::kStopping;
      if (a.stopping) a.preempted_for = preempted_for(job);
      // Attempts beyond the restarts are requeues after preemption.
      a.preemptions = std::max(0, job.attempt - job.restarts);
      auto rt = runtime.find(id);
      const int64_t attempt_wall_ns =
          rt == runtime.end() ? now : now - (mono() - rt->second.attempt_mono_ns);
      a.start_s = static_cast<double>(attempt_wall_ns) / 1e9;
      if (job.spec.time_limit_ms > 0) {
        a.end_s = a.start_s + static_cast<double>(job.spec.time_limit_ms) / 1e3;
      }
      // The newest checkpoint, estimated from rank 0's step and the spec's interval: a
      // preemption chooses the victim that loses the least work since it.
      if (rt != runtime.end() && !rt->second.ranks.empty() && job.spec.checkpoint_every > 0 &&
          !job.spec.checkpoint_dir.empty()) {
        const RankRuntime& r0 = rt->second.ranks[0];
        if (r0.step >= 0) {
          const int64_t since = r0.step % job.spec.checkpoint_every;
          a.last_checkpoint_s = snapshot.now_s - static_cast<double>(since) * r0.step_ms / 1e3;
        }
      }
      snapshot.running.push_back(std::move(a));
      continue;
    }
    const bool waiting =
        st == JobState::kQueued || (st == JobState::kRestarting && job.not_before_ns <= now);
    if (!waiting) continue;
    auto rt = runtime.find(id);
    JobView v =
        job_view(job.spec, id, rt != runtime.end() ? rt->second.avoid : std::vector<std::string>{});
    // Jobs keep their submit order; ids are zero-padded sequence numbers.
    v.seq = job.submitted_ns;
    if (st == JobState::kQueued) v.preempted_by = preempted_for(job);
    v.submit_s = static_cast<double>(job.submitted_ns) / 1e9;
    snapshot.waiting.push_back(std::move(v));
  }
  // Fair share follows what runs, whether or not anything waits.
  ledger.advance(snapshot.now_s, team_shares(snapshot));
  if (mono() - ledger_saved_mono_ns > kFairShareSaveMs * kNsPerMs) {
    ledger_saved_mono_ns = mono();
    Status saved = store->put_setting(kFairShareSetting, ledger.to_json().dump());
    if (!saved.ok()) log.warn("fair-share history not saved", {{"error", saved.to_string()}});
  }
  if (!any_waiting || snapshot.waiting.empty()) return Status();
  snapshot.team_usage = ledger.usage();
  Plan plan = policy->decide(snapshot);
  const std::string awaiting = plan.waiting.empty() ? "" : awaiting_preflight();
  for (const auto& [id, w] : plan.waiting) {
    JobRuntime& rt = runtime[id];
    rt.waiting = awaiting.empty() ? w.reason : w.reason + "; " + awaiting;
    rt.waiting_kind = w.kind;
    rt.queue_position = w.position;
  }
  for (const Preemption& p : plan.preemptions) {
    auto it = jobs.find(p.victim);
    if (it == jobs.end()) continue;
    JobRecord victim = it->second;
    KILN_RETURN_IF_ERROR(preempt(&victim, p));
  }
  for (const Placement& p : plan.placements) {
    auto it = jobs.find(p.job_id);
    if (it == jobs.end()) continue;
    JobRecord job = it->second;
    std::vector<EventRecord> events;
    if (state_of(job) == JobState::kQueued) {
      KILN_RETURN_IF_ERROR(check_job_transition(JobState::kQueued, JobState::kAdmitted));
      job.state = "admitted";
      job.admitted_ns = wall();
      events.push_back(event(job, "admitted",
                             {{"policy", std::string(policy->name())},
                              {"queue", job.spec.queue},
                              {"borrowed", p.borrowed},
                              {"backfilled", p.backfilled}}));
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
    rt.waiting_kind.clear();
    rt.queue_position = 0;
    runtime_of(stored);
  }
  return Status();
}

// A cooperative stop: SIGTERM, preempt_grace_ms to checkpoint and exit 75, SIGKILL after; then
// finish_stops() queues the job again (no restart spent, the same checkpoint directory).
Status Coordinator::Impl::preempt(JobRecord* job, const Preemption& p) {
  const JobState st = state_of(*job);
  if (st != JobState::kPlaced && st != JobState::kRunning) return Status();
  JobRuntime& rt = runtime_of(*job);
  job->reason = kPreemptedReason + p.for_job + ": " + p.why;
  std::vector<EventRecord> events{
      event(*job, "preempted",
            {{"by", p.for_job}, {"why", p.why}, {"grace_ms", options.preempt_grace_ms}})};
  rt.stop_mono_ns = mono();
  rt.stop_grace_ms = options.preempt_grace_ms;
  rt.awaiting_recovery = false;
  return write_job(job, JobState::kStopping, std::move(events));
}

// A job past its time limit is stopped like a cancel (it may checkpoint) and then fails.
Status Coordinator::Impl::enforce_time_limits() {
  const int64_t now = mono();
  std::vector<std::string> over;
  for (const auto& [id, job] : jobs) {
    const JobState st = state_of(job);
    if (job.spec.time_limit_ms <= 0 || (st != JobState::kPlaced && st != JobState::kRunning)) {
      continue;
    }
    auto rt = runtime.find(id);
    if (rt == runtime.end() || (external() && !rt->second.allocation_running)) continue;
    if ((now - rt->second.attempt_mono_ns) / kNsPerMs > job.spec.time_limit_ms) over.push_back(id);
  }
  for (const std::string& id : over) {
    JobRecord job = jobs[id];
    JobRuntime& rt = runtime_of(job);
    job.reason =
        std::string(kTimeLimitReason) + " (" + std::to_string(job.spec.time_limit_ms) + " ms)";
    rt.stop_mono_ns = mono();
    rt.stop_grace_ms = options.cancel_grace_ms;
    rt.awaiting_recovery = false;
    KILN_RETURN_IF_ERROR(write_job(&job, JobState::kStopping, {}));
  }
  return Status();
}

}  // namespace kiln::sched
