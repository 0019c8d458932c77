// `kiln lock` and `kiln preflight`: the version lock, and the stack check across nodes'
// facts (include/kiln/preflight/stack.h).
//
//   kiln lock [--facts FILE] [--node NAME] [--trial JOB.yaml [--trial-steps N]] [-o kiln.lock]
//             [--force]
//   kiln preflight [--nodes n1,n2,... | --job JOB.yaml] [--level quick|full] [--json]
//                                                          through the coordinator and its agents
//   kiln preflight --facts [NAME=]FILE... [--lock kiln.lock] [--json]   offline, saved facts
#include <kiln/base/clock.h>
#include <kiln/base/file_system.h>
#include <kiln/preflight/facts.h>
#include <kiln/preflight/report.h>
#include <kiln/preflight/stack.h>
#include <kiln/preflight/trial.h>
#include <kiln/sched/job_spec.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <optional>

#include <kiln/sched/command.h>
#include "cli/client.h"
#include "cli/command.h"
#include "cli/health_flags.h"

namespace kiln::cli {
namespace {

// A trial's steps take seconds each for the models Kiln trains on CPUs; ten minutes is a
// trial that hangs.
constexpr int64_t kTrialTimeoutMs = 600'000;

struct LockFlags {
  std::string facts_path;  // empty: this node's facts
  std::string node;
  std::string trial_job;  // a job file: run its trial here and record what it gave
  int trial_steps = preflight::kTrialStepsDefault;
  std::string output = "kiln.lock";
  bool force = false;
};

std::string node_name_of(const nlohmann::json& facts, const std::string& fallback) {
  const auto host = facts.find("host");
  if (host != facts.end() && host->is_object()) {
    const auto name = host->find("hostname");
    if (name != host->end() && name->is_string() && !name->get<std::string>().empty()) {
      return name->get<std::string>();
    }
  }
  return fallback;
}

// The job's trial (kiln/preflight/trial.h) on this node, in this directory (the job's paths are
// relative to where it is submitted from), by this kiln binary: what the lock expects of a
// node's trial.
Result<preflight::TrialExpectation> run_trial_here(const std::string& job_path, int steps) {
  KILN_ASSIGN_OR_RETURN(sched::JobSpec job, sched::load_job_spec(job_path));
  KILN_ASSIGN_OR_RETURN(preflight::TrialSpec spec,
                        preflight::trial_from_command(job.command, steps));
  sched::slurm::CommandSpec command;
  command.argv = preflight::trial_args(spec);
  command.argv.insert(command.argv.begin(), self_executable());
  command.timeout_ms = kTrialTimeoutMs;
  KILN_ASSIGN_OR_RETURN(sched::slurm::CommandOutput out, sched::slurm::run_command(command));
  preflight::TrialResult r =
      preflight::parse_trial_output("this node", out.exit_code, out.out, out.err);
  if (!r.ran) return Status::aborted("the trial run failed: " + r.error);
  if (!std::isfinite(r.loss)) {
    return Status::aborted("the trial run's loss is not finite: nothing to expect of others");
  }
  preflight::TrialExpectation e;
  e.job = job_path;
  e.signature = preflight::trial_signature(spec, r.config_sha256);
  e.loss = r.loss;
  e.tokens_per_s = r.tokens_per_s;
  return e;
}

int run_lock(const LockFlags& flags) {
  nlohmann::json facts;
  if (flags.facts_path.empty()) {
    facts = preflight::collect_node_facts();
  } else {
    Result<nlohmann::json> read = preflight::load_facts(flags.facts_path);
    if (!read.ok()) return report_error("lock", read.status().with_context("--facts"));
    facts = std::move(*read);
  }
  const std::string node = flags.node.empty() ? node_name_of(facts, "this node") : flags.node;
  if (!flags.force && access(flags.output.c_str(), F_OK) == 0) {
    return report_error(
        "lock", Status::invalid_argument("-o " + flags.output +
                                         " exists: a lock is replaced on purpose (--force), never "
                                         "by accident"));
  }
  Status s = check_output_path("-o", flags.output);
  if (!s.ok()) return report_error("lock", s);
  preflight::Lock lock;
  lock.stack = preflight::stack_of(facts);
  if (!flags.trial_job.empty()) {
    Result<preflight::TrialExpectation> trial = run_trial_here(flags.trial_job, flags.trial_steps);
    if (!trial.ok()) return report_error("lock", trial.status().with_context("--trial"));
    lock.trial = std::move(*trial);
  }
  const std::string text = preflight::render_lock(lock, node, format_wall_time_utc(wall_now_ns()));
  const ByteSpan span{text.data(), text.size()};
  Result<DurableWriteResult> w = write_file_durably(posix_file_system(), flags.output, {&span, 1});
  if (!w.ok()) return report_error("lock", w.status());
  std::cout << "wrote " << flags.output << ": " << lock.stack.size() << " stack entries from "
            << node;
  if (lock.trial) {
    char line[200];
    std::snprintf(line, sizeof line, "; trial of %d steps: loss %.6g, %.4g tokens/s",
                  flags.trial_steps, lock.trial->loss, lock.trial->tokens_per_s);
    std::cout << line;
  }
  std::cout << "\n";
  return kExitOk;
}

struct PreflightFlags {
  std::vector<std::string> facts;  // [NAME=]FILE: offline, from saved facts
  std::string nodes;               // through the coordinator: these nodes (default: all not down)
  std::string job;                 // through the coordinator: the nodes this job could run on
  std::string lock_path;
  std::string level;  // empty: quick, or with --job the job's own level
  int trial_steps = preflight::kTrialStepsDefault;
  int trial_nodes = preflight::kTrialNodesDefault;
  std::string team;  // with --job: whose Unix user the trial runs as (default: the caller's team)
  preflight::HealthThresholds health;  // with --facts; through the coordinator, kiln serve's
  HealthFlags health_flags;
  ClientFlags client;
};

// {"findings": [...], "nodes": [...]} as GET /v1/preflight answers it, from saved facts files.
Result<nlohmann::json> preflight_offline(const PreflightFlags& flags) {
  std::vector<preflight::NodeFacts> nodes;
  for (const std::string& arg : flags.facts) {
    const size_t eq = arg.find('=');
    const std::string path = eq == std::string::npos ? arg : arg.substr(eq + 1);
    Result<nlohmann::json> read = preflight::load_facts(path);
    if (!read.ok()) return read.status().with_context("--facts");
    preflight::NodeFacts n;
    n.node = eq == std::string::npos ? node_name_of(*read, path) : arg.substr(0, eq);
    if (std::any_of(nodes.begin(), nodes.end(),
                    [&](const preflight::NodeFacts& x) { return x.node == n.node; })) {
      return Status::invalid_argument("--facts " + arg + ": node '" + n.node +
                                      "' twice (name them: NAME=FILE)");
    }
    n.facts = std::move(*read);
    nodes.push_back(std::move(n));
  }
  std::optional<preflight::Lock> lock;
  if (!flags.lock_path.empty()) {
    Result<preflight::Lock> read = preflight::load_lock(flags.lock_path);
    if (!read.ok()) return read.status().with_context("--lock");
    lock = std::move(*read);
  }
  nlohmann::json out = preflight::report_json(
      preflight::check_nodes(nodes, lock ? &lock->stack : nullptr, flags.health));
  out["lock"] = lock.has_value();
  return out;
}

std::string text(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

// Prints the result (a table, or JSON lines: the findings, then a verdict per node) and returns
// the exit code: 0 when every node passed.
int print_preflight(const nlohmann::json& result, bool json) {
  const nlohmann::json& findings = result["findings"];
  const nlohmann::json& nodes = result["nodes"];
  const nlohmann::json job_findings = result.value("job_findings", nlohmann::json::array());
  bool all_pass = job_findings.empty();
  for (const nlohmann::json& n : nodes)
    all_pass = all_pass && text(n, "verdict") == "pass";
  const nlohmann::json links = result.value("links", nlohmann::json::array());
  const nlohmann::json trial = result.value("trial", nlohmann::json::object());
  if (json) {
    for (const nlohmann::json& f : findings)
      std::cout << f.dump() << "\n";
    for (const nlohmann::json& f : job_findings)
      std::cout << f.dump() << "\n";
    for (const nlohmann::json& t : trial.value("nodes", nlohmann::json::array())) {
      nlohmann::json line = t;
      line["trial"] = true;
      std::cout << line.dump() << "\n";
    }
    for (const nlohmann::json& n : nodes)
      std::cout << n.dump() << "\n";
    for (const nlohmann::json& l : links)
      std::cout << l.dump() << "\n";
    // Last, where the time went (through the coordinator): {"seconds": {facts, links, ops,
    // trial}}, and what the trial was held against.
    if (result.contains("seconds")) {
      nlohmann::json last = {{"level", result.value("level", "quick")},
                             {"seconds", result["seconds"]}};
      if (!trial.empty()) {
        last["trial_signature"] = trial.value("signature", "");
        last["trial_reference"] = trial.value("reference", "");
      }
      for (const char* key : {"trial_user", "busy"})
        if (result.contains(key)) last[key] = result[key];
      std::cout << last.dump() << "\n";
    }
    return all_pass ? kExitOk : kExitFailure;
  }
  size_t width = 4;
  for (const nlohmann::json& n : nodes)
    width = std::max(width, text(n, "node").size());
  const int w = static_cast<int>(width);
  std::cout << std::left << std::setw(w) << "NODE"
            << "  VERDICT      CHECK   WHAT\n";
  for (const nlohmann::json& n : nodes) {
    const std::string node = text(n, "node");
    const std::string verdict = text(n, "verdict");
    if (verdict == "pass") {
      std::cout << std::setw(w) << node << "  pass         all     " << text(n, "checked")
                << " stack entries as expected, health within thresholds\n";
    } else if (verdict == "unreachable") {
      std::cout << std::setw(w) << node << "  UNREACHABLE  -       " << text(n, "error") << "\n";
    }
    for (const nlohmann::json& f : findings) {
      if (text(f, "node") != node) continue;
      std::cout << std::setw(w) << node << "  FAIL         " << std::setw(6) << text(f, "check")
                << "  " << text(f, "path") << ": expected " << text(f, "expected") << " ("
                << text(f, "against") << "), found " << text(f, "found") << "\n";
    }
  }
  for (const nlohmann::json& f : job_findings) {
    std::cout << std::setw(w) << "(job)"
              << "  FAIL         " << std::setw(6) << text(f, "check") << "  " << text(f, "path")
              << ": expected " << text(f, "expected") << " (" << text(f, "against") << "), found "
              << text(f, "found") << "\n";
  }
  if (!trial.empty()) {
    std::string figures;
    for (const nlohmann::json& t : trial.value("nodes", nlohmann::json::array())) {
      char one[160];
      if (t.value("ran", false)) {
        const nlohmann::json loss = t.value("loss", nlohmann::json());
        std::snprintf(one, sizeof one, "%s loss %s, %.4g tokens/s", text(t, "node").c_str(),
                      loss.is_number() ? std::to_string(loss.get<double>()).c_str() : "not finite",
                      t.value("tokens_per_s", 0.0));
      } else {
        std::snprintf(one, sizeof one, "%s did not run", text(t, "node").c_str());
      }
      figures += (figures.empty() ? "" : "; ") + std::string(one);
    }
    std::cout << "trial: " << figures << " (held against: " << text(trial, "reference") << ")\n";
  }
  if (!links.empty()) {
    std::vector<double> gbps;
    for (const nlohmann::json& l : links)
      gbps.push_back(l.value("gbps", 0.0));
    std::sort(gbps.begin(), gbps.end());
    char line[160];
    std::snprintf(
        line, sizeof(line),
        "links: %zu pairs measured, %.3g to %.3g Gbit/s, median %.3g (--json lists them)\n",
        gbps.size(), gbps.front(), gbps.back(),
        // The median as the link judgement takes it: the mean of the two middles.
        (gbps[(gbps.size() - 1) / 2] + gbps[gbps.size() / 2]) / 2);
    std::cout << line;
  }
  return all_pass ? kExitOk : kExitFailure;
}

// --job: the nodes the job could run on, at its level (or --level), and at full its trial.
int run_job_preflight(const PreflightFlags& flags) {
  if (!flags.nodes.empty()) {
    return report_error("preflight",
                        Status::invalid_argument("--job and --nodes exclude each other: the job's "
                                                 "nodes are those it could be placed on"));
  }
  Result<JobFile> job = read_job_file(flags.job);
  if (!job.ok()) return report_error("preflight", job.status().with_context("--job"));
  nlohmann::json request = {{"job", job->text},
                            {"source", flags.job},
                            {"workdir", job->workdir},
                            {"trial_steps", flags.trial_steps},
                            {"trial_nodes", flags.trial_nodes}};
  if (!flags.level.empty()) request["level"] = flags.level;
  if (!flags.team.empty()) request["team"] = flags.team;
  // A full check's probes take up to 70 s each and the trial up to 300 s.
  Client c = connect(flags.client, "preflight", 600'000);
  if (!c.http) return c.error;
  int code = 0;
  Result<nlohmann::json> body =
      call(c.http->post("/v1/preflight", request.dump()), 200, "preflight", &code);
  if (!body.ok()) return code;
  return print_preflight(*body, flags.client.json);
}

int run_preflight(const PreflightFlags& flags) {
  if (!flags.facts.empty()) {
    if (!flags.nodes.empty()) {
      return report_error("preflight",
                          Status::invalid_argument("--facts and --nodes exclude each other: "
                                                   "saved facts, or the agents' own"));
    }
    if (!flags.level.empty() && flags.level != "quick") {
      return report_error(
          "preflight", Status::invalid_argument("--facts checks stacks and health (quick); --level "
                                                "full needs the agents, through the coordinator"));
    }
    if (!flags.job.empty()) {
      return report_error(
          "preflight", Status::invalid_argument("--job goes through the coordinator, not --facts"));
    }
    Result<nlohmann::json> result = preflight_offline(flags);
    if (!result.ok()) return report_error("preflight", result.status());
    return print_preflight(*result, flags.client.json);
  }
  if (!flags.lock_path.empty()) {
    return report_error("preflight", Status::invalid_argument(
                                         "--lock goes with --facts; through the coordinator the "
                                         "lock is the one `kiln serve --lock` was given"));
  }
  if (flags.health_flags.any_given()) {
    return report_error(
        "preflight", Status::invalid_argument("--health-* go with --facts; through the coordinator "
                                              "the thresholds are `kiln serve --health-*`"));
  }
  if (!flags.job.empty()) return run_job_preflight(flags);
  const std::string level = flags.level.empty() ? "quick" : flags.level;
  // The coordinator asks the agents 16 at a time, each within 5 s (80 s for 256 nodes); at full
  // the link check and the operator check take up to 70 s more each.
  Client c = connect(flags.client, "preflight", level == "full" ? 300'000 : 120'000);
  if (!c.http) return c.error;
  int code = 0;
  std::string path = "/v1/preflight?level=" + level;
  if (!flags.nodes.empty()) path += "&nodes=" + flags.nodes;
  Result<nlohmann::json> body = call(c.http->get(path), 200, "preflight", &code);
  if (!body.ok()) return code;
  return print_preflight(*body, flags.client.json);
}

}  // namespace

Command add_lock_command(CLI::App& parent) {
  auto flags = std::make_shared<LockFlags>();
  CLI::App* app = parent.add_subcommand(
      "lock",
      "Write the version lock (kiln.lock): the software stack of this node, or of a facts "
      "file, that every node of a job must run");
  app->add_option("--facts", flags->facts_path, "a `kiln facts --json` file (default: this node)");
  app->add_option("--node", flags->node, "the node's name in the lock (default: its host name)");
  app->add_option("--trial", flags->trial_job,
                  "also run this job's trial here (a few steps of its model, in this directory) "
                  "and record its loss and throughput: what a node's trial must match");
  app->add_option("--trial-steps", flags->trial_steps, "the trial's steps")
      ->capture_default_str()
      ->check(CLI::Range(1, preflight::kTrialStepsMax));
  app->add_option("-o,--output", flags->output, "where to write it")->capture_default_str();
  app->add_flag("--force", flags->force, "replace an existing lock");
  return {app, [flags](const GlobalOptions&) { return run_lock(*flags); }};
}

Command add_preflight_command(CLI::App& parent) {
  auto flags = std::make_shared<PreflightFlags>();
  CLI::App* app = parent.add_subcommand(
      "preflight",
      "Check nodes before a run: their software stacks against each other and the "
      "version lock, their health against thresholds (exit 1 when a node fails)");
  app->add_option("--nodes", flags->nodes,
                  "through the coordinator: these nodes (n1,n2,...; default every node not down), "
                  "facts read from their agents");
  app->add_option("--facts", flags->facts,
                  "offline instead: each node's saved `kiln facts --json`, as FILE or NAME=FILE");
  app->add_option("--lock", flags->lock_path, "with --facts: the version lock (kiln lock)");
  app->add_option("--job", flags->job,
                  "through the coordinator: the nodes this job could run on, at its `preflight:` "
                  "level (quick when none), and at full a trial run of its model");
  app->add_option("--level", flags->level,
                  "through the coordinator: quick (stack and health) or full (also the link "
                  "matrix and the operator check); the result is recorded on each node "
                  "(default quick, or the job's level)")
      ->check(CLI::IsMember({"quick", "full"}));
  app->add_option("--trial-steps", flags->trial_steps, "with --job at full: the trial's steps")
      ->capture_default_str()
      ->check(CLI::Range(1, preflight::kTrialStepsMax));
  app->add_option("--team", flags->team,
                  "with --job: the team that submits it; the trial runs as its Unix user "
                  "(default: your token's team)");
  app->add_option("--trial-nodes", flags->trial_nodes,
                  "with --job at full: how many of the passing nodes run the trial")
      ->capture_default_str()
      ->check(CLI::Range(1, preflight::kTrialNodesMax));
  flags->health_flags = add_health_flags(app, &flags->health);
  add_client_flags(app, &flags->client);
  return {app, [flags](const GlobalOptions&) { return run_preflight(*flags); }};
}

}  // namespace kiln::cli
