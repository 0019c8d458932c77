// Probe requests and results (probe.h).
#include "sched/agent/probe.h"

#include <algorithm>

#include <kiln/launch/rank_env.h>
#include <kiln/preflight/trial.h>

namespace kiln::sched {
namespace {

template <typename T>
Result<T> field(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end())
    return Status::invalid_argument(std::string("probe: field '") + key + "' is missing");
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    return Status::invalid_argument(std::string("probe: field '") + key + "' has the wrong type");
  }
}

std::string tail(const std::string& s, size_t max) {
  return s.size() <= max ? s : s.substr(s.size() - max);
}

}  // namespace

nlohmann::json to_json(const ProbeRequest& r) {
  return {{"check", r.check},
          {"timeout_ms", r.timeout_ms},
          {"rank", r.rank},
          {"world", r.world},
          {"store_address", r.store_address},
          {"store_token", r.store_token},
          {"run_id", r.run_id},
          {"random_rounds", r.random_rounds},
          {"seed", r.seed},
          {"bytes", r.bytes},
          {"iters", r.iters},
          {"isa", r.isa},
          {"config", r.config},
          {"overrides", r.overrides},
          {"steps", r.steps},
          {"workdir", r.workdir},
          {"user", r.user}};
}

namespace {

// A trial's fields: a config and flags that `kiln train` reads as the trial means them (nothing
// that parses as another flag), a directory, a plain user name.
Status check_trial(const ProbeRequest& r) {
  auto plain = [](const std::string& s) {
    return !s.empty() && s.size() <= 4096 && s[0] != '-' &&
           std::none_of(s.begin(), s.end(), [](char c) { return c == '\0' || c == '\n'; });
  };
  if (!plain(r.config)) {
    return Status::invalid_argument("probe: config '" + r.config.substr(0, 64) +
                                    "' is not a config path");
  }
  if (r.overrides.size() % 2 != 0 || r.overrides.size() > 32) {
    return Status::invalid_argument("probe: overrides are at most 16 flag, value pairs");
  }
  std::vector<std::string> argv = {"kiln", "train", r.config};
  for (size_t i = 0; i < r.overrides.size(); i += 2) {
    if (!plain(r.overrides[i + 1])) {
      return Status::invalid_argument("probe: the value of " + r.overrides[i] +
                                      " is not a plain value");
    }
    argv.push_back(r.overrides[i]);
    argv.push_back(r.overrides[i + 1]);
  }
  Result<preflight::TrialSpec> spec = preflight::trial_from_command(argv, r.steps);
  if (!spec.ok()) return Status::invalid_argument("probe: " + spec.status().message());
  // Only flags the trial keeps: one it would drop has no business in a probe.
  if (spec->overrides != r.overrides) {
    return Status::invalid_argument("probe: overrides hold a flag that does not shape the trial");
  }
  if (r.workdir.empty() || r.workdir[0] != '/' || !plain(r.workdir)) {
    return Status::invalid_argument("probe: workdir '" + r.workdir.substr(0, 64) +
                                    "' is not an absolute directory");
  }
  const bool user_ok =
      r.user.size() <= 32 &&
      std::all_of(r.user.begin(), r.user.end(),
                  [](char c) {
                    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
                  }) &&
      (r.user.empty() || r.user[0] != '-');
  if (!user_ok) return Status::invalid_argument("probe: user '" + r.user.substr(0, 32) + "'");
  return Status();
}

}  // namespace

Result<ProbeRequest> probe_request_from_json(const nlohmann::json& j) {
  if (!j.is_object()) return Status::invalid_argument("probe: the request is not a JSON object");
  ProbeRequest r;
  KILN_ASSIGN_OR_RETURN(r.check, field<std::string>(j, "check"));
  KILN_ASSIGN_OR_RETURN(r.timeout_ms, field<int64_t>(j, "timeout_ms"));
  if (r.timeout_ms < 100 || r.timeout_ms > kProbeTimeoutMsMax) {
    return Status::invalid_argument("probe: timeout_ms " + std::to_string(r.timeout_ms) +
                                    " is outside 100.." + std::to_string(kProbeTimeoutMsMax));
  }
  if (r.check == "ops") {
    KILN_ASSIGN_OR_RETURN(r.isa, field<std::string>(j, "isa"));
    if (r.isa != "scalar" && r.isa != "avx2" && r.isa != "avx512") {
      return Status::invalid_argument("probe: isa '" + r.isa + "': scalar, avx2 or avx512");
    }
    return r;
  }
  if (r.check == "trial") {
    KILN_ASSIGN_OR_RETURN(r.config, field<std::string>(j, "config"));
    KILN_ASSIGN_OR_RETURN(r.overrides, field<std::vector<std::string>>(j, "overrides"));
    KILN_ASSIGN_OR_RETURN(r.steps, field<int>(j, "steps"));
    KILN_ASSIGN_OR_RETURN(r.workdir, field<std::string>(j, "workdir"));
    KILN_ASSIGN_OR_RETURN(r.user, field<std::string>(j, "user"));
    KILN_RETURN_IF_ERROR(check_trial(r));
    return r;
  }
  if (r.check != "links") {
    return Status::invalid_argument("probe: check '" + r.check + "': links, ops or trial");
  }
  KILN_ASSIGN_OR_RETURN(r.rank, field<int>(j, "rank"));
  KILN_ASSIGN_OR_RETURN(r.world, field<int>(j, "world"));
  if (r.world < 2 || r.world > 4096 || r.rank < 0 || r.rank >= r.world) {
    return Status::invalid_argument("probe: rank " + std::to_string(r.rank) + " of world " +
                                    std::to_string(r.world));
  }
  KILN_ASSIGN_OR_RETURN(r.store_address, field<std::string>(j, "store_address"));
  KILN_ASSIGN_OR_RETURN(r.store_token, field<std::string>(j, "store_token"));
  KILN_ASSIGN_OR_RETURN(r.run_id, field<std::string>(j, "run_id"));
  KILN_RETURN_IF_ERROR(launch::check_job_id(r.run_id, "probe: run_id"));
  KILN_ASSIGN_OR_RETURN(r.random_rounds, field<int>(j, "random_rounds"));
  KILN_ASSIGN_OR_RETURN(r.seed, field<uint64_t>(j, "seed"));
  KILN_ASSIGN_OR_RETURN(r.bytes, field<std::string>(j, "bytes"));
  KILN_ASSIGN_OR_RETURN(r.iters, field<int>(j, "iters"));
  if (r.random_rounds < 0 || r.random_rounds > 16) {
    return Status::invalid_argument("probe: random_rounds " + std::to_string(r.random_rounds) +
                                    " is outside 0..16");
  }
  if (r.iters < 1 || r.iters > 100) {
    return Status::invalid_argument("probe: iters " + std::to_string(r.iters) +
                                    " is outside 1..100");
  }
  if (r.bytes.empty() || r.bytes.size() > 16) {
    return Status::invalid_argument("probe: bytes '" + r.bytes.substr(0, 16) +
                                    "' is not a byte count like 4M");
  }
  return r;
}

nlohmann::json to_json(const ProbeResult& r) {
  return {{"exit_code", r.exit_code},
          {"out", tail(r.out, kProbeOutputMax)},
          {"err", tail(r.err, 4096)}};
}

Result<ProbeResult> probe_result_from_json(const nlohmann::json& j) {
  if (!j.is_object()) return Status::invalid_argument("probe: the answer is not a JSON object");
  ProbeResult r;
  KILN_ASSIGN_OR_RETURN(r.exit_code, field<int>(j, "exit_code"));
  KILN_ASSIGN_OR_RETURN(r.out, field<std::string>(j, "out"));
  KILN_ASSIGN_OR_RETURN(r.err, field<std::string>(j, "err"));
  return r;
}

slurm::CommandSpec probe_command(const ProbeRequest& r, const std::string& kiln_binary,
                                 const std::string& node_name, const std::string& rank_address,
                                 const ProbeUser* user) {
  slurm::CommandSpec spec;
  spec.timeout_ms = r.timeout_ms;
  spec.output_max = kProbeOutputMax * 4;
  if (r.check == "trial") {
    if (user != nullptr) {
      // The rights a rank of the job has (rank_process.cc): the user's uid, its primary group
      // and no other, no way back to more. The directory is entered after the switch (env -C),
      // with the user's rights: a directory the user cannot enter fails the trial as it would
      // fail the job.
      spec.argv = {"setpriv",
                   "--reuid=" + std::to_string(user->uid),
                   "--regid=" + std::to_string(user->gid),
                   "--groups=" + std::to_string(user->gid),
                   "--no-new-privs",
                   "--",
                   "env",
                   "-C",
                   r.workdir,
                   "--"};
    } else {
      spec.cwd = r.workdir;
    }
    spec.argv.push_back(kiln_binary);
    preflight::TrialSpec trial{r.config, r.overrides, r.steps};
    for (std::string& a : preflight::trial_args(trial))
      spec.argv.push_back(std::move(a));
    // Its own node's name in its log lines; no rank environment: it trains alone.
    spec.env = {{"KILN_HOST", node_name}};
    return spec;
  }
  if (r.check == "ops") {
    spec.argv = {kiln_binary, "ops-check", "--json", "--isa", r.isa};
    return spec;
  }
  // The link check's own deadline comes first, so that a dead link is reported by the check
  // (naming the peer) rather than by the agent's kill.
  const int64_t comm_timeout_ms = std::max<int64_t>(100, r.timeout_ms * 2 / 3);
  spec.argv = {kiln_binary,       "link-check",
               "--random-rounds", std::to_string(r.random_rounds),
               "--seed",          std::to_string(r.seed),
               "--bytes",         r.bytes,
               "--iters",         std::to_string(r.iters),
               "--timeout-ms",    std::to_string(comm_timeout_ms)};
  spec.env = {{"KILN_RANK", std::to_string(r.rank)},
              {"KILN_WORLD_SIZE", std::to_string(r.world)},
              {"KILN_STORE_ADDR", r.store_address},
              {"KILN_JOB_TOKEN", r.store_token},
              {"KILN_JOB_ID", r.run_id},
              {"KILN_HOST", node_name}};
  if (!rank_address.empty()) spec.env.emplace_back("KILN_COMM_ADDR", rank_address);
  return spec;
}

}  // namespace kiln::sched
