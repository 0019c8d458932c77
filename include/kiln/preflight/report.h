// One preflight over a set of nodes: the stack check across them and against the lock
// (stack.h), each node's health (health.h), and a verdict per node, whether the facts came from
// saved files (`kiln preflight --facts`) or from the agents (the coordinator's GET /v1/preflight).
#ifndef KILN_PREFLIGHT_REPORT_H_
#define KILN_PREFLIGHT_REPORT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <kiln/preflight/health.h>
#include <kiln/preflight/stack.h>
#include <kiln/preflight/trial.h>

namespace kiln::preflight {

// What is known of one node: its facts, or why there are none.
struct NodeFacts {
  std::string node;
  std::optional<nlohmann::json> facts;  // nullopt: unreachable, `error` says why
  std::string error;
  std::optional<int64_t> clock_offset_ms;  // the node's clock minus the asker's, when measured
  std::string agent;  // which agent process answered (its incarnation), when asked through one
};

struct NodeVerdict {
  std::string node;
  std::string agent;    // NodeFacts::agent
  std::string verdict;  // "pass", "fail", or "unreachable" (no facts: `error` says why)
  int failures = 0;
  size_t checked = 0;  // stack entries compared
  std::string error;
};

// One measured link of the full level's link matrix (links.h), by node name.
struct LinkFigure {
  std::string a;
  std::string b;
  double gbps = 0;
  double latency_us = 0;
};

struct PreflightReport {
  std::vector<Finding> findings;   // the stack's (sorted by node, path), then health's by node
  std::vector<NodeVerdict> nodes;  // in the order given
  std::vector<LinkFigure> links;   // the full level's link matrix; empty at quick
  // Where the time went, in seconds (0: not run): reading the facts, the link check, the
  // operator check. In the answer as "seconds": {facts, links, ops}.
  double facts_s = 0;
  double links_s = 0;
  double ops_s = 0;
  // The trial run of a job (trial.h), when one ran: each trial node's figures, the findings no
  // one node is blamed for (they fail the preflight and cordon nothing), the trial's signature,
  // what its figures were held against, and its seconds.
  std::vector<TrialResult> trial;
  std::vector<Finding> job_findings;
  std::string trial_signature;
  std::string trial_reference;
  double trial_s = 0;
};

// Checks the nodes; a node without facts takes no part in the majority. `lock` may be null.
// `peers` (may be null): stacks of other nodes, checked before, that take part in the majority
// without a verdict of their own, so that one node checked alone is still held against the rest.
PreflightReport check_nodes(const std::vector<NodeFacts>& nodes, const Stack* lock,
                            const HealthThresholds& thresholds,
                            const std::map<std::string, Stack>* peers = nullptr);

// Appends `more` to the report's findings and recounts the verdicts of the nodes they name.
void add_findings(PreflightReport* report, std::vector<Finding> more);

// One line a person reads for a failing node: its first findings, "check path: expected E,
// found F" joined by "; ", at most `bytes_max` bytes (cut at a finding, "..." when cut).
std::string summarize(const PreflightReport& report, const std::string& node,
                      size_t bytes_max = 400);

// {"findings": [{node, check, path, expected, found, against}], "nodes": [{node, verdict,
// failures, checked[, error]}], "links": [{a, b, gbps, latency_us}], "seconds": {facts, links,
// ops, trial}, "job_findings": [finding with node ""], "trial": {signature, reference, nodes:
// [{node, ran, loss, tokens_per_s, steps[, error]}]} (trial only when one ran)}: the API's answer
// and `kiln preflight --json`'s lines.
nlohmann::json report_json(const PreflightReport& report);

}  // namespace kiln::preflight

#endif  // KILN_PREFLIGHT_REPORT_H_
