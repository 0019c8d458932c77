// Reads nodes' facts from their agents and runs preflight's checks on them (node_preflight.h).
#include "sched/coordinator/node_preflight.h"

#include <algorithm>
#include <charconv>
#include <functional>
#include <map>
#include <thread>
#include <utility>

#include <kiln/base/clock.h>
#include <kiln/obs/http_client.h>
#include <kiln/preflight/probe_output.h>

#include "sched/agent/probe.h"

namespace kiln::sched {
namespace {

using preflight::json_lines;
using preflight::last_line;

constexpr size_t kAgentsAtOnce = 16;

// GET /v1/facts of one node's agent; `*clock_offset_ms` set when the answer says its time, and
// `*agent` to the incarnation of the agent that answered.
Result<nlohmann::json> ask_agent(const NodeRecord& node, const std::string& node_token,
                                 std::optional<int64_t>* clock_offset_ms, std::string* agent) {
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
    if (key == "X-Kiln-Agent") *agent = value.substr(0, 128);
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
  Result<nlohmann::json> facts = ask_agent(node, node_token, &out.clock_offset_ms, &out.agent);
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
                                           const preflight::HealthThresholds& thresholds,
                                           std::map<std::string, preflight::Stack>* stacks) {
  const int64_t start_ns = monotonic_now_ns();
  std::vector<preflight::NodeFacts> facts(nodes.size());
  for (size_t begin = 0; begin < nodes.size(); begin += kAgentsAtOnce) {
    std::vector<std::thread> askers;
    const size_t end = std::min(nodes.size(), begin + kAgentsAtOnce);
    for (size_t i = begin; i < end; ++i)
      askers.emplace_back([&, i] { facts[i] = facts_of(nodes[i], node_token); });
    for (std::thread& t : askers)
      t.join();
  }
  preflight::PreflightReport report = preflight::check_nodes(facts, lock, thresholds, stacks);
  report.facts_s = static_cast<double>(monotonic_now_ns() - start_ns) / 1e9;
  if (stacks != nullptr) {
    for (const preflight::NodeFacts& f : facts)
      if (f.facts) (*stacks)[f.node] = preflight::stack_of(*f.facts);
  }
  return report;
}

namespace {

// POST /v1/probe on one node's agent; the answer waits for the probe (its timeout plus slack).
Result<ProbeResult> run_probe(const NodeRecord& node, const std::string& node_token,
                              const ProbeRequest& request) {
  obs::HttpClientOptions o;
  o.base_url = node.agent_address;
  o.bearer_token = node_token;
  o.connect_timeout_ms = 2000;
  o.io_timeout_ms = static_cast<int>(request.timeout_ms + 10'000);
  o.answer_bytes_max = kProbeOutputMax * 2;
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<obs::HttpClient> client, obs::HttpClient::create(o));
  Result<obs::HttpResponse> r = client->post("/v1/probe", to_json(request).dump());
  if (!r.ok()) return r.status().with_context("node " + node.name + "'s agent");
  nlohmann::json body = nlohmann::json::parse(r->body, nullptr, false);
  if (r->status != 200) {
    return Status::unavailable(
        "node " + node.name + "'s agent answered HTTP " + std::to_string(r->status) + " to its " +
        request.check + " probe: " + (body.is_object() ? body.value("error", r->body) : r->body));
  }
  Result<ProbeResult> parsed = probe_result_from_json(body);
  if (!parsed.ok()) return parsed.status().with_context("node " + node.name);
  return parsed;
}

// Runs `request_of(i)` on every node at once (the link check needs every rank up together).
std::vector<Result<ProbeResult>> probe_all(const std::vector<const NodeRecord*>& nodes,
                                           const std::string& node_token,
                                           const std::function<ProbeRequest(size_t)>& request_of) {
  std::vector<Result<ProbeResult>> out(nodes.size(), Status::unavailable("not run"));
  std::vector<std::thread> threads;
  threads.reserve(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i)
    threads.emplace_back([&, i] { out[i] = run_probe(*nodes[i], node_token, request_of(i)); });
  for (std::thread& t : threads)
    t.join();
  return out;
}

std::vector<preflight::Finding> link_findings(const std::vector<const NodeRecord*>& nodes,
                                              const std::string& node_token,
                                              const FullCheckOptions& o,
                                              std::vector<preflight::LinkFigure>* figures) {
  std::vector<preflight::Finding> findings;
  if (nodes.size() < 2) return findings;
  // A failed check runs once more before anyone is blamed: a node is cordoned for a failure it
  // repeats, not for one passing hiccup of a busy host. Each run meets under its own id.
  std::vector<Result<ProbeResult>> results;
  for (int run = 0; run < 2; ++run) {
    const std::string run_id =
        "preflight-links-" + std::to_string(wall_now_ns()) + "-" + std::to_string(run);
    results = probe_all(nodes, node_token, [&](size_t i) {
      ProbeRequest r;
      r.check = "links";
      r.timeout_ms = o.probe_timeout_ms;
      r.rank = static_cast<int>(i);
      r.world = static_cast<int>(nodes.size());
      r.store_address = o.store_address;
      r.store_token = o.store_token;
      r.run_id = run_id;
      r.random_rounds = o.random_rounds;
      r.seed = o.seed;
      r.bytes = o.bytes;
      r.iters = o.iters;
      return r;
    });
    const bool all_ok = std::all_of(results.begin(), results.end(),
                                    [](const auto& r) { return r.ok() && r->exit_code == 0; });
    if (all_ok) break;
  }
  std::vector<std::string> names;
  std::vector<preflight::LinkMeasurement> measured;
  // Every rank waits on every other, so one node that cannot take part fails them all: blame
  // only the nodes at fault. First those whose probe could not run at all; else those the
  // failed ranks' errors name ("rank 2 (host h3)"); else every rank that failed.
  std::vector<size_t> not_run, failed;
  std::map<std::string, int> named;
  for (size_t i = 0; i < nodes.size(); ++i) {
    names.push_back(nodes[i]->name);
    const Result<ProbeResult>& r = results[i];
    if (!r.ok()) {
      not_run.push_back(i);
    } else if (r->exit_code != 0) {
      failed.push_back(i);
    }
  }
  for (size_t i : failed) {
    for (size_t j = 0; j < nodes.size(); ++j) {
      if (j != i && results[i]->err.find("(host " + names[j] + ")") != std::string::npos) {
        ++named[names[j]];
      }
    }
  }
  if (!not_run.empty()) {
    for (size_t i : not_run) {
      findings.push_back({names[i], "links.probe", "the link check runs",
                          results[i].status().message(), "probe", "links"});
    }
  } else if (!named.empty()) {
    // What the first failed peer said, for the person reading the finding.
    const std::string said = names[failed.front()] + ": " + last_line(results[failed.front()]->err);
    for (const auto& [name, count] : named) {
      findings.push_back(
          {name, "links.probe", "its peers reach it",
           "named by " + std::to_string(count) + " failed peer(s), twice; " + said.substr(0, 300),
           "probe", "links"});
    }
  } else {
    for (size_t i : failed) {
      findings.push_back({names[i], "links.probe", "the link check completes",
                          last_line(results[i]->err), "probe", "links"});
    }
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Result<ProbeResult>& r = results[i];
    if (!r.ok() || r->exit_code != 0) continue;
    for (const nlohmann::json& line : json_lines(r->out)) {
      if (!line.contains("gbps")) continue;
      preflight::LinkMeasurement m;
      m.a = line.value("a", -1);
      m.b = line.value("b", -1);
      m.gbps = line.value("gbps", 0.0);
      m.latency_us = line.value("latency_us", 0.0);
      if (m.a >= 0 && m.b >= 0 && static_cast<size_t>(std::max(m.a, m.b)) < nodes.size()) {
        measured.push_back(m);
      }
    }
  }
  for (const preflight::LinkMeasurement& m : measured) {
    figures->push_back(
        {names[static_cast<size_t>(m.a)], names[static_cast<size_t>(m.b)], m.gbps, m.latency_us});
  }
  for (preflight::Finding& f : preflight::judge_links(names, measured, o.links))
    findings.push_back(std::move(f));
  return findings;
}

std::vector<preflight::Finding> ops_findings(const std::vector<const NodeRecord*>& nodes,
                                             const std::string& node_token,
                                             const FullCheckOptions& o) {
  std::vector<preflight::Finding> findings;
  if (o.isa.empty()) return findings;
  std::vector<Result<ProbeResult>> results = probe_all(nodes, node_token, [&](size_t) {
    ProbeRequest r;
    r.check = "ops";
    r.timeout_ms = o.probe_timeout_ms;
    r.isa = o.isa;
    return r;
  });
  for (size_t i = 0; i < nodes.size(); ++i) {
    const std::string& node = nodes[i]->name;
    const Result<ProbeResult>& r = results[i];
    if (!r.ok()) {
      findings.push_back(
          {node, "ops.probe", "ops-check runs", r.status().message(), "probe", "ops"});
      continue;
    }
    int wrong = 0;
    size_t rows = 0;
    for (const nlohmann::json& row : json_lines(r->out)) {
      if (!row.contains("ok")) continue;
      ++rows;
      if (row.value("ok", false) || ++wrong > 3) continue;  // the first three are enough
      const nlohmann::json err = row.value("max_rel_err", nlohmann::json());
      findings.push_back({node, "ops." + row.value("op", std::string("?")) + "." + o.isa,
                          "relative error <= " + nlohmann::json(row.value("tolerance", 0.0)).dump(),
                          (err.is_number() ? err.dump() : std::string("not finite")) + " at " +
                              row.value("shape", std::string("?")),
                          "reference", "ops"});
    }
    if (rows > 0 && wrong == 0 && r->exit_code != 0) {
      findings.push_back({node, "ops.exit", "ops-check exits 0",
                          "exit " + std::to_string(r->exit_code) + ": " + last_line(r->err),
                          "reference", "ops"});
    }
    if (rows == 0) {
      findings.push_back({node, "ops.path", "the " + o.isa + " kernels run",
                          r->exit_code == 0 ? "no result" : last_line(r->err), "lock or majority",
                          "ops"});
    }
  }
  return findings;
}

}  // namespace

void full_checks(const std::vector<NodeRecord>& nodes, const std::string& node_token,
                 const FullCheckOptions& options, preflight::PreflightReport* report) {
  // Only nodes whose facts came: the rest are unreachable already.
  std::vector<const NodeRecord*> reachable;
  for (const preflight::NodeVerdict& v : report->nodes) {
    if (v.verdict == "unreachable") continue;
    for (const NodeRecord& n : nodes)
      if (n.name == v.node) reachable.push_back(&n);
  }
  int64_t t0 = monotonic_now_ns();
  std::vector<preflight::Finding> more =
      link_findings(reachable, node_token, options, &report->links);
  report->links_s = static_cast<double>(monotonic_now_ns() - t0) / 1e9;
  t0 = monotonic_now_ns();
  for (preflight::Finding& f : ops_findings(reachable, node_token, options))
    more.push_back(std::move(f));
  report->ops_s = static_cast<double>(monotonic_now_ns() - t0) / 1e9;
  preflight::add_findings(report, std::move(more));
}

void trial_check(const std::vector<NodeRecord>& nodes, const std::string& node_token,
                 const TrialCheckOptions& options, preflight::PreflightReport* report) {
  const int64_t t0 = monotonic_now_ns();
  std::vector<const NodeRecord*> chosen;
  for (const preflight::NodeVerdict& v : report->nodes) {
    if (v.verdict != "pass" || static_cast<int>(chosen.size()) >= options.nodes) continue;
    for (const NodeRecord& n : nodes)
      if (n.name == v.node) chosen.push_back(&n);
  }
  if (chosen.empty()) {
    report->job_findings.push_back({"", "trial.run", "a node that passed the other checks",
                                    "none: the trial did not run", "trial nodes", "trial"});
    return;
  }
  std::vector<Result<ProbeResult>> results = probe_all(chosen, node_token, [&](size_t) {
    ProbeRequest r;
    r.check = "trial";
    r.timeout_ms = options.timeout_ms;
    r.config = options.spec.config;
    r.overrides = options.spec.overrides;
    r.steps = options.spec.steps;
    r.workdir = options.workdir;
    r.user = options.user;
    return r;
  });
  std::vector<preflight::TrialResult> trial;
  for (size_t i = 0; i < chosen.size(); ++i) {
    const Result<ProbeResult>& r = results[i];
    if (r.ok()) {
      trial.push_back(preflight::parse_trial_output(chosen[i]->name, r->exit_code, r->out, r->err));
    } else {
      preflight::TrialResult failed;
      failed.node = chosen[i]->name;
      failed.error = r.status().message();
      trial.push_back(std::move(failed));
    }
  }
  preflight::TrialJudgement j = preflight::judge_trials(trial, options.spec, options.expected);
  report->trial = std::move(trial);
  report->trial_signature = j.signature;
  report->trial_reference = j.reference;
  for (preflight::Finding& f : j.job)
    report->job_findings.push_back(std::move(f));
  preflight::add_findings(report, std::move(j.nodes));
  report->trial_s = static_cast<double>(monotonic_now_ns() - t0) / 1e9;
}

}  // namespace kiln::sched
