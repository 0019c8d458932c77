// The coordinator's side of an external resource manager (Slurm): the intent it hands the
// executor, and what the executor's observations change (slurm.h says how the two meet).
//
// Node states map both ways. What the manager says wins for what only it can know (a node that
// does not respond is down; a node an administrator drained is cordoned, reason "slurm: ...");
// what Kiln decides about a node (cordoned, or suspect after a fault) becomes a drain in the
// manager with the reason "kiln: ...", which Kiln alone lifts.
#include <algorithm>
#include <set>
#include <utility>

#include "sched/coordinator/coordinator_impl.h"

namespace kiln::sched {
namespace {

constexpr const char* kSlurmPrefix = "slurm: ";

bool from_manager(const NodeRecord& node) {
  return node.reason.rfind(kSlurmPrefix, 0) == 0;
}

// The manager placed an attempt itself (CoordinatorOptions::manager_places): its nodes become
// the job's. A node in both keeps its position, so a rank never changes its number; the
// manager's other nodes fill the remaining positions in the manager's order.
std::vector<std::string> adopt_nodes(const std::vector<std::string>& planned,
                                     const std::vector<std::string>& actual) {
  std::vector<std::string> out(planned.size());
  std::set<std::string> used;
  const std::set<std::string> chosen(actual.begin(), actual.end());
  for (size_t i = 0; i < planned.size(); ++i) {
    if (chosen.count(planned[i]) != 0) {
      out[i] = planned[i];
      used.insert(planned[i]);
    }
  }
  size_t next = 0;
  for (std::string& slot : out) {
    if (!slot.empty()) continue;
    while (used.count(actual[next]) != 0)
      ++next;
    slot = actual[next];
    used.insert(slot);
  }
  return out;
}

}  // namespace

ExecutorIntent Coordinator::executor_intent(const std::string& name_prefix) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  ExecutorIntent intent;
  std::set<std::string> in_use;
  for (const auto& [id, job] : s.jobs) {
    if (!has_processes(state_of(job)) || job.nodes.empty()) continue;
    AllocationIntent a;
    a.job_id = id;
    a.attempt = job.attempt;
    a.name = name_prefix + "." + id + "." + std::to_string(job.attempt);
    a.nodes = job.nodes;
    a.ranks_per_node = std::max(job.spec.ranks_per_node, 1);
    a.cpus_per_rank = std::max(job.spec.resources.cpus, 1);
    a.memory_per_rank_bytes = job.spec.resources.memory_bytes;
    a.gpus_per_rank = job.spec.resources.gpus;
    a.time_limit_ms = job.spec.time_limit_ms;
    a.team = job.team;
    a.workdir = job.workdir;
    a.manager_places = s.options.manager_places;
    if (a.manager_places) {
      for (const auto& [name, node] : s.nodes) {
        if (node.state != "ready" &&
            std::find(job.nodes.begin(), job.nodes.end(), name) == job.nodes.end()) {
          a.exclude.push_back(name);
        }
      }
    }
    in_use.insert(job.nodes.begin(), job.nodes.end());
    intent.allocations.push_back(std::move(a));
  }
  for (const auto& [name, node] : s.nodes) {
    if (node.state == "cordoned" && !from_manager(node)) {
      intent.drains[name] = "kiln: cordoned: " + node.reason;
    } else if (node.state == "suspect" && in_use.count(name) == 0) {
      // Slurm has no "suspect": drained, it takes no other job; resumed when Kiln's policy
      // places a job there after all, or the node is quiet for the cordon window.
      intent.drains[name] = "kiln: suspect: " + node.reason;
    }
  }
  return intent;
}

Status Coordinator::Impl::external_node(const ExternalNode& n, const std::string& manager) {
  NodeRuntime& nrt = node_runtime[n.name];
  nrt.cpus = n.cpus;
  nrt.memory_bytes = n.memory_bytes;
  nrt.gpus = n.gpus;
  nrt.reported = true;
  nrt.report_mono_ns = mono();
  auto it = nodes.find(n.name);
  if (it == nodes.end()) {
    NodeRecord node;
    node.name = n.name;
    node.state = "ready";
    if (!n.partition.empty()) node.labels["pool"] = n.partition;
    node.slots = std::max(n.cpus, 1);
    node.state_since_ns = wall();
    node.last_heartbeat_ns = wall();
    node.agent_address = manager;
    KILN_ASSIGN_OR_RETURN(
        NodeRecord stored,
        store->upsert_node(node, {node_event(node.name, "node_up", manager + " lists it")}));
    log.info("node from the resource manager", {{"node", stored.name}, {"manager", manager}});
    it = nodes.emplace(stored.name, std::move(stored)).first;
  } else if (it->second.slots != std::max(n.cpus, 1)) {
    NodeRecord node = it->second;
    node.slots = std::max(n.cpus, 1);
    KILN_ASSIGN_OR_RETURN(NodeRecord stored, store->upsert_node(node, {}));
    it->second = std::move(stored);
  }
  const NodeRecord& node = it->second;
  const std::string why = n.reason.empty() ? "" : ": " + n.reason;
  // Slurm ends the jobs on a node it cannot reach or that is set down: so does Kiln, blaming it.
  auto fault_jobs_on = [&](const std::string& what) -> Status {
    std::vector<std::string> ids;
    for (const auto& [id, job] : jobs)
      if (std::find(job.nodes.begin(), job.nodes.end(), n.name) != job.nodes.end())
        ids.push_back(id);
    for (const std::string& id : ids) {
      JobRecord job = jobs[id];
      const int per_node = std::max(job.spec.ranks_per_node, 1);
      const auto pos = std::find(job.nodes.begin(), job.nodes.end(), n.name) - job.nodes.begin();
      KILN_RETURN_IF_ERROR(fault(&job, FaultCause::kNodeLost, static_cast<int>(pos) * per_node,
                                 n.name, manager + " " + what + " node " + n.name + why));
    }
    return Status();
  };
  if (!n.responding) {
    if (node.state == "down") return Status();
    KILN_RETURN_IF_ERROR(set_node_state(n.name, NodeState::kDown,
                                        kSlurmPrefix + std::string("not responding") + why));
    return fault_jobs_on("cannot reach");
  }
  // Set down while it answers (an administrator's DOWN), or drained for a reason not Kiln's:
  // cordoned in Kiln with Slurm's reason, until Slurm lets it run jobs again.
  const bool drained_by_others = n.drained && n.reason.rfind("kiln:", 0) != 0;
  if (n.down || drained_by_others) {
    const std::string reason = kSlurmPrefix + std::string(n.down ? "down" : "drained") + why;
    if (node.state == "cordoned" && node.reason == reason) return Status();
    if (node.state == "down") {
      KILN_RETURN_IF_ERROR(set_node_state(n.name, NodeState::kReady, "slurm: responds again"));
    }
    KILN_RETURN_IF_ERROR(set_node_state(n.name, NodeState::kCordoned, reason));
    return n.down ? fault_jobs_on("set down") : Status();
  }
  // Usable as far as the manager is concerned: lift what only the manager had put on it.
  if (node.state == "down" || (node.state == "cordoned" && from_manager(node))) {
    return set_node_state(n.name, NodeState::kReady, "slurm: the node is back");
  }
  return Status();
}

Status Coordinator::Impl::external_allocation(JobRecord job, const ExternalAllocation* seen,
                                              const std::string& manager) {
  JobRuntime& rt = runtime_of(job);
  const JobState st = state_of(job);
  if (seen == nullptr) {
    // Never submitted yet (the executor submits next round), or gone from the manager's memory
    // after its end: only the latter is news.
    if (rt.allocation_id.empty() || rt.allocation_ended) return Status();
    rt.allocation_ended = true;
    if (st == JobState::kPlaced || st == JobState::kRunning) {
      return fault(&job, FaultCause::kNodeLost, -1, "",
                   manager + " job " + rt.allocation_id + " is gone from " + manager);
    }
    return Status();
  }
  const bool first = rt.allocation_id != seen->id;
  rt.allocation_id = seen->id;
  rt.allocation_state = seen->state;
  if (seen->state == "PENDING") {
    rt.waiting = manager + " job " + seen->id + " pending" +
                 (seen->reason.empty() ? "" : " (" + seen->reason + ")");
    rt.waiting_kind = "allocation";
  }
  if (first) {
    KILN_RETURN_IF_ERROR(
        write_job(&job, st,
                  {event(job, "allocation",
                         {{"manager", manager},
                          {"slurm_job_id", seen->id},
                          {"state", seen->state},
                          // the manager's choice is known once it runs
                          {"nodes", options.manager_places ? seen->nodes : job.nodes}})}));
  }
  if (seen->state == "RUNNING" && !rt.allocation_running) {
    const std::set<std::string> distinct(seen->nodes.begin(), seen->nodes.end());
    if (options.manager_places && distinct.size() != job.nodes.size()) {
      return fault(&job, FaultCause::kStartFailed, -1, "",
                   manager + " job " + seen->id + " runs on " + std::to_string(distinct.size()) +
                       " node(s), the attempt needs " + std::to_string(job.nodes.size()),
                   false);
    }
    std::vector<std::string> moved_from;
    if (options.manager_places) {
      std::vector<std::string> adopted = adopt_nodes(job.nodes, seen->nodes);
      if (adopted != job.nodes) {
        moved_from = job.nodes;
        job.nodes = std::move(adopted);
      }
    }
    // The attempt's clocks start now: a long wait in the manager's queue is neither a start
    // timeout nor time against the job's limit.
    rt.allocation_running = true;
    rt.attempt_mono_ns = mono();
    for (RankRuntime& r : rt.ranks)
      if (r.step < 0) r.progress_mono_ns = rt.attempt_mono_ns;
    rt.waiting.clear();
    rt.waiting_kind.clear();
    nlohmann::json detail = {
        {"manager", manager}, {"slurm_job_id", seen->id}, {"nodes", job.nodes}};
    if (!moved_from.empty()) detail["planned_nodes"] = moved_from;  // the manager chose others
    KILN_RETURN_IF_ERROR(write_job(&job, st, {event(job, "allocation_running", detail)}));
  }
  if (!seen->ended || rt.allocation_ended) return Status();
  rt.allocation_ended = true;
  if (st != JobState::kPlaced && st != JobState::kRunning) return Status();
  // The allocation ended under running ranks: the manager lost a node (NODE_FAIL), hit its time
  // limit, or someone cancelled it outside Kiln. A node the manager now reports down is the
  // culprit; else the fault is the allocation's, not a node's.
  std::string culprit;
  for (const std::string& n : job.nodes) {
    auto it = nodes.find(n);
    if (it != nodes.end() && it->second.state == "down") {
      culprit = n;
      break;
    }
  }
  int rank = -1;
  if (!culprit.empty()) {
    const auto pos = std::find(job.nodes.begin(), job.nodes.end(), culprit) - job.nodes.begin();
    rank = static_cast<int>(pos) * std::max(job.spec.ranks_per_node, 1);
  }
  return fault(&job, FaultCause::kNodeLost, rank, culprit,
               manager + " job " + seen->id + " ended " + seen->state +
                   (seen->reason.empty() ? "" : " (" + seen->reason + ")"),
               !culprit.empty());
}

Status Coordinator::executor_report(const ExecutorReport& report) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  std::set<std::string> listed;
  for (const ExternalNode& n : report.nodes) {
    listed.insert(n.name);
    KILN_RETURN_IF_ERROR(s.external_node(n, report.manager).with_context("node " + n.name));
  }
  // A node the manager no longer lists (removed from its configuration) is down to Kiln.
  std::vector<std::string> gone;
  for (const auto& [name, node] : s.nodes)
    if (listed.count(name) == 0 && node.state != "down") gone.push_back(name);
  for (const std::string& name : gone) {
    ExternalNode n;
    n.name = name;
    n.responding = false;
    n.reason = report.manager + " no longer lists it";
    KILN_RETURN_IF_ERROR(s.external_node(n, report.manager));
  }

  std::set<std::string> just_submitted;
  for (const ExternalAllocation& a : report.submitted) {
    just_submitted.insert(a.job_id);
    auto it = s.jobs.find(a.job_id);
    if (it == s.jobs.end() || it->second.attempt != a.attempt) continue;
    KILN_RETURN_IF_ERROR(s.external_allocation(it->second, &a, report.manager));
  }
  for (const auto& [id, error] : report.submit_errors) {
    auto it = s.jobs.find(id);
    if (it == s.jobs.end()) continue;
    JobRecord job = it->second;
    // The manager refused the allocation (a bad partition, a limit): the job's fault, not a
    // node's; the restart budget bounds the retries.
    KILN_RETURN_IF_ERROR(s.fault(&job, FaultCause::kStartFailed, -1, "",
                                 "sbatch refused the allocation: " + error, false));
  }
  std::map<std::pair<std::string, int>, const ExternalAllocation*> seen;
  for (const ExternalAllocation& a : report.allocations)
    seen[{a.job_id, a.attempt}] = &a;
  std::vector<std::string> ids;
  for (const auto& [id, job] : s.jobs)
    if (has_processes(state_of(job)) && !job.nodes.empty()) ids.push_back(id);
  for (const std::string& id : ids) {
    auto it = s.jobs.find(id);
    if (it == s.jobs.end() || just_submitted.count(id) != 0) continue;
    auto a = seen.find({id, it->second.attempt});
    KILN_RETURN_IF_ERROR(
        s.external_allocation(it->second, a == seen.end() ? nullptr : a->second, report.manager));
  }
  for (Status st : {s.finish_stops(), s.schedule()}) {
    if (!st.ok()) s.log.warn("after an executor report", {{"error", st.to_string()}});
  }
  return Status();
}

}  // namespace kiln::sched
