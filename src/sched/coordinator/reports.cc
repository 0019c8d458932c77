// The agents' side of the coordinator: what a report changes and what the answer tells the node.
#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include <kiln/launch/rank_env.h>

#include "sched/coordinator/coordinator_impl.h"

namespace kiln::sched {
namespace {

std::vector<std::string> default_command(const CoordinatorOptions& options, const JobSpec& spec) {
  std::vector<std::string> argv{options.kiln_binary, "train", spec.config, "--json"};
  if (!spec.checkpoint_dir.empty()) {
    argv.insert(argv.end(), {"--ckpt-dir", spec.checkpoint_dir});
    if (spec.checkpoint_every > 0) {
      argv.insert(argv.end(), {"--ckpt-every", std::to_string(spec.checkpoint_every)});
    }
  }
  return argv;
}

// A job's command as the node runs it: "kiln" as argv[0] is this coordinator's own binary, and
// `kiln train` gets the job's checkpoint directory unless the command names one itself.
std::vector<std::string> rank_command(const CoordinatorOptions& options, const JobSpec& spec) {
  if (spec.command.empty()) return default_command(options, spec);
  std::vector<std::string> argv = spec.command;
  if (argv[0] != "kiln") return argv;
  argv[0] = options.kiln_binary;
  const bool train = argv.size() > 1 && argv[1] == "train";
  if (train && !spec.checkpoint_dir.empty() &&
      std::find(argv.begin(), argv.end(), "--ckpt-dir") == argv.end()) {
    argv.insert(argv.end(), {"--ckpt-dir", spec.checkpoint_dir});
    if (spec.checkpoint_every > 0 &&
        std::find(argv.begin(), argv.end(), "--ckpt-every") == argv.end()) {
      argv.insert(argv.end(), {"--ckpt-every", std::to_string(spec.checkpoint_every)});
    }
  }
  return argv;
}

// `text` (a program's own output, bound for an event) with every secret value of the job's
// spec replaced by its name: events are TEXT columns, served to the job's team and its page, and
// a failing program may well print its environment (state_store.h: no TEXT column holds a
// secret).
std::string redact_secrets(std::string text, const JobSpec& spec) {
  // Longest first: a secret that is part of another must not leave the rest of that one.
  std::vector<const EnvVar*> secrets;
  for (const EnvVar& var : spec.env)
    if (var.secret && !var.value.empty()) secrets.push_back(&var);
  std::sort(secrets.begin(), secrets.end(),
            [](const EnvVar* a, const EnvVar* b) { return a->value.size() > b->value.size(); });
  for (const EnvVar* secret : secrets) {
    const EnvVar& var = *secret;
    const std::string mark = "[secret " + var.name + "]";
    for (size_t at = text.find(var.value); at != std::string::npos;
         at = text.find(var.value, at + mark.size())) {
      text.replace(at, var.value.size(), mark);
    }
  }
  return text;
}

}  // namespace

Status Coordinator::Impl::register_node(const AgentReport& report, bool* changed) {
  if (external()) {
    // The manager owns the node list, states and capacities; an agent is only the hands of an
    // allocation on one of its nodes.
    auto it = nodes.find(report.node);
    if (it == nodes.end()) {
      return Status::invalid_argument("node '" + report.node + "' is not a node of the " +
                                      options.executor + " cluster this coordinator runs on");
    }
    node_runtime[report.node].agent_mono_ns = mono();
    // Where `kiln logs` reads the node's rank logs while this allocation's agent lives.
    if (!report.address.empty() && it->second.agent_address != report.address) {
      NodeRecord node = it->second;
      node.agent_address = report.address;
      KILN_ASSIGN_OR_RETURN(NodeRecord stored, store->upsert_node(node, {}));
      it->second = std::move(stored);
    }
    return Status();
  }
  NodeRuntime& nrt = node_runtime[report.node];
  nrt.report_mono_ns = mono();
  nrt.cpus = report.cpus;
  nrt.memory_bytes = report.memory_bytes;
  nrt.gpus = report.gpus;
  nrt.reported = true;
  nrt.incarnation = report.incarnation;
  auto it = nodes.find(report.node);
  if (it == nodes.end()) {
    NodeRecord node;
    node.name = report.node;
    node.state = "ready";
    node.labels = report.labels;
    node.slots = report.slots;
    node.state_since_ns = wall();
    node.last_heartbeat_ns = wall();
    node.agent_address = report.address;
    KILN_ASSIGN_OR_RETURN(NodeRecord stored,
                          store->upsert_node(node, {node_event(node.name, "node_up", "")}));
    log.info("node registered", {{"node", stored.name}, {"slots", stored.slots}});
    nodes[stored.name] = std::move(stored);
    *changed = true;
    return Status();
  }
  NodeRecord node = it->second;
  const bool back = node.state == "down";
  if (!back && node.labels == report.labels && node.slots == report.slots &&
      node.agent_address == report.address) {
    return Status();  // a heartbeat: nothing to write
  }
  std::vector<EventRecord> events;
  if (back) {
    node.state = "ready";
    node.reason = "";
    node.state_since_ns = wall();
    events.push_back(node_event(node.name, "node_up", "its agent reports again"));
  }
  node.labels = report.labels;
  node.slots = report.slots;
  node.agent_address = report.address;
  node.last_heartbeat_ns = wall();
  KILN_ASSIGN_OR_RETURN(NodeRecord stored, store->upsert_node(node, events));
  nodes[stored.name] = std::move(stored);
  *changed = true;
  return Status();
}

// Another rank of the attempt already explains a failure: it was killed by a signal nobody in
// Kiln sent, or the kernel has it stopped.
bool Coordinator::Impl::other_culprit_known(const JobRuntime& rt, int rank) const {
  for (size_t i = 0; i < rt.ranks.size(); ++i) {
    if (static_cast<int>(i) == rank) continue;
    const RankRuntime& other = rt.ranks[i];
    if ((other.ended && !other.end.exited && !other.end.stopped_by_agent) ||
        (!other.ended && other.proc_state == 'T')) {
      return true;
    }
  }
  return false;
}

// The fault of a rank that ended badly, with its culprit. Blame: a rank killed by a signal
// nobody in Kiln sent is its own culprit; a rank whose collective failed names the peer its
// flight recorder blames; else a rank killed by a foreign signal or stopped by the kernel is;
// else the rank itself, and then the program, not its node, is at fault.
Status Coordinator::Impl::fault_from_exit(JobRecord* job, JobRuntime& rt, const RankReport& r) {
  int culprit = r.rank;
  std::string why;
  if (r.exited && r.culprit_rank >= 0 && static_cast<size_t>(r.culprit_rank) < rt.ranks.size()) {
    culprit = r.culprit_rank;
    why = "its flight recorder blames rank " + std::to_string(culprit);
  } else if (r.exited) {
    for (size_t i = 0; i < rt.ranks.size(); ++i) {
      const RankRuntime& other = rt.ranks[i];
      if (other.ended && !other.end.exited && !other.end.stopped_by_agent) {
        culprit = static_cast<int>(i);
        why = "rank " + std::to_string(culprit) + " was killed by signal " +
              std::to_string(other.end.code);
        break;
      }
      if (!other.ended && other.proc_state == 'T') {
        culprit = static_cast<int>(i);
        why = "rank " + std::to_string(culprit) + " is stopped (SIGSTOP)";
        break;
      }
    }
  }
  rt.pending_exit_mono_ns = 0;
  const size_t node_index = static_cast<size_t>(culprit / std::max(job->spec.ranks_per_node, 1));
  const std::string culprit_node = node_index < job->nodes.size() ? job->nodes[node_index] : "";
  samples.detection_s.push_back(static_cast<double>(r.ended_age_ms) / 1e3);
  std::string message = r.start_error.empty() ? r.describe : r.start_error;
  if (!why.empty()) message += "; " + why;
  // A rank that exited with an error of its own, blaming nobody else, says nothing against its
  // machine (a bad config exits 2 on any node); signals, hangs and lost nodes do.
  const bool program_error = r.exited && culprit == r.rank && r.start_error.empty();
  // What the error signatures read (error_signature.h): how the reporting rank ended and its
  // own last words.
  nlohmann::json extra = {{"reporter", r.rank}};
  extra[r.exited ? "exit_code" : "signal"] = r.code;
  if (r.oom_killed) extra["oom"] = true;
  if (!r.last_error.empty()) extra["error"] = redact_secrets(r.last_error, job->spec);
  if (culprit != r.rank) extra["blamed_by"] = why;
  return fault(job, r.start_error.empty() ? FaultCause::kRankExit : FaultCause::kStartFailed,
               culprit, culprit_node, message, !program_error, extra);
}

Status Coordinator::Impl::take_report(const AgentReport& report, bool* changed) {
  KILN_RETURN_IF_ERROR(register_node(report, changed));
  const int64_t now = mono();
  std::set<std::string> moved;  // jobs a rank of which reported a new step
  for (const RankReport& r : report.ranks) {
    auto it = jobs.find(r.job_id);
    // A rank of an ended job or of an earlier attempt: the answer leaves it out, and the agent
    // stops it (if it still runs) and forgets it.
    if (it == jobs.end() || it->second.attempt != r.attempt) continue;
    JobRecord& job = it->second;
    const JobState st = state_of(job);
    if (!has_processes(st)) continue;
    JobRuntime& rt = runtime_of(job);
    if (r.rank < 0 || static_cast<size_t>(r.rank) >= rt.ranks.size()) continue;
    RankRuntime& rank = rt.ranks[static_cast<size_t>(r.rank)];
    rank.proc_state = r.proc_state;
    if (r.rank == 0 && !r.recent.empty()) record_steps(job, rt, r);
    if (r.step > rank.step) {
      rank.step = r.step;
      rank.step_ms = r.step_ms;
      rank.loss = r.loss;
      rank.tokens_per_s = r.tokens_per_s;
      rank.comm_exposed_ms = r.comm_exposed_ms;
      rank.compute_window.push_back(std::max(0.0, r.step_ms - r.comm_exposed_ms));
      if (rank.compute_window.size() > kStragglerWindow) rank.compute_window.pop_front();
      moved.insert(r.job_id);
      rank.progress_mono_ns = now - std::max<int64_t>(r.progress_age_ms, 0) * 1'000'000;
      if (rt.awaiting_recovery && rt.fault_mono_ns != 0) {
        samples.recovery_s.push_back(static_cast<double>(now - rt.fault_mono_ns) / 1e9);
        log.info("job recovered", {{"job", job.id},
                                   {"attempt", job.attempt},
                                   {"fault_to_first_step_s", samples.recovery_s.back()}});
        rt.awaiting_recovery = false;
      }
      // Goodput counts each step once: steps redone after a restart were not productive.
      if (r.rank == 0 && r.step > job.last_step) {
        const int64_t fresh = job.last_step < 0 ? r.step + 1 : r.step - job.last_step;
        job.productive_ms += static_cast<double>(fresh) * r.step_ms;
        job.last_step = r.step;
      }
    }
    if (r.running) {
      rank.running = true;
      continue;
    }
    if (rank.ended) continue;
    rank.running = false;
    rank.ended = true;
    rank.end = r;
    const bool clean = r.exited && r.code == 0;
    const bool stopped = r.exited && r.code == launch::kExitStoppedResumable;
    rank.ok = clean || (stopped && st == JobState::kStopping);
    *changed = true;
    if (rank.ok || st == JobState::kStopping) continue;
    // A rank that exited with an error of its own, naming no peer, may be the echo of a peer's
    // death whose report is still on its way (a collective fails within milliseconds of its peer
    // dying, on another node, through another agent): wait up to kCulpritSettleMs for it before
    // blaming the program.
    const bool names_peer = r.exited && r.culprit_rank >= 0 && r.culprit_rank != r.rank;
    if (r.exited && !names_peer && r.start_error.empty() && !other_culprit_known(rt, r.rank)) {
      if (rt.pending_exit_mono_ns == 0) {
        rt.pending_exit_mono_ns = now;
        rt.pending_exit = r;
      }
      continue;
    }
    KILN_RETURN_IF_ERROR(fault_from_exit(&job, rt, r));
  }
  // Once per report and job, not per rank: judging looks at every rank of the job.
  for (const std::string& id : moved) {
    auto it = jobs.find(id);
    auto rt = runtime.find(id);
    if (it == jobs.end() || rt == runtime.end() || rt->second.attempt != it->second.attempt) {
      continue;
    }
    Status s = judge_stragglers(it->second, rt->second);
    if (!s.ok()) log.warn("judging stragglers", {{"job", id}, {"error", s.to_string()}});
  }
  // placed -> running once every rank runs; placed/running -> succeeded once every rank ended 0.
  // Only the jobs this report spoke of can have moved.
  std::vector<std::string> ids;
  for (const RankReport& r : report.ranks)
    if (ids.empty() || ids.back() != r.job_id) ids.push_back(r.job_id);
  for (const std::string& id : ids) {
    auto it = jobs.find(id);
    if (it == jobs.end()) continue;
    JobRecord job = it->second;
    const JobState st = state_of(job);
    if (st != JobState::kPlaced && st != JobState::kRunning) continue;
    JobRuntime& rt = runtime_of(job);
    bool all_started = !rt.ranks.empty();
    bool all_done = !rt.ranks.empty();
    for (const RankRuntime& r : rt.ranks) {
      all_started = all_started && (r.running || (r.ended && r.ok));
      all_done = all_done && r.ended && r.ok;
    }
    if (all_done) {
      KILN_RETURN_IF_ERROR(write_job(&job, JobState::kSucceeded, {}));
      *changed = true;
    } else if (st == JobState::kPlaced && all_started) {
      if (job.running_ns == 0) {
        job.running_ns = wall();
        samples.submit_to_running_s.push_back(
            static_cast<double>(job.running_ns - job.submitted_ns) / 1e9);
      }
      KILN_RETURN_IF_ERROR(write_job(&job, JobState::kRunning, {}));
      *changed = true;
    }
  }
  return Status();
}

// Whether a job's nodes are the manager's choice by now (CoordinatorOptions::manager_places):
// its allocation was seen running (the nodes were adopted then), or an agent reports one of its
// ranks, which it only ever got after that (so a coordinator restart, which forgets the first,
// never withholds ranks that run: an agent stops the ranks its answer leaves out).
bool Coordinator::Impl::manager_placement_known(
    std::map<std::string, JobRuntime>::const_iterator rt) const {
  if (rt == runtime.end()) return false;
  if (rt->second.allocation_running) return true;
  return std::any_of(rt->second.ranks.begin(), rt->second.ranks.end(),
                     [](const RankRuntime& r) { return r.running || r.ended; });
}

AgentAnswer Coordinator::Impl::answer_for(const std::string& node_name) {
  AgentAnswer answer;
  answer.heartbeat_interval_ms = options.heartbeat_interval_ms;
  auto node = nodes.find(node_name);
  answer.cordoned = node != nodes.end() && node->second.state == "cordoned";
  for (const auto& [id, job] : jobs) {
    const JobState st = state_of(job);
    if (!has_processes(st)) continue;
    const int per_node = std::max(job.spec.ranks_per_node, 1);
    const int world = static_cast<int>(job.nodes.size()) * per_node;
    auto rt = runtime.find(id);
    if (external() && options.manager_places && !manager_placement_known(rt)) continue;
    for (size_t i = 0; i < job.nodes.size(); ++i) {
      if (job.nodes[i] != node_name) continue;
      for (int local = 0; local < per_node; ++local) {
        RankAssignment a;
        a.job_id = id;
        a.attempt = job.attempt;
        a.rank = static_cast<int>(i) * per_node + local;
        a.stop = st == JobState::kStopping;
        a.grace_ms = rt != runtime.end() && rt->second.stop_grace_ms > 0 ? rt->second.stop_grace_ms
                                                                         : options.cancel_grace_ms;
        a.argv = rank_command(options, job.spec);
        a.cwd = job.workdir;
        a.team = job.team;
        auto user = options.team_users.find(job.team);
        if (user != options.team_users.end()) a.user = user->second;
        for (const EnvVar& v : job.spec.env)
          a.env[v.name] = v.value;
        a.checkpoint_dir = job.spec.checkpoint_dir;
        if (!a.checkpoint_dir.empty()) a.env["KILN_CHECKPOINT_DIR"] = a.checkpoint_dir;
        launch::RankEnv contract;
        contract.identity.rank = a.rank;
        contract.identity.world_size = world;
        contract.identity.local_rank = local;
        contract.identity.node_id = static_cast<int>(i);
        contract.identity.store_address = options.store_address;
        contract.identity.job_token = options.store_token;
        contract.identity.host = node_name;
        if (node != nodes.end()) {
          for (const auto& [key, value] : node->second.labels)
            contract.identity.topology.emplace_back(key, value);
        }
        contract.job.id = id;
        contract.job.attempt = job.attempt;
        for (auto& [key, value] : launch::rank_env_vars(contract))
          a.env[key] = value;
        answer.ranks.push_back(std::move(a));
      }
    }
  }
  return answer;
}

Result<AgentAnswer> Coordinator::report(const AgentReport& report) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  bool changed = false;
  KILN_RETURN_IF_ERROR(s.take_report(report, &changed));
  if (changed) {
    for (Status st : {s.finish_stops(), s.schedule()}) {
      if (!st.ok()) s.log.warn("after a report", {{"error", st.to_string()}});
    }
  }
  return s.answer_for(report.node);
}

}  // namespace kiln::sched
