// The coordinator's preflight of nodes: each node's facts read from its agent (GET /v1/facts,
// node token), then the stack check across them and against the version lock
// (kiln/preflight/stack.h) and the health check (kiln/preflight/health.h). Behind GET /v1/preflight
// (api.h) and `kiln preflight --nodes`.
#ifndef KILN_SCHED_COORDINATOR_NODE_PREFLIGHT_H_
#define KILN_SCHED_COORDINATOR_NODE_PREFLIGHT_H_

#include <cstdint>
#include <string>
#include <vector>

#include <kiln/preflight/report.h>
#include <kiln/sched/state_store.h>

namespace kiln::sched {

// One request checks at most this many nodes: agents are asked 16 at a time, each within
// kFactsTimeoutMs, so an answer takes at most 16 rounds of that.
inline constexpr size_t kPreflightNodesMax = 256;
inline constexpr int64_t kFactsTimeoutMs = 5000;

// Reads the facts of `nodes` from their agents, checks their stacks (a node without facts takes
// no part in the majority; `lock` may be null) and their health, the clock offset included
// (from the agent's X-Kiln-Wall-Ns header against the middle of the exchange).
preflight::PreflightReport preflight_nodes(const std::vector<NodeRecord>& nodes,
                                           const std::string& node_token,
                                           const preflight::Stack* lock,
                                           const preflight::HealthThresholds& thresholds = {});

}  // namespace kiln::sched

#endif  // KILN_SCHED_COORDINATOR_NODE_PREFLIGHT_H_
