// One preflight over a set of nodes (kiln/preflight/report.h).
#include <kiln/preflight/report.h>

#include <cmath>
#include <map>
#include <set>
#include <utility>

namespace kiln::preflight {

PreflightReport check_nodes(const std::vector<NodeFacts>& nodes, const Stack* lock,
                            const HealthThresholds& thresholds,
                            const std::map<std::string, Stack>* peers) {
  std::map<std::string, Stack> stacks;
  std::set<std::string> checked;
  for (const NodeFacts& n : nodes) {
    if (n.facts) stacks[n.node] = stack_of(*n.facts);
    checked.insert(n.node);
  }
  if (peers != nullptr) {
    for (const auto& [name, stack] : *peers)
      if (checked.count(name) == 0) stacks.emplace(name, stack);
  }
  PreflightReport out;
  for (Finding& f : check_stacks(stacks, lock))
    if (checked.count(f.node) != 0) out.findings.push_back(std::move(f));
  std::map<std::string, GpuCount> gpu_devices;
  for (const NodeFacts& n : nodes) {
    if (!n.facts) continue;
    for (Finding& f : check_health(n.node, *n.facts, thresholds, n.clock_offset_ms))
      out.findings.push_back(std::move(f));
    const nlohmann::json gpu = n.facts->value("gpu", nlohmann::json());
    const nlohmann::json devices =
        gpu.is_object() ? gpu.value("devices", nlohmann::json()) : nullptr;
    if (devices.is_array() && !devices.empty()) {
      const nlohmann::json& first = devices[0];
      const nlohmann::json name =
          first.is_object() ? first.value("name", nlohmann::json()) : nullptr;
      gpu_devices[n.node] = {name.is_string() ? name.get<std::string>() : "?",
                             static_cast<int64_t>(devices.size())};
    }
  }
  for (Finding& f : check_gpu_counts(gpu_devices))
    out.findings.push_back(std::move(f));
  std::map<std::string, int> failures;
  for (const Finding& f : out.findings)
    ++failures[f.node];
  for (const NodeFacts& n : nodes) {
    NodeVerdict v;
    v.node = n.node;
    v.agent = n.agent;
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

void add_findings(PreflightReport* report, std::vector<Finding> more) {
  std::map<std::string, int> added;
  for (Finding& f : more) {
    ++added[f.node];
    report->findings.push_back(std::move(f));
  }
  for (NodeVerdict& v : report->nodes) {
    auto it = added.find(v.node);
    if (it == added.end() || v.verdict == "unreachable") continue;
    v.failures += it->second;
    v.verdict = "fail";
  }
}

std::string summarize(const PreflightReport& report, const std::string& node, size_t bytes_max) {
  std::string out;
  for (const Finding& f : report.findings) {
    if (f.node != node) continue;
    std::string one = f.check + " " + f.path + ": expected " + f.expected + ", found " + f.found;
    if (f.against != "threshold") one += " (" + f.against + ")";
    if (!out.empty() && out.size() + 2 + one.size() > bytes_max) return out + "; ...";
    if (out.empty() && one.size() > bytes_max) return one.substr(0, bytes_max) + "...";
    out += (out.empty() ? "" : "; ") + one;
  }
  for (const NodeVerdict& v : report.nodes)
    if (v.node == node && !v.error.empty() && out.empty()) return v.error.substr(0, bytes_max);
  return out;
}

nlohmann::json report_json(const PreflightReport& report) {
  auto findings_json = [](const std::vector<Finding>& list) {
    nlohmann::json out = nlohmann::json::array();
    for (const Finding& f : list) {
      out.push_back({{"node", f.node},
                     {"check", f.check},
                     {"path", f.path},
                     {"expected", f.expected},
                     {"found", f.found},
                     {"against", f.against}});
    }
    return out;
  };
  nlohmann::json findings = findings_json(report.findings);
  nlohmann::json nodes = nlohmann::json::array();
  for (const NodeVerdict& n : report.nodes) {
    nlohmann::json j = {
        {"node", n.node}, {"verdict", n.verdict}, {"failures", n.failures}, {"checked", n.checked}};
    if (!n.error.empty()) j["error"] = n.error;
    nodes.push_back(std::move(j));
  }
  nlohmann::json links = nlohmann::json::array();
  for (const LinkFigure& l : report.links) {
    links.push_back({{"a", l.a}, {"b", l.b}, {"gbps", l.gbps}, {"latency_us", l.latency_us}});
  }
  nlohmann::json out = {{"findings", std::move(findings)},
                        {"nodes", std::move(nodes)},
                        {"links", std::move(links)},
                        {"job_findings", findings_json(report.job_findings)},
                        {"seconds",
                         {{"facts", report.facts_s},
                          {"links", report.links_s},
                          {"ops", report.ops_s},
                          {"trial", report.trial_s}}}};
  if (!report.trial.empty()) {
    nlohmann::json trial_nodes = nlohmann::json::array();
    for (const TrialResult& r : report.trial) {
      nlohmann::json t = {{"node", r.node}, {"ran", r.ran}, {"steps", r.steps}};
      // A diverged loss is not finite: null, which JSON can carry.
      t["loss"] = std::isfinite(r.loss) ? nlohmann::json(r.loss) : nlohmann::json(nullptr);
      t["tokens_per_s"] = r.tokens_per_s;
      if (!r.error.empty()) t["error"] = r.error;
      trial_nodes.push_back(std::move(t));
    }
    out["trial"] = {{"signature", report.trial_signature},
                    {"reference", report.trial_reference},
                    {"nodes", std::move(trial_nodes)}};
  }
  return out;
}

}  // namespace kiln::preflight
