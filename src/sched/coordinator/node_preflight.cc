// Reads nodes' facts from their agents and runs preflight's checks on them (node_preflight.h).
#include "sched/coordinator/node_preflight.h"

#include <algorithm>
#include <charconv>
#include <thread>
#include <utility>

#include <kiln/base/clock.h>
#include <kiln/obs/http_client.h>

namespace kiln::sched {
namespace {

constexpr size_t kAgentsAtOnce = 16;

// GET /v1/facts of one node's agent; `*clock_offset_ms` set when the answer says its time.
Result<nlohmann::json> ask_agent(const NodeRecord& node, const std::string& node_token,
                                 std::optional<int64_t>* clock_offset_ms) {
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
  for (const auto& [key, value] : r->headers) {
    if (key != "X-Kiln-Wall-Ns") continue;
    int64_t node_ns = 0;
    const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), node_ns);
    // Against the middle of the exchange: the error is at most half its round trip.
    if (ec == std::errc() && ptr == value.data() + value.size()) {
      *clock_offset_ms = (node_ns - (asked_ns + (answered_ns - asked_ns) / 2)) / 1'000'000;
    }
  }
  return facts;
}

preflight::NodeFacts facts_of(const NodeRecord& node, const std::string& node_token) {
  preflight::NodeFacts out;
  out.node = node.name;
  Result<nlohmann::json> facts = ask_agent(node, node_token, &out.clock_offset_ms);
  if (facts.ok()) {
    out.facts = std::move(*facts);
  } else {
    out.error = facts.status().message();
  }
  return out;
}

}  // namespace

preflight::PreflightReport preflight_nodes(const std::vector<NodeRecord>& nodes,
                                           const std::string& node_token,
                                           const preflight::Stack* lock,
                                           const preflight::HealthThresholds& thresholds) {
  std::vector<preflight::NodeFacts> facts(nodes.size());
  for (size_t begin = 0; begin < nodes.size(); begin += kAgentsAtOnce) {
    std::vector<std::thread> askers;
    const size_t end = std::min(nodes.size(), begin + kAgentsAtOnce);
    for (size_t i = begin; i < end; ++i)
      askers.emplace_back([&, i] { facts[i] = facts_of(nodes[i], node_token); });
    for (std::thread& t : askers)
      t.join();
  }
  return preflight::check_nodes(facts, lock, thresholds);
}

}  // namespace kiln::sched
