// Reads nodes' facts from their agents and runs the stack check (node_preflight.h).
#include "sched/coordinator/node_preflight.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>
#include <thread>
#include <utility>

#include <kiln/base/clock.h>
#include <kiln/obs/http_client.h>

namespace kiln::sched {
namespace {

constexpr size_t kAgentsAtOnce = 16;

struct NodeFacts {
  nlohmann::json facts;
  std::optional<int64_t> clock_offset_ms;  // the node's wall clock minus ours
};

// The facts of one node, or why there are none.
Result<NodeFacts> facts_of(const NodeRecord& node, const std::string& node_token) {
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
  const int64_t asked_ns = wall_now_ns();
  Result<obs::HttpResponse> r = client->get("/v1/facts");
  const int64_t answered_ns = wall_now_ns();
  if (!r.ok()) return r.status().with_context("node " + node.name + "'s agent");
  if (r->status != 200) {
    return Status::unavailable("node " + node.name + "'s agent answered HTTP " +
                               std::to_string(r->status) + " to GET /v1/facts");
  }
  nlohmann::json facts = nlohmann::json::parse(r->body, nullptr, false);
  if (!facts.is_object() || facts.value("schema", "") != "kiln.facts/1") {
    return Status::unavailable("node " + node.name + "'s agent sent no kiln.facts/1 document");
  }
  NodeFacts out;
  out.facts = std::move(facts);
  for (const auto& [key, value] : r->headers) {
    if (key != "X-Kiln-Wall-Ns") continue;
    int64_t node_ns = 0;
    const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), node_ns);
    // Against the middle of the exchange: the error is at most half its round trip.
    if (ec == std::errc() && ptr == value.data() + value.size()) {
      out.clock_offset_ms = (node_ns - (asked_ns + (answered_ns - asked_ns) / 2)) / 1'000'000;
    }
  }
  return out;
}

}  // namespace

PreflightResult preflight_nodes(const std::vector<NodeRecord>& nodes, const std::string& node_token,
                                const preflight::Stack* lock,
                                const preflight::HealthThresholds& thresholds) {
  std::vector<Result<NodeFacts>> facts(nodes.size(), Status::unavailable("not asked"));
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
    if (facts[i].ok()) stacks[nodes[i].name] = preflight::stack_of(facts[i]->facts);
  PreflightResult out;
  out.findings = preflight::check_stacks(stacks, lock);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!facts[i].ok()) continue;
    for (preflight::Finding& f : preflight::check_health(nodes[i].name, facts[i]->facts, thresholds,
                                                         facts[i]->clock_offset_ms)) {
      out.findings.push_back(std::move(f));
    }
  }
  std::map<std::string, int> failures;
  for (const preflight::Finding& f : out.findings)
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
  for (const preflight::Finding& f : result.findings) {
    findings.push_back({{"node", f.node},
                        {"check", f.check},
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
