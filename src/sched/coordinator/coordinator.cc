// The coordinator's API half: opening (reading SQLite back), submit, status, events, cancel and
// the node commands. The recovery loop is in recovery.cc, the agents' side in reports.cc.
#include <algorithm>
#include <utility>

#include "sched/coordinator/coordinator_impl.h"

namespace kiln::sched {

JobState state_of(const JobRecord& job) {
  std::optional<JobState> s = parse_job_state(job.state);
  return s.value_or(JobState::kFailed);
}

Coordinator::Coordinator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Coordinator::~Coordinator() {
  // A clean stop keeps the curves' last points too (a crash loses at most kStepFlushMs).
  std::lock_guard<std::mutex> lock(impl_->mu);
  Status s = impl_->flush_steps(/*now=*/true);
  if (!s.ok()) impl_->log.warn("writing the last step points", {{"error", s.to_string()}});
}

Result<std::unique_ptr<Coordinator>> Coordinator::open(CoordinatorOptions options,
                                                       StateStore* store,
                                                       std::unique_ptr<Policy> policy,
                                                       const Clock* clock, Logger log) {
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->store = store;
  impl->policy = std::move(policy);
  impl->clock = clock;
  impl->log = std::move(log);
  impl->ledger = FairShareLedger(impl->options.fair_share_half_life_s);
  KILN_ASSIGN_OR_RETURN(std::optional<std::string> saved, store->get_setting(kFairShareSetting));
  if (saved) {
    // A damaged value costs the history, never the start: fair share rebuilds from now.
    nlohmann::json j = nlohmann::json::parse(*saved, nullptr, /*allow_exceptions=*/false);
    impl->ledger = FairShareLedger::from_json(j, impl->options.fair_share_half_life_s);
  }
  KILN_ASSIGN_OR_RETURN(std::vector<JobRecord> active, store->list_active_jobs());
  for (JobRecord& job : active) {
    if (!parse_job_state(job.state)) {
      return Status::corruption("job " + job.id + " has an unknown state '" + job.state + "'");
    }
    std::string id = job.id;
    impl->jobs.emplace(std::move(id), std::move(job));
  }
  KILN_ASSIGN_OR_RETURN(std::vector<NodeRecord> nodes, store->list_nodes());
  const int64_t now = impl->mono();
  for (NodeRecord& node : nodes) {
    // Every node gets a full node timeout from now to report again: the agents kept running.
    impl->node_runtime[node.name].report_mono_ns = now;
    std::string name = node.name;
    impl->nodes.emplace(std::move(name), std::move(node));
  }
  impl->log.info("coordinator state loaded",
                 {{"active_jobs", impl->jobs.size()}, {"nodes", impl->nodes.size()}});
  return std::unique_ptr<Coordinator>(new Coordinator(std::move(impl)));
}

JobRuntime& Coordinator::Impl::runtime_of(const JobRecord& job) {
  JobRuntime& rt = runtime[job.id];
  if (rt.attempt != job.attempt) {
    // A new attempt, or the first look after a coordinator restart: every rank starts with a
    // full progress timeout from now.
    rt.attempt = job.attempt;
    rt.ranks.assign(job.nodes.size() * static_cast<size_t>(job.spec.ranks_per_node), RankRuntime{});
    rt.attempt_mono_ns = mono();
    for (RankRuntime& r : rt.ranks)
      r.progress_mono_ns = rt.attempt_mono_ns;
    rt.pending_exit_mono_ns = 0;
    rt.allocation_id.clear();
    rt.allocation_state.clear();
    rt.allocation_running = false;
    rt.allocation_ended = false;
    rt.recorded_step = -1;
  }
  return rt;
}

EventRecord Coordinator::Impl::event(const JobRecord& job, const std::string& type,
                                     nlohmann::json detail) const {
  EventRecord e;
  e.ts_ns = wall();
  e.job_id = job.id;
  e.type = type;
  e.attempt = job.attempt;
  e.detail = std::move(detail);
  return e;
}

EventRecord Coordinator::Impl::node_event(const std::string& node, const std::string& type,
                                          const std::string& reason) const {
  EventRecord e;
  e.ts_ns = wall();
  e.type = type;
  e.detail = {{"node", node}};
  if (!reason.empty()) e.detail["reason"] = reason;
  return e;
}

// Moves `job` to `to` (checked against the table) and writes it with `events` plus the
// transition's own event, in one transaction. On success the cache holds the stored record.
Status Coordinator::Impl::write_job(JobRecord* job, JobState to, std::vector<EventRecord> events) {
  const JobState from = state_of(*job);
  if (from != to) {
    KILN_RETURN_IF_ERROR(check_job_transition(from, to).with_context("job " + job->id));
    job->state = std::string(job_state_name(to));
    events.push_back(event(*job, job->state));
  }
  if (is_terminal(to)) job->finished_ns = wall();
  KILN_ASSIGN_OR_RETURN(JobRecord stored, store->update_job(*job, events));
  *job = stored;
  for (const EventRecord& e : events) {
    log.info(
        "job event",
        {{"job", job->id}, {"event", e.type}, {"attempt", e.attempt}, {"detail", e.detail.dump()}});
  }
  if (is_terminal(to)) {
    jobs.erase(stored.id);
    runtime.erase(stored.id);
  } else {
    jobs[stored.id] = stored;
  }
  return Status();
}

bool Coordinator::Impl::visible_to(const Caller& caller, const JobRecord& job) const {
  return caller.admin || caller.team == job.team;
}

double Coordinator::Impl::goodput_of(const JobRecord& job) const {
  if (job.admitted_ns == 0) return 0;
  const int64_t end = job.finished_ns != 0 ? job.finished_ns : wall();
  const double wall_ms = static_cast<double>(end - job.admitted_ns) / 1e6;
  return wall_ms > 0 ? std::min(1.0, job.productive_ms / wall_ms) : 0;
}

Result<JobRecord> Coordinator::submit(const Caller& caller, JobSpec spec,
                                      const std::string& workdir) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  if (s.jobs.size() >= s.options.jobs_active_max) {
    return Status::unavailable("the coordinator holds " + std::to_string(s.jobs.size()) +
                               " unfinished jobs, its limit; retry when some have ended");
  }
  if (spec.effective_min_nodes() > static_cast<int>(s.nodes.size())) {
    return Status::invalid_argument(
        "job '" + spec.name + "' needs " + std::to_string(spec.effective_min_nodes()) +
        " node(s) but the cluster has " + std::to_string(s.nodes.size()));
  }
  // A job that asks its nodes be checked is refused where nothing checks them, rather than left
  // waiting for a pass that never comes (or placed on nodes nobody checked). Under an external
  // manager Slurm's prolog checks the nodes (deploy/slurm/kiln-node-check): accepted.
  if (spec.preflight != PreflightLevel::kNone && s.options.preflight_level.empty() &&
      !s.external()) {
    return Status::invalid_argument("job '" + spec.name + "' asks preflight: " +
                                    std::string(preflight_level_name(spec.preflight)) +
                                    ", but this coordinator runs no preflight gate (kiln serve "
                                    "--preflight off); drop the key or run the gate");
  }
  if (!s.options.queues.empty()) {
    const QueueSpec* queue = nullptr;
    std::string names;
    for (const QueueSpec& q : s.options.queues) {
      if (q.name == spec.queue) queue = &q;
      names += (names.empty() ? "" : ", ") + q.name;
    }
    if (queue == nullptr) {
      return Status::invalid_argument("job '" + spec.name + "': queue '" + spec.queue +
                                      "' does not exist; the queues are: " + names);
    }
    const std::string& team = queue->team.empty() ? queue->name : queue->team;
    if (!caller.admin && caller.team != team) {
      return Status::invalid_argument("job '" + spec.name + "': queue '" + spec.queue +
                                      "' belongs to team " + team + ", not " + caller.team);
    }
  }
  // A job no node could ever hold is refused now, never left to block its queue. Judged on the
  // nodes whose capacities this coordinator has heard (after a restart, until every agent has
  // reported again, a GPU job is not refused for want of GPUs nobody has reported yet).
  std::vector<NodeView> views;
  bool all_reported = true;
  for (const auto& [name, node] : s.nodes) {
    all_reported = all_reported && (node.state == "down" || s.node_runtime[name].reported);
    views.push_back(s.node_view(name, node));
  }
  if (!views.empty() && all_reported) {
    std::string why;
    if (!fits_idle_cluster(s.job_view(spec, "", {}), std::move(views), &why)) {
      return Status::invalid_argument("job '" + spec.name + "' can never run here: " + why);
    }
  }
  if (workdir.empty() || workdir[0] != '/') {
    return Status::invalid_argument("the job's working directory must be an absolute path, not '" +
                                    workdir + "'");
  }
  if (!spec.checkpoint_dir.empty() && spec.checkpoint_dir[0] != '/') {
    spec.checkpoint_dir = workdir + "/" + spec.checkpoint_dir;
  }
  JobRecord job;
  job.team = caller.team;
  job.workdir = workdir;
  job.spec = std::move(spec);
  job.state = "queued";
  job.submitted_ns = s.wall();
  EventRecord queued;
  queued.ts_ns = job.submitted_ns;
  queued.type = "queued";
  queued.detail = {{"by", caller.name}, {"team", caller.team}};
  KILN_ASSIGN_OR_RETURN(JobRecord stored, s.store->insert_job(std::move(job), queued));
  s.log.info("job submitted",
             {{"job", stored.id}, {"name", stored.spec.name}, {"team", stored.team}});
  s.jobs[stored.id] = stored;
  Status scheduled = s.schedule();
  if (!scheduled.ok()) s.log.warn("scheduling failed", {{"error", scheduled.to_string()}});
  auto it = s.jobs.find(stored.id);
  return it != s.jobs.end() ? it->second : stored;
}

Result<JobStatus> Coordinator::job(const Caller& caller, const std::string& id) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  JobStatus out;
  auto it = s.jobs.find(id);
  if (it != s.jobs.end()) {
    out.record = it->second;
    auto rt = s.runtime.find(id);
    if (rt != s.runtime.end()) {
      out.waiting = rt->second.waiting;
      out.waiting_kind = rt->second.waiting_kind;
      out.queue_position = rt->second.queue_position;
    }
  } else {
    Result<JobRecord> stored = s.store->get_job(id);
    if (!stored.ok()) return stored.status();
    out.record = std::move(*stored);
  }
  // Another team's job is reported as absent: its existence is not theirs to learn.
  if (!s.visible_to(caller, out.record)) return Status::not_found("no job " + id);
  out.goodput = s.goodput_of(out.record);
  return out;
}

Result<JobStatus> Coordinator::job_detail(const Caller& caller, const std::string& id) {
  KILN_ASSIGN_OR_RETURN(JobStatus out, job(caller, id));
  std::lock_guard<std::mutex> lock(impl_->mu);
  out.ranks = impl_->rank_statuses(out.record);
  out.signatures = impl_->signatures_of(id);
  return out;
}

Result<std::vector<JobStatus>> Coordinator::jobs(const Caller& caller) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  KILN_ASSIGN_OR_RETURN(std::vector<JobRecord> all,
                        s.store->list_jobs(caller.admin ? std::string() : caller.team));
  std::vector<JobStatus> out;
  out.reserve(all.size());
  for (JobRecord& job : all) {
    JobStatus st;
    auto live = s.jobs.find(job.id);
    st.record = live != s.jobs.end() ? live->second : std::move(job);
    auto rt = s.runtime.find(st.record.id);
    if (rt != s.runtime.end()) {
      st.waiting = rt->second.waiting;
      st.waiting_kind = rt->second.waiting_kind;
      st.queue_position = rt->second.queue_position;
    }
    st.goodput = s.goodput_of(st.record);
    out.push_back(std::move(st));
  }
  return out;
}

Result<std::vector<EventRecord>> Coordinator::events(const Caller& caller, const std::string& id,
                                                     int64_t after_seq, size_t limit) {
  {
    // The job's visibility decides (another team's job is not found).
    std::lock_guard<std::mutex> lock(impl_->mu);
    KILN_RETURN_IF_ERROR(impl_->check_visible(caller, id));
  }
  return impl_->store->events_for_job(id, after_seq, limit);
}

Result<JobRecord> Coordinator::cancel(const Caller& caller, const std::string& id) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  auto it = s.jobs.find(id);
  if (it == s.jobs.end()) {
    Result<JobRecord> stored = s.store->get_job(id);
    if (!stored.ok()) return stored.status();
    if (!s.visible_to(caller, *stored)) return Status::not_found("no job " + id);
    return *stored;  // already ended: cancelling it again changes nothing
  }
  JobRecord job = it->second;
  if (!s.visible_to(caller, job)) return Status::not_found("no job " + id);
  const JobState st = state_of(job);
  job.reason = "cancelled by " + caller.name;
  std::vector<EventRecord> events;
  if (has_processes(st)) {
    if (st != JobState::kStopping) {
      JobRuntime& rt = s.runtime_of(job);
      rt.stop_mono_ns = s.mono();
      rt.stop_grace_ms = s.options.cancel_grace_ms;
      rt.awaiting_recovery = false;
      KILN_RETURN_IF_ERROR(s.write_job(&job, JobState::kStopping, {}));
    } else {
      // Already stopping after a fault: it ends cancelled instead of restarting.
      KILN_RETURN_IF_ERROR(s.write_job(&job, JobState::kStopping, {}));
    }
  } else {
    KILN_RETURN_IF_ERROR(s.write_job(&job, JobState::kCancelled, {}));
  }
  return job;
}

Result<std::vector<NodeRecord>> Coordinator::nodes() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<NodeRecord> out;
  for (const auto& [name, node] : impl_->nodes)
    out.push_back(node);
  return out;
}

Status Coordinator::Impl::set_node_state(const std::string& name, NodeState to,
                                         const std::string& reason) {
  auto it = nodes.find(name);
  if (it == nodes.end()) return Status::not_found("no node " + name);
  NodeRecord node = it->second;
  std::optional<NodeState> from = parse_node_state(node.state);
  if (!from) return Status::corruption("node " + name + " has an unknown state " + node.state);
  if (*from != to) {
    KILN_RETURN_IF_ERROR(check_node_transition(*from, to).with_context("node " + name));
  }
  node.state = std::string(node_state_name(to));
  node.reason = reason;
  node.state_since_ns = wall();
  if (to == NodeState::kReady) node.fault_ns.clear();
  KILN_ASSIGN_OR_RETURN(NodeRecord stored,
                        store->upsert_node(node, {node_event(name, "node_" + node.state, reason)}));
  log.info("node state", {{"node", name}, {"state", stored.state}, {"reason", reason}});
  nodes[name] = std::move(stored);
  return Status();
}

Result<NodeRecord> Coordinator::cordon(const Caller& caller, const std::string& node,
                                       const std::string& reason) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  auto it = s.nodes.find(node);
  if (it == s.nodes.end()) return Status::not_found("no node " + node);
  if (it->second.state == "down") {
    return Status::invalid_argument("node " + node + " is down; cordon it when it is back");
  }
  // Preflight lifts the cordons it made, told apart by this prefix: an operator's never has it.
  if (reason.rfind(kPreflightCordonPrefix, 0) == 0) {
    return Status::invalid_argument("a cordon reason may not start with '" +
                                    std::string(kPreflightCordonPrefix) +
                                    "': that marks the preflight gate's own cordons");
  }
  KILN_RETURN_IF_ERROR(
      s.set_node_state(node, NodeState::kCordoned, reason + " (by " + caller.name + ")"));
  return s.nodes[node];
}

Result<NodeRecord> Coordinator::uncordon(const Caller& caller, const std::string& node) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  auto it = s.nodes.find(node);
  if (it == s.nodes.end()) return Status::not_found("no node " + node);
  if (it->second.state != "cordoned") return it->second;  // nothing to undo
  KILN_RETURN_IF_ERROR(s.check_readmission(it->second));
  KILN_RETURN_IF_ERROR(s.set_node_state(node, NodeState::kReady, "uncordoned by " + caller.name));
  Status scheduled = s.schedule();
  if (!scheduled.ok()) s.log.warn("scheduling failed", {{"error", scheduled.to_string()}});
  return s.nodes[node];
}

Result<std::string> Coordinator::node_of_rank(const Caller& caller, const std::string& id, int rank,
                                              int attempt) {
  KILN_ASSIGN_OR_RETURN(JobStatus st, job(caller, id));
  std::vector<std::string> nodes = st.record.nodes;
  if (attempt >= 0 && attempt != st.record.attempt) {
    // An earlier attempt ran where its own placed event says.
    KILN_ASSIGN_OR_RETURN(std::vector<EventRecord> events,
                          impl_->store->events_for_job(id, 0, kStoreRowsMax));
    nodes.clear();
    for (const EventRecord& e : events) {
      if (e.type == "placed" && e.attempt == attempt && e.detail.contains("nodes") &&
          e.detail["nodes"].is_array()) {
        nodes = e.detail["nodes"].get<std::vector<std::string>>();
      }
    }
  }
  const int per_node = std::max(st.record.spec.ranks_per_node, 1);
  const int node_index = rank / per_node;
  if (rank < 0 || node_index >= static_cast<int>(nodes.size())) {
    return Status::not_found("job " + id + " has no rank " + std::to_string(rank) +
                             (attempt >= 0 ? " in attempt " + std::to_string(attempt)
                                           : std::string(" in its current attempt")));
  }
  return nodes[static_cast<size_t>(node_index)];
}

Coordinator::Figures Coordinator::figures() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  Figures f;
  for (const auto& [id, job] : s.jobs) {
    ++f.jobs_by_state[job.state];
    if (job.state == "queued") ++f.queued;
    if (job.state != "running") continue;
    f.goodput_by_job[id] = s.goodput_of(job);
    JobFigures& j = f.running[id];
    j.name = job.spec.name;
    j.team = job.team;
    j.queue = job.spec.queue;
    j.attempt = job.attempt;
    j.progress_timeout_s = static_cast<double>(job.spec.progress_timeout_ms) / 1e3;
    if (job.running_ns != 0 && s.wall() > job.running_ns) {
      j.ettr =
          std::min(1.0, job.productive_ms / (static_cast<double>(s.wall() - job.running_ns) / 1e6));
    }
    auto rt = s.runtime.find(id);
    if (rt == s.runtime.end()) continue;
    const int64_t now = s.mono();
    for (const RankRuntime& r : rt->second.ranks) {
      j.step = std::max(j.step, r.step);
      if (!r.ended && r.progress_mono_ns > 0) {
        j.progress_age_s =
            std::max(j.progress_age_s, static_cast<double>(now - r.progress_mono_ns) / 1e9);
      }
      j.rank_step_s.push_back(r.step >= 0 ? r.step_ms / 1e3 : 0);
      j.rank_compute_s.push_back(r.step >= 0 ? std::max(0.0, r.step_ms - r.comm_exposed_ms) / 1e3
                                             : -1);
      j.rank_straggler_z.push_back(r.straggler_z);
    }
    if (!rt->second.ranks.empty() && rt->second.ranks[0].step >= 0) {
      j.loss = rt->second.ranks[0].loss;
      j.has_loss = true;
      j.tokens_per_s = rt->second.ranks[0].tokens_per_s;
    }
  }
  for (const auto& [name, node] : s.nodes)
    ++f.nodes_by_state[node.state];
  return f;
}

Coordinator::Samples Coordinator::take_samples() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Samples out = std::move(impl_->samples);
  impl_->samples = Samples{};
  return out;
}

void Coordinator::tick() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  for (Status st : {s.detect_timeouts(), s.enforce_time_limits(), s.finish_stops(),
                    s.relax_suspects(), s.schedule(), s.flush_steps(/*now=*/false)}) {
    if (!st.ok()) s.log.warn("coordinator tick", {{"error", st.to_string()}});
  }
}

}  // namespace kiln::sched
