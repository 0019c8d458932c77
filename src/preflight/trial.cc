// The trial run's command and judgement (kiln/preflight/trial.h).
#include <kiln/preflight/trial.h>

#include <kiln/preflight/probe_output.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

namespace kiln::preflight {
namespace {

// Flags of `kiln train` that change what is computed: the trial keeps them.
const std::set<std::string>& shaping_flags() {
  static const std::set<std::string> kFlags = {"--batch", "--seq",        "--threads",
                                               "--seed",  "--grad-accum", "--zero"};
  return kFlags;
}

// Flags that steer a run (length, output, checkpoints, metrics, deadlines) without changing the
// steps it computes: the trial drops them (and sets its own length and output).
const std::set<std::string>& steering_flags() {
  static const std::set<std::string> kFlags = {
      "--max-steps",  "--val-every",       "--metrics-port",   "--metrics-bind", "--export",
      "--debug-dump", "--peak-gflops",     "--cpu-bind",       "--ckpt-dir",     "--ckpt-every",
      "--ckpt-keep",  "--comm-timeout-ms", "--stop-after-step"};
  return kFlags;
}

bool is_kiln(const std::string& program) {
  return program == "kiln" ||
         (program.size() > 5 && program.compare(program.size() - 5, 5, "/kiln") == 0);
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

bool close_to(double a, double b, double rtol) {
  return std::isfinite(a) && std::isfinite(b) &&
         std::fabs(a - b) <= rtol * std::max(std::fabs(a), std::fabs(b));
}

Finding finding(const std::string& node, const std::string& path, std::string expected,
                std::string found, const std::string& against) {
  return Finding{node, path, std::move(expected), std::move(found), against, "trial"};
}

// Findings of one kind on every trial node are the job's or the lock's (the cluster did not
// change under all of them at once): one job finding that lists the values. So is a finding of
// the one node a trial could compare: nothing tells the node from the lock or the job then.
// Otherwise each names its node.
void add_node_or_job_findings(std::vector<Finding> found,
                              const std::vector<const TrialResult*>& same,
                              const std::function<std::string(const TrialResult&)>& value,
                              TrialJudgement* j) {
  if (found.empty()) return;
  if (found.size() < same.size()) {
    j->nodes.insert(j->nodes.end(), found.begin(), found.end());
    return;
  }
  Finding f = found.front();
  f.node = "";
  f.found = "every trial node:";
  for (const TrialResult* r : same)
    f.found += " " + r->node + " " + value(*r) + (r == same.back() ? "" : ",");
  j->job.push_back(std::move(f));
}

}  // namespace

Result<TrialSpec> trial_from_command(const std::vector<std::string>& argv, int steps) {
  if (steps < 1 || steps > kTrialStepsMax) {
    return Status::invalid_argument("trial: " + std::to_string(steps) + " steps is outside 1.." +
                                    std::to_string(kTrialStepsMax));
  }
  if (argv.size() < 3 || !is_kiln(argv[0]) || argv[1] != "train") {
    std::string shown;
    for (size_t i = 0; i < argv.size() && i < 3; ++i)
      shown += (i == 0 ? "" : " ") + argv[i];
    return Status::invalid_argument(
        "trial: the job's command '" + shown +
        "' is not `kiln train CONFIG ...`: a trial runs only Kiln's trainer on the job's config");
  }
  TrialSpec spec;
  spec.steps = steps;
  for (size_t i = 2; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      if (!spec.config.empty()) {
        return Status::invalid_argument("trial: the job's command has a second config '" + arg +
                                        "' after '" + spec.config + "'");
      }
      spec.config = arg;
      continue;
    }
    if (arg == "--json") continue;
    const size_t eq = arg.find('=');
    const std::string flag = arg.substr(0, eq);
    const bool shaping = shaping_flags().count(flag) > 0;
    if (!shaping && steering_flags().count(flag) == 0) {
      return Status::invalid_argument("trial: the job's command has '" + flag +
                                      "', which the trial does not know: it would not run the "
                                      "same computation as the job");
    }
    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (i + 1 < argv.size()) {
      value = argv[++i];
    } else {
      return Status::invalid_argument("trial: the job's command ends at '" + flag +
                                      "' without its value");
    }
    if (shaping) {
      spec.overrides.push_back(flag);
      spec.overrides.push_back(value);
    }
  }
  if (spec.config.empty()) {
    return Status::invalid_argument("trial: the job's command names no training config");
  }
  return spec;
}

std::vector<std::string> trial_args(const TrialSpec& spec) {
  std::vector<std::string> args = {
      "train",       spec.config, "--max-steps", std::to_string(spec.steps),
      "--val-every", "0",         "--json"};
  args.insert(args.end(), spec.overrides.begin(), spec.overrides.end());
  return args;
}

std::string trial_signature(const TrialSpec& spec, const std::string& config_sha256) {
  std::string shape;
  for (const std::string& s : spec.overrides)
    shape += (shape.empty() ? "" : " ") + s;
  return "steps " + std::to_string(spec.steps) + "; " + (shape.empty() ? "config as is" : shape) +
         "; config sha256 " + config_sha256;
}

TrialResult parse_trial_output(const std::string& node, int exit_code, const std::string& out,
                               const std::string& err) {
  TrialResult r;
  r.node = node;
  nlohmann::json done;
  for (nlohmann::json& line : json_lines(out))
    if (line.value("event", "") == "done") done = std::move(line);
  if (exit_code != 0 || !done.is_object()) {
    // What a person needs: the last line the run wrote on its error output.
    r.error = exit_code == 0 ? "no final line in the trainer's output"
                             : "exit " + std::to_string(exit_code) + ": " + last_line(err);
    return r;
  }
  r.ran = true;
  r.steps = done.value("steps", 0);
  const nlohmann::json loss = done.value("train_loss", nlohmann::json());
  r.loss = loss.is_number() ? loss.get<double>() : std::nan("");
  r.tokens_per_s = done.value("tokens_per_s", 0.0);
  r.config_sha256 = done.value("config_sha256", "");
  return r;
}

TrialJudgement judge_trials(const std::vector<TrialResult>& results, const TrialSpec& spec,
                            const TrialExpectation* expected) {
  TrialJudgement j;
  std::vector<const TrialResult*> ran;
  for (const TrialResult& r : results)
    if (r.ran) ran.push_back(&r);
  if (ran.empty()) {
    // Nowhere did it run: the job's config or command, or the cluster as a whole.
    for (const TrialResult& r : results) {
      j.job.push_back(finding("", "trial.run", "the trial runs on some node",
                              "every trial node failed; " + r.node + ": " + r.error,
                              "trial nodes"));
      break;
    }
    j.reference = "none: no trial ran";
    return j;
  }
  for (const TrialResult& r : results) {
    if (!r.ran) {
      j.nodes.push_back(finding(r.node, "trial.run",
                                "the trial runs (it did on " + ran[0]->node + ")", r.error,
                                "trial nodes"));
    }
  }
  // The config text most nodes read: a node that read another has another copy of the job's
  // directory than the others.
  std::map<std::string, int> sha_votes;
  for (const TrialResult* r : ran)
    ++sha_votes[r->config_sha256];
  std::string sha;
  int most = 0;
  for (const auto& [s, n] : sha_votes) {
    if (n > most) sha = s, most = n;
  }
  if (2 * most <= static_cast<int>(ran.size()) && sha_votes.size() > 1) {
    std::string seen;
    for (const TrialResult* r : ran)
      seen += (seen.empty() ? "" : ", ") + r->node + " " + r->config_sha256.substr(0, 12);
    j.job.push_back(finding("", "trial.config", "one config text on every trial node",
                            "no majority: " + seen, "trial nodes"));
    j.reference = "none: the nodes read different configs";
    return j;
  }
  std::vector<const TrialResult*> same;
  for (const TrialResult* r : ran) {
    if (r->config_sha256 == sha) {
      same.push_back(r);
    } else {
      j.nodes.push_back(finding(r->node, "trial.config", "config sha256 " + sha,
                                "config sha256 " + r->config_sha256, "trial majority"));
    }
  }
  j.signature = trial_signature(spec, sha);
  const bool lock_applies = expected != nullptr && expected->signature == j.signature;
  j.reference = lock_applies          ? "lock"
                : expected == nullptr ? "trial nodes: the lock records no trial"
                                      : "trial nodes: the lock's trial is another computation (" +
                                            expected->signature + ")";
  // The tolerances are the operator's for this cluster, not the computation's: a lock whose
  // trial is another computation still widens them (a host shared with other work is slower
  // for every job).
  const double rtol = expected != nullptr ? expected->loss_rtol : TrialExpectation{}.loss_rtol;
  const double fraction = expected != nullptr ? expected->tokens_per_s_fraction
                                              : TrialExpectation{}.tokens_per_s_fraction;

  // The loss: against the lock's, else against the loss a strict majority agrees on.
  std::vector<Finding> off;
  std::vector<const TrialResult*> finite;
  for (const TrialResult* r : same) {
    if (std::isfinite(r->loss)) {
      finite.push_back(r);
    } else {
      off.push_back(finding(r->node, "trial.loss", "a finite loss", "not finite", "trial nodes"));
    }
  }
  const std::string within = " within " + number(rtol * 100) + "%";
  if (lock_applies) {
    for (const TrialResult* r : finite) {
      if (!close_to(r->loss, expected->loss, rtol)) {
        off.push_back(finding(r->node, "trial.loss", number(expected->loss) + within,
                              number(r->loss), "lock"));
      }
    }
  } else if (!finite.empty()) {
    const TrialResult* center = finite.front();
    size_t agree_most = 0;
    for (const TrialResult* a : finite) {
      size_t agree = 0;
      for (const TrialResult* b : finite)
        agree += close_to(a->loss, b->loss, rtol) ? 1 : 0;
      if (agree > agree_most) center = a, agree_most = agree;
    }
    if (2 * agree_most <= finite.size()) {
      std::string seen;
      for (const TrialResult* r : finite)
        seen += (seen.empty() ? "" : ", ") + r->node + " " + number(r->loss);
      j.job.push_back(
          finding("", "trial.loss", "one loss" + within, "no majority: " + seen, "trial nodes"));
    } else {
      for (const TrialResult* r : finite) {
        if (!close_to(r->loss, center->loss, rtol)) {
          off.push_back(finding(r->node, "trial.loss", number(center->loss) + within,
                                number(r->loss), "trial majority"));
        }
      }
    }
  }
  add_node_or_job_findings(
      std::move(off), same,
      [](const TrialResult& r) {
        return std::isfinite(r.loss) ? number(r.loss) : std::string("not finite");
      },
      &j);

  // Throughput: against the lock's, and against the fastest trial node.
  double fastest = 0;
  std::string fastest_node;
  for (const TrialResult* r : same) {
    if (r->tokens_per_s > fastest) fastest = r->tokens_per_s, fastest_node = r->node;
  }
  std::vector<Finding> slow;
  for (const TrialResult* r : same) {
    if (lock_applies && r->tokens_per_s < fraction * expected->tokens_per_s) {
      slow.push_back(finding(r->node, "trial.tokens_per_s",
                             ">= " + number(fraction) + " x " + number(expected->tokens_per_s),
                             number(r->tokens_per_s), "lock"));
    } else if (r->tokens_per_s < fraction * fastest) {
      slow.push_back(
          finding(r->node, "trial.tokens_per_s",
                  ">= " + number(fraction) + " x " + number(fastest) + " (" + fastest_node + ")",
                  number(r->tokens_per_s), "trial nodes"));
    }
  }
  add_node_or_job_findings(
      std::move(slow), same, [](const TrialResult& r) { return number(r.tokens_per_s); }, &j);
  return j;
}

}  // namespace kiln::preflight
