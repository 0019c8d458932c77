// Reads nodes' facts from their agents and runs the stack check (node_preflight.h).
#include "sched/coordinator/node_preflight.h"

#include <algorithm>
#include <map>
#include <thread>
#include <utility>

#include <kiln/obs/http_client.h>

namespace kiln::sched {
namespace {

constexpr size_t kAgentsAtOnce = 16;

// The facts of one node, or why there are none.
Result<nlohmann::json> facts_of(const NodeRecord& node, const std::string& node_token) {
  if (node.agent_address.rfind("http", 0) != 0) {
    return Status::unavailable("node " + node.name + " has no agent endpoint to ask" +
                               (node.state == "down" ? " (it is down)" : ""));
  }
  obs::HttpClientOptions o;
  o.base_url = node.agent_address;
  o.bearer_token = node_token;
  o.connect_timeout_ms = static_cast<int>(std::min<int64_t>(kFactsTimeoutMs, 2000));
  o.io_timeout_ms = static_cast<int>(kFactsTimeoutMs);
  o.answer_bytes_max = preflight::kFactsBytesMax;
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<obs::HttpClient> client, obs::HttpClient::create(o));
  Result<obs::HttpResponse> r = client->get("/v1/facts");
  if (!r.ok()) return r.status().with_context("node " + node.name + "'s agent");
  if (r->status != 200) {
    return Status::unavailable("node " + node.name + "'s agent answered HTTP " +
                               std::to_string(r->status) + " to GET /v1/facts");
  }
  nlohmann::json facts = nlohmann::json::parse(r->body, nullptr, false);
  if (!facts.is_object() || facts.value("schema", "") != "kiln.facts/1") {
    return Status::unavailable("node " + node.name + "'s agent sent no kiln.facts/1 document");
  }
  return facts;
}

}  // namespace

PreflightResult preflight_nodes(const std::vector<NodeRecord>& nodes, const std::string& node_token,
                                const preflight::Stack* lock) {
  std::vector<Result<nlohmann::json>> facts(nodes.size(), Status::unavailable("not asked"));
  for (size_t begin = 0; begin < nodes.size(); begin += kAgentsAtOnce) {
    std::vector<std::thread> askers;
    const size_t end = std::min(nodes.size(), begin + kAgentsAtOnce);
    for (size_t i = begin; i < end; ++i)
      askers.emplace_back([&, i] { facts[i] = facts_of(nodes[i], node_token); });
    for (std::thread& t : askers)
      t.join();
  }
  std::map<std::string, preflight::Stack> stacks;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (facts[i].ok()) stacks[nodes[i].name] = preflight::stack_of(*facts[i]);
  PreflightResult out;
  out.findings = preflight::check_stacks(stacks, lock);
  std::map<std::string, int> failures;
  for (const preflight::StackFinding& f : out.findings)
    ++failures[f.node];
  for (size_t i = 0; i < nodes.size(); ++i) {
    NodePreflight n;
    n.node = nodes[i].name;
    if (!facts[i].ok()) {
      n.verdict = "unreachable";
      n.error = facts[i].status().message();
    } else {
      n.failures = failures.count(n.node) != 0 ? failures[n.node] : 0;
      n.verdict = n.failures == 0 ? "pass" : "fail";
      n.checked = stacks[n.node].size();
    }
    out.nodes.push_back(std::move(n));
  }
  return out;
}

nlohmann::json preflight_json(const PreflightResult& result) {
  nlohmann::json findings = nlohmann::json::array();
  for (const preflight::StackFinding& f : result.findings) {
    findings.push_back({{"node", f.node},
                        {"check", "stack"},
                        {"path", f.path},
                        {"expected", f.expected},
                        {"found", f.found},
                        {"against", f.against}});
  }
  nlohmann::json nodes = nlohmann::json::array();
  for (const NodePreflight& n : result.nodes) {
    nlohmann::json j = {
        {"node", n.node}, {"verdict", n.verdict}, {"failures", n.failures}, {"checked", n.checked}};
    if (!n.error.empty()) j["error"] = n.error;
    nodes.push_back(std::move(j));
  }
  return {{"findings", std::move(findings)}, {"nodes", std::move(nodes)}};
}

}  // namespace kiln::sched
