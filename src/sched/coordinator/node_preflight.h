// The coordinator's preflight of nodes: each node's facts read from its agent (GET /v1/facts,
// node token), then the stack check across them and against the version lock
// (kiln/preflight/stack.h) and the health check (kiln/preflight/health.h). Behind GET /v1/preflight
// (api.h) and `kiln preflight --nodes`.
#ifndef KILN_SCHED_COORDINATOR_NODE_PREFLIGHT_H_
#define KILN_SCHED_COORDINATOR_NODE_PREFLIGHT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <kiln/preflight/links.h>
#include <kiln/preflight/report.h>
#include <kiln/preflight/trial.h>
#include <kiln/sched/state_store.h>

namespace kiln::sched {

// One request checks at most this many nodes: agents are asked 16 at a time, each within
// kFactsTimeoutMs, so an answer takes at most 16 rounds of that.
inline constexpr size_t kPreflightNodesMax = 256;
inline constexpr int64_t kFactsTimeoutMs = 5000;

// Reads the facts of `nodes` from their agents, checks their stacks (a node without facts takes
// no part in the majority; `lock` may be null) and their health, the clock offset included
// (from the agent's X-Kiln-Wall-Ns header against the middle of the exchange).
// `stacks` (may be null): the last stack of nodes checked before, which take part in the
// majority; the stacks read now are added to it.
preflight::PreflightReport preflight_nodes(
    const std::vector<NodeRecord>& nodes, const std::string& node_token,
    const preflight::Stack* lock, const preflight::HealthThresholds& thresholds = {},
    std::map<std::string, preflight::Stack>* stacks = nullptr);

// The full level's checks beyond stack and health, run through the agents' probes
// (agent/probe.h) on the nodes whose facts came (the others are unreachable already).
struct FullCheckOptions {
  std::string store_address;  // the rendezvous store the link check's ranks meet at
  std::string store_token;
  preflight::LinkThresholds links;
  int random_rounds = 1;
  std::string bytes = "4M";
  int iters = 3;
  int64_t probe_timeout_ms = 60'000;
  // The ISA whose kernels `ops-check` runs on each node: the lock's cpu.best_isa, else most
  // nodes'. Empty: no operator check.
  std::string isa;
  uint64_t seed = 1;  // the random pairs of the link check
};

// Adds the link check's and the operator check's findings to `report` (verdicts recounted).
// The link check's ranks are the nodes in `report`'s order; one that cannot take part is a
// finding of its own ("links.probe").
void full_checks(const std::vector<NodeRecord>& nodes, const std::string& node_token,
                 const FullCheckOptions& options, preflight::PreflightReport* report);

// A job's trial run (kiln/preflight/trial.h) at the full level of `kiln preflight --job`.
struct TrialCheckOptions {
  preflight::TrialSpec spec;
  std::string workdir;  // the job's directory (absolute): the trial's paths are relative to it
  std::string user;     // the team's Unix user on the nodes; empty: the agents'
  int nodes = preflight::kTrialNodesDefault;
  // Five steps of a 124M-parameter model on a CPU take about a minute; five minutes is a trial
  // that hangs.
  int64_t timeout_ms = 300'000;
  const preflight::TrialExpectation* expected = nullptr;  // the lock's; may be null
};

// Runs the trial at once on the first `options.nodes` nodes of `report` that passed every other
// check, and adds its findings: those that name a node to the node's verdict, the others to
// report->job_findings; with no node to run on, a job finding says so.
void trial_check(const std::vector<NodeRecord>& nodes, const std::string& node_token,
                 const TrialCheckOptions& options, preflight::PreflightReport* report);

}  // namespace kiln::sched

#endif  // KILN_SCHED_COORDINATOR_NODE_PREFLIGHT_H_
