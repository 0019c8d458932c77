// The coordinator's preflight runner (`kiln serve`): checks nodes through their agents, holds
// each against the version lock and against the stacks of the nodes it checked before (so a node
// that joins alone is still compared with the rest), and records the results in the coordinator
// (Coordinator::record_preflight), which cordons a failing node and admits a passing one.
//
// Two callers: its own loop, which every interval checks the nodes the coordinator says are due
// (Coordinator::preflight_due: new, restarted, expiring, or failed a while ago), and the API's
// GET /v1/preflight (`kiln preflight`). One check runs at a time; neither holds the
// coordinator's lock while agents are asked.
#ifndef KILN_SCHED_PREFLIGHT_GATE_H_
#define KILN_SCHED_PREFLIGHT_GATE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <kiln/base/log.h>
#include <kiln/base/result.h>
#include <kiln/preflight/links.h>
#include <kiln/preflight/report.h>
#include <kiln/sched/coordinator.h>

namespace kiln::sched {

struct PreflightGateOptions {
  std::string node_token;                       // the agents' token (GET /v1/facts)
  std::shared_ptr<const preflight::Lock> lock;  // `kiln serve --lock`; null: none
  preflight::HealthThresholds thresholds;
  std::string level = "quick";  // what the loop checks due nodes at
  int64_t interval_ms = 1000;   // how often the loop asks for due nodes
  int64_t retry_ms = 30'000;    // a failed node is checked again this long after
  // The full level's probes (links, operators): the store the link check meets at, and its
  // parameters (node_preflight.h's FullCheckOptions; isa is filled in per check).
  std::string store_address;
  std::string store_token;
  preflight::LinkThresholds links;
  std::string link_bytes = "4M";
  int link_iters = 3;
  int link_random_rounds = 1;
  int64_t probe_timeout_ms = 60'000;
};

struct TrialCheckOptions;  // a job's trial run: src/sched/coordinator/node_preflight.h

class PreflightGate {
 public:
  // REQUIRES: coordinator outlives this.
  PreflightGate(PreflightGateOptions options, Coordinator* coordinator, Logger log);
  ~PreflightGate();  // stops the loop
  PreflightGate(const PreflightGate&) = delete;
  PreflightGate& operator=(const PreflightGate&) = delete;

  void start();  // the loop, on a thread of its own
  void stop();

  // Checks `nodes` (at most kPreflightNodesMax) at `level` now and records the results. At
  // full, fewer than three nodes take ready nodes along as link partners (in the report too).
  // With `trial` (at full), a job's trial run follows on the nodes that passed, held against
  // the lock's trial when the lock records one (src/sched/coordinator/node_preflight.h).
  // kUnavailable when another check is running; kInvalidArgument for an unknown level.
  Result<preflight::PreflightReport> check(const std::vector<NodeRecord>& nodes,
                                           const std::string& level,
                                           const TrialCheckOptions* trial = nullptr);
  // One round of the loop: checks the coordinator's due nodes. Returns how many it checked.
  Result<size_t> check_due();

  bool has_lock() const { return options_.lock != nullptr; }

 private:
  Result<preflight::PreflightReport> check_locked(const std::vector<NodeRecord>& nodes,
                                                  const TrialCheckOptions* trial,
                                                  const std::string& level);
  std::string expected_isa() const;  // REQUIRES: run_mu_ held
  void add_link_partners(std::vector<NodeRecord>* nodes) const;

  const PreflightGateOptions options_;
  Coordinator* const coordinator_;
  Logger log_;

  std::mutex run_mu_;  // one check at a time
  // The last stack of every node checked (the majority a node checked alone is held against).
  std::map<std::string, preflight::Stack> stacks_;  // GUARDED_BY(run_mu_)

  std::mutex loop_mu_;
  std::condition_variable loop_wake_;
  bool stopping_ = false;  // GUARDED_BY(loop_mu_)
  std::thread loop_;
};

}  // namespace kiln::sched

#endif  // KILN_SCHED_PREFLIGHT_GATE_H_
