// One preflight over a set of nodes (kiln/preflight/report.h).
#include <kiln/preflight/report.h>

#include <map>
#include <utility>

namespace kiln::preflight {

PreflightReport check_nodes(const std::vector<NodeFacts>& nodes, const Stack* lock,
                            const HealthThresholds& thresholds) {
  std::map<std::string, Stack> stacks;
  for (const NodeFacts& n : nodes)
    if (n.facts) stacks[n.node] = stack_of(*n.facts);
  PreflightReport out;
  out.findings = check_stacks(stacks, lock);
  for (const NodeFacts& n : nodes) {
    if (!n.facts) continue;
    for (Finding& f : check_health(n.node, *n.facts, thresholds, n.clock_offset_ms))
      out.findings.push_back(std::move(f));
  }
  std::map<std::string, int> failures;
  for (const Finding& f : out.findings)
    ++failures[f.node];
  for (const NodeFacts& n : nodes) {
    NodeVerdict v;
    v.node = n.node;
    if (!n.facts) {
      v.verdict = "unreachable";
      v.error = n.error;
    } else {
      v.failures = failures.count(n.node) != 0 ? failures[n.node] : 0;
      v.verdict = v.failures == 0 ? "pass" : "fail";
      v.checked = stacks[n.node].size();
    }
    out.nodes.push_back(std::move(v));
  }
  return out;
}

nlohmann::json report_json(const PreflightReport& report) {
  nlohmann::json findings = nlohmann::json::array();
  for (const Finding& f : report.findings) {
    findings.push_back({{"node", f.node},
                        {"check", f.check},
                        {"path", f.path},
                        {"expected", f.expected},
                        {"found", f.found},
                        {"against", f.against}});
  }
  nlohmann::json nodes = nlohmann::json::array();
  for (const NodeVerdict& n : report.nodes) {
    nlohmann::json j = {
        {"node", n.node}, {"verdict", n.verdict}, {"failures", n.failures}, {"checked", n.checked}};
    if (!n.error.empty()) j["error"] = n.error;
    nodes.push_back(std::move(j));
  }
  return {{"findings", std::move(findings)}, {"nodes", std::move(nodes)}};
}

}  // namespace kiln::preflight
