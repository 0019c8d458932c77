// The preflight gate's side of the coordinator: which nodes are due for a check, what a result
// changes (a cordon with the findings, or its end), whether the policy may place on a node, and
// the rule that a node cordoned after faults passes `full` before it is readmitted.
//
// Invariant: with the gate on, the policy sees a node as placeable only while
// preflight_admits() holds; the node's stored state says why it is not (cordoned by preflight)
// or its preflight field does (never checked, expired, checked by an earlier agent).
#include <algorithm>
#include <set>
#include <utility>

#include "sched/coordinator/coordinator_impl.h"

namespace kiln::sched {
namespace {

constexpr int64_t kNsPerMs = 1'000'000;

// quick < full: a pass at full admits a node to a gate at quick.
int level_rank(std::string_view level) {
  if (level == "full") return 2;
  if (level == "quick") return 1;
  return 0;
}

}  // namespace

std::string preflight_cordon_level(const NodeRecord& node) {
  if (node.state != "cordoned") return "";
  for (const char* level : {"quick", "full"}) {
    if (node.reason.rfind(std::string(kPreflightCordonPrefix) + level + ": ", 0) == 0) return level;
  }
  return "";
}

bool cordoned_by_preflight(const NodeRecord& node) {
  return !preflight_cordon_level(node).empty();
}

std::set<std::string> Coordinator::Impl::busy_nodes() const {
  std::set<std::string> busy;
  for (const auto& [id, job] : jobs)
    if (has_processes(state_of(job))) busy.insert(job.nodes.begin(), job.nodes.end());
  return busy;
}

bool Coordinator::Impl::cordoned_for_faults(const NodeRecord& node) const {
  return node.state == "cordoned" &&
         static_cast<int>(node.fault_ns.size()) >= std::max(options.cordon_faults, 1);
}

bool Coordinator::Impl::preflight_admits(const std::string& name, const NodeRecord& node) {
  if (options.preflight_level.empty() || external()) return true;
  return preflight_pass_level(name, node) >= level_rank(options.preflight_level);
}

int Coordinator::Impl::preflight_pass_level(const std::string& name, const NodeRecord& node) {
  if (options.preflight_level.empty() || external()) return 2;
  const NodePreflight& p = node.preflight;
  if (!p.passed) return 0;
  if (wall() - p.checked_ns > options.preflight_valid_ms * kNsPerMs) return 0;
  // Until the node's agent reports (after a coordinator restart) it is unknown which agent runs
  // there now; the pass holds only for the agent that answered the check.
  const NodeRuntime& nrt = node_runtime[name];
  if (!nrt.reported || nrt.incarnation != p.agent) return 0;
  return level_rank(p.level);
}

std::string Coordinator::Impl::preflight_wanted_level() const {
  if (options.preflight_level.empty() || external()) return "";
  for (const auto& [id, job] : jobs) {
    const JobState st = state_of(job);
    if ((st == JobState::kQueued || st == JobState::kRestarting) &&
        job.spec.preflight == PreflightLevel::kFull) {
      return "full";
    }
  }
  return options.preflight_level;
}

std::string Coordinator::preflight_level() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->preflight_wanted_level();
}

std::string Coordinator::Impl::awaiting_preflight() {
  if (options.preflight_level.empty() || external()) return "";
  std::vector<std::string> names;
  for (const auto& [name, node] : nodes) {
    if ((node.state == "ready" || node.state == "suspect") && !preflight_admits(name, node)) {
      names.push_back(name);
    }
  }
  if (names.empty()) return "";
  std::string list;
  for (size_t i = 0; i < names.size() && i < 8; ++i)
    list += (i == 0 ? "" : ", ") + names[i];
  if (names.size() > 8) list += ", ...";
  return std::to_string(names.size()) + " node(s) await preflight (" + options.preflight_level +
         "): " + list;
}

std::vector<NodeRecord> Coordinator::preflight_due(int64_t retry_ms) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  std::vector<NodeRecord> due;
  if (s.options.preflight_level.empty() || s.external()) return due;
  const int64_t now = s.wall();
  const int gate = level_rank(s.options.preflight_level);
  // A waiting job that asks full raises the level for idle nodes only: a full check under a
  // job's traffic would measure the job and slow it.
  const int wanted = level_rank(s.preflight_wanted_level());
  const std::set<std::string> busy = s.busy_nodes();
  for (const auto& [name, node] : s.nodes) {
    const bool checkable =
        node.state == "ready" || node.state == "suspect" || cordoned_by_preflight(node);
    if (!checkable || node.agent_address.rfind("http", 0) != 0) continue;
    const NodeRuntime& nrt = s.node_runtime[name];
    if (!nrt.reported) continue;  // its agent's incarnation is not known yet
    // An agent that did not answer is asked again only after retry_ms, like a failed node.
    if (nrt.preflight_attempt_mono_ns != 0 &&
        s.mono() - nrt.preflight_attempt_mono_ns < retry_ms * kNsPerMs) {
      continue;
    }
    const NodePreflight& p = node.preflight;
    const int64_t age_ms = (now - p.checked_ns) / kNsPerMs;
    const bool idle = busy.count(name) == 0;
    const bool changed = p.level.empty() || level_rank(p.level) < gate ||
                         (idle && level_rank(p.level) < wanted) || p.agent != nrt.incarnation;
    bool is_due = changed;
    if (p.passed) {
      // A pass about to expire is renewed while the node is idle: a check under a job's
      // traffic would measure the job (its links) and slow it (ops-check takes every core).
      // A busy node whose pass expires only waits for its check until the job ends.
      is_due = is_due || (age_ms > s.options.preflight_valid_ms / 10 * 9 && idle);
    } else {
      is_due = is_due || age_ms > retry_ms;
    }
    if (is_due) due.push_back(node);
  }
  return due;
}

Status Coordinator::record_preflight(const preflight::PreflightReport& report,
                                     const std::string& level) {
  if (level_rank(level) == 0) {
    return Status::invalid_argument("preflight level '" + level + "': quick or full");
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  // With the gate off a check is recorded for `kiln nodes`, and changes no node's state.
  const bool gate = !s.options.preflight_level.empty() && !s.external();
  bool placeable_changed = false;
  for (const preflight::NodeVerdict& v : report.nodes) {
    auto it = s.nodes.find(v.node);
    if (it == s.nodes.end()) continue;
    if (v.verdict != "pass" && v.verdict != "fail") {
      // Unreachable: nothing learned of its stack; asked again after the retry interval.
      s.node_runtime[v.node].preflight_attempt_mono_ns = s.mono();
      continue;
    }
    s.node_runtime[v.node].preflight_attempt_mono_ns = 0;
    NodeRecord node = it->second;
    const bool passed = v.verdict == "pass";
    node.preflight.level = level;
    node.preflight.passed = passed;
    node.preflight.checked_ns = s.wall();
    node.preflight.summary = passed ? "" : preflight::summarize(report, v.node);
    node.preflight.agent = v.agent;
    std::vector<EventRecord> events;
    if (gate && !passed && (node.state == "ready" || node.state == "suspect")) {
      node.state = "cordoned";
      node.reason = std::string(kPreflightCordonPrefix) + level + ": " + node.preflight.summary;
      node.state_since_ns = s.wall();
      events.push_back(s.node_event(node.name, "node_cordoned", node.reason));
      s.log.warn("node failed preflight", {{"node", node.name}, {"findings", node.reason}});
    } else if (gate && passed && cordoned_by_preflight(node) &&
               level_rank(level) >= level_rank(preflight_cordon_level(node))) {
      // Only a pass at the cordon's level lifts it: a quick pass says nothing of the links a
      // full check found slow.
      node.state = "ready";
      node.reason = "";
      node.state_since_ns = s.wall();
      node.fault_ns.clear();
      events.push_back(s.node_event(node.name, "node_ready", "passed preflight " + level));
      s.log.info("node passed preflight", {{"node", node.name}, {"level", level}});
    }
    placeable_changed = placeable_changed || (gate && passed) || !events.empty();
    KILN_ASSIGN_OR_RETURN(NodeRecord stored, s.store->upsert_node(node, events));
    it->second = std::move(stored);
  }
  if (placeable_changed) {
    Status scheduled = s.schedule();
    if (!scheduled.ok()) s.log.warn("scheduling failed", {{"error", scheduled.to_string()}});
  }
  return Status();
}

std::set<std::string> Coordinator::busy_nodes() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->busy_nodes();
}

std::vector<NodeRecord> Coordinator::preflight_partners(const std::vector<std::string>& taken,
                                                        size_t n) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& s = *impl_;
  std::vector<NodeRecord> out;
  const std::set<std::string> busy = s.busy_nodes();
  for (const auto& [name, node] : s.nodes) {
    if (out.size() >= n) break;
    if (node.state != "ready" || busy.count(name) != 0 ||
        node.agent_address.rfind("http", 0) != 0 ||
        std::find(taken.begin(), taken.end(), name) != taken.end()) {
      continue;
    }
    out.push_back(node);
  }
  return out;
}

Status Coordinator::Impl::check_readmission(const NodeRecord& node) const {
  // Without the gate (or under an external manager, whose agents live only inside allocations
  // and cannot be checked) a cordon after faults is lifted by hand.
  if (options.preflight_level.empty() || external() || !cordoned_for_faults(node)) {
    return Status();
  }
  const NodePreflight& p = node.preflight;
  if (p.level == "full" && p.passed && p.checked_ns >= node.state_since_ns) return Status();
  return Status::aborted(
      "node " + node.name + " was cordoned after faults (" + node.reason +
      "); it is readmitted once it passes `kiln preflight --nodes " + node.name + " --level full`" +
      (p.level.empty() || p.checked_ns < node.state_since_ns
           ? std::string(" (not run since the cordon)")
           : " (the last one, at level " + p.level + ", " + (p.passed ? "passed" : "failed") +
                 (p.summary.empty() ? "" : ": " + p.summary) + ")"));
}

}  // namespace kiln::sched
