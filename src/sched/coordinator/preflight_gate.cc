// The coordinator's preflight runner (kiln/sched/preflight_gate.h).
#include <kiln/sched/preflight_gate.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <utility>

#include <kiln/base/clock.h>

#include "sched/coordinator/node_preflight.h"

namespace kiln::sched {
namespace {

// A full check of fewer nodes than this takes ready nodes along as link partners: with three,
// a slow link is told from a slow node.
constexpr size_t kLinkPartners = 3;

}  // namespace

PreflightGate::PreflightGate(PreflightGateOptions options, Coordinator* coordinator, Logger log)
    : options_(std::move(options)), coordinator_(coordinator), log_(std::move(log)) {}

PreflightGate::~PreflightGate() {
  stop();
}

void PreflightGate::start() {
  if (loop_.joinable()) return;
  loop_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(loop_mu_);
    while (!stopping_) {
      lock.unlock();
      Result<size_t> checked = check_due();
      if (!checked.ok() && !checked.status().is_unavailable()) {
        log_.warn("preflight of due nodes failed", {{"error", checked.status().to_string()}});
      }
      lock.lock();
      loop_wake_.wait_for(lock, std::chrono::milliseconds(options_.interval_ms),
                          [this] { return stopping_; });
    }
  });
}

void PreflightGate::stop() {
  {
    std::lock_guard<std::mutex> lock(loop_mu_);
    stopping_ = true;
  }
  loop_wake_.notify_all();
  if (loop_.joinable()) loop_.join();
}

Result<preflight::PreflightReport> PreflightGate::check(const std::vector<NodeRecord>& nodes,
                                                        const std::string& level,
                                                        const TrialCheckOptions* trial) {
  std::unique_lock<std::mutex> lock(run_mu_, std::try_to_lock);
  if (!lock.owns_lock()) {
    return Status::unavailable("another preflight is running; try again when it has answered");
  }
  return check_locked(nodes, trial, level);
}

Result<size_t> PreflightGate::check_due() {
  std::unique_lock<std::mutex> lock(run_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return Status::unavailable("a preflight is running");
  std::vector<NodeRecord> due = coordinator_->preflight_due(options_.retry_ms);
  if (due.empty()) return size_t{0};
  // A fresh runner knows no stacks to hold a node against: its first round checks every node
  // that can answer, so that a node upgraded while the coordinator was down is not its own
  // majority.
  if (stacks_.empty()) {
    Result<std::vector<NodeRecord>> all = coordinator_->nodes();
    if (all.ok()) {
      for (const NodeRecord& n : *all) {
        const bool listed = std::any_of(due.begin(), due.end(),
                                        [&](const NodeRecord& d) { return d.name == n.name; });
        if (!listed && n.state != "down" && n.agent_address.rfind("http", 0) == 0) due.push_back(n);
      }
    }
  }
  if (due.size() > kPreflightNodesMax) due.resize(kPreflightNodesMax);  // the rest next round
  // The gate's level, or full while a waiting job asks it. A node preflight cordoned at full is
  // checked at full again: a quick pass would not lift it.
  // A busy node due for another reason (its agent restarted) is checked at the gate's own
  // level: a full check would measure the job on it.
  const std::string wanted = coordinator_->preflight_level();
  const std::string level = wanted.empty() ? options_.level : wanted;
  const std::set<std::string> busy = coordinator_->busy_nodes();
  std::vector<NodeRecord> at_level, at_gate, at_full;
  for (NodeRecord& n : due) {
    if (preflight_cordon_level(n) == "full" && level != "full") {
      at_full.push_back(std::move(n));
    } else if (level != options_.level && busy.count(n.name) != 0) {
      at_gate.push_back(std::move(n));
    } else {
      at_level.push_back(std::move(n));
    }
  }
  size_t checked = 0;
  for (const auto& [nodes, lvl] : {std::pair{&at_level, level}, std::pair{&at_gate, options_.level},
                                   std::pair{&at_full, std::string("full")}}) {
    if (nodes->empty()) continue;
    KILN_RETURN_IF_ERROR(check_locked(*nodes, nullptr, lvl).status());
    checked += nodes->size();
  }
  return checked;
}

// At full, nodes checked alone or in two still need peers for their links: ready nodes join as
// partners (kLinkPartners in all), and their results are recorded as well.
// Partners are idle: a job's traffic would be measured as the link's, and the check would
// slow the job.
void PreflightGate::add_link_partners(std::vector<NodeRecord>* nodes) const {
  if (nodes->size() >= kLinkPartners) return;
  std::vector<std::string> taken;
  for (const NodeRecord& n : *nodes)
    taken.push_back(n.name);
  for (NodeRecord& n : coordinator_->preflight_partners(taken, kLinkPartners - nodes->size()))
    nodes->push_back(std::move(n));
}

// The ISA the operators should dispatch to: the lock's, else the one most checked nodes have.
std::string PreflightGate::expected_isa() const {
  constexpr const char* kPath = "cpu.best_isa";
  if (options_.lock != nullptr) {
    auto it = options_.lock->stack.find(kPath);
    if (it != options_.lock->stack.end()) return it->second;
  }
  std::map<std::string, size_t> votes;
  for (const auto& [node, stack] : stacks_) {
    auto it = stack.find(kPath);
    if (it != stack.end()) ++votes[it->second];
  }
  std::string best;
  size_t most = 0;
  for (const auto& [isa, n] : votes) {
    if (n > most) best = isa, most = n;
  }
  return best;
}

Result<preflight::PreflightReport> PreflightGate::check_locked(const std::vector<NodeRecord>& nodes,
                                                               const TrialCheckOptions* trial,
                                                               const std::string& level) {
  if (level != "quick" && level != "full") {
    return Status::invalid_argument("preflight level '" + level + "': quick or full");
  }
  if (nodes.size() > kPreflightNodesMax) {
    return Status::invalid_argument("preflight checks at most " +
                                    std::to_string(kPreflightNodesMax) + " nodes at once");
  }
  std::vector<NodeRecord> with_partners = nodes;
  if (level == "full") add_link_partners(&with_partners);
  // The majority: the stacks of the nodes checked before, less those that are down now (a node
  // gone for good must not outvote the live ones).
  std::set<std::string> down;
  if (Result<std::vector<NodeRecord>> all = coordinator_->nodes(); all.ok()) {
    for (const NodeRecord& n : *all)
      if (n.state == "down") down.insert(n.name);
  }
  std::map<std::string, preflight::Stack> peers;
  for (const auto& [name, stack] : stacks_)
    if (down.count(name) == 0) peers.emplace(name, stack);
  preflight::PreflightReport report =
      preflight_nodes(with_partners, options_.node_token,
                      options_.lock ? &options_.lock->stack : nullptr, options_.thresholds, &peers);
  for (const NodeRecord& n : with_partners) {
    auto it = peers.find(n.name);
    if (it != peers.end()) stacks_[n.name] = it->second;
  }
  if (level == "full") {
    FullCheckOptions full;
    full.store_address = options_.store_address;
    full.store_token = options_.store_token;
    full.links = options_.links;
    full.bytes = options_.link_bytes;
    full.iters = options_.link_iters;
    full.random_rounds = options_.link_random_rounds;
    full.probe_timeout_ms = options_.probe_timeout_ms;
    full.seed = static_cast<uint64_t>(wall_now_ns());
    full.isa = expected_isa();
    full_checks(with_partners, options_.node_token, full, &report);
    if (trial != nullptr) {
      TrialCheckOptions t = *trial;
      t.expected =
          options_.lock != nullptr && options_.lock->trial ? &*options_.lock->trial : nullptr;
      // Only on the nodes asked for: a link partner may be one the job cannot run on.
      trial_check(nodes, options_.node_token, t, &report);
    }
  }
  KILN_RETURN_IF_ERROR(coordinator_->record_preflight(report, level));
  return report;
}

}  // namespace kiln::sched
