// See include/kiln/launch/rank_env.h.
#include <kiln/launch/rank_env.h>

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <optional>

namespace kiln::launch {
namespace {

bool job_id_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

Result<int> parse_attempt(const std::string& text, const std::string& variable) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ptr != end || ec == std::errc::invalid_argument) {
    return Status::invalid_argument(variable + "='" + text + "' is not an integer");
  }
  if (ec == std::errc::result_out_of_range || value < 0 || value > kAttemptMax) {
    return Status::invalid_argument(variable + "=" + text + " is out of range [0, " +
                                    std::to_string(kAttemptMax) + "]");
  }
  return static_cast<int>(value);
}

}  // namespace

std::string JobAttempt::store_prefix() const {
  return "kiln/job/" + id + "/attempt/" + std::to_string(attempt);
}

Status check_job_id(const std::string& id, const std::string& variable) {
  if (id.empty()) return Status::invalid_argument(variable + " is empty");
  if (id.size() > kJobIdBytesMax) {
    return Status::invalid_argument(variable + " is " + std::to_string(id.size()) +
                                    " bytes long; at most " + std::to_string(kJobIdBytesMax));
  }
  for (char c : id) {
    if (!job_id_char(c)) {
      return Status::invalid_argument(variable + "='" + id +
                                      "': a job id holds only letters, digits, '.', '_' and '-'");
    }
  }
  return Status();
}

Result<JobAttempt> job_attempt(const comm::EnvLookup& env, const JobAttempt& defaults) {
  JobAttempt out = defaults;
  for (const char* name : {"KILN_JOB_ID", "SLURM_JOB_ID"}) {
    if (std::optional<std::string> id = env(name)) {
      KILN_RETURN_IF_ERROR(check_job_id(*id, name));
      out.id = *id;
      break;
    }
  }
  for (const char* name : {"KILN_ATTEMPT", "SLURM_RESTART_COUNT"}) {
    if (std::optional<std::string> attempt = env(name)) {
      KILN_ASSIGN_OR_RETURN(out.attempt, parse_attempt(*attempt, name));
      break;
    }
  }
  return out;
}

Result<RankEnv> rank_env(const comm::EnvLookup& env) {
  RankEnv out;
  KILN_ASSIGN_OR_RETURN(out.identity, comm::rank_environment(env));
  KILN_ASSIGN_OR_RETURN(out.job, job_attempt(env));
  return out;
}

Result<RankEnv> rank_env_from_process() {
  return rank_env(process_env());
}

std::map<std::string, std::string> rank_env_vars(const RankEnv& e) {
  const comm::RankEnvironment& id = e.identity;
  std::map<std::string, std::string> vars = {
      {"KILN_RANK", std::to_string(id.rank)},
      {"KILN_WORLD_SIZE", std::to_string(id.world_size)},
      {"KILN_STORE_ADDR", id.store_address},
      {"KILN_JOB_TOKEN", id.job_token},
      {"KILN_JOB_ID", e.job.id},
      {"KILN_ATTEMPT", std::to_string(e.job.attempt)},
  };
  if (id.local_rank >= 0) vars["KILN_LOCAL_RANK"] = std::to_string(id.local_rank);
  if (id.node_id >= 0) vars["KILN_NODE_ID"] = std::to_string(id.node_id);
  if (!id.host.empty()) vars["KILN_HOST"] = id.host;
  if (!id.topology.empty()) {
    std::string text;
    for (const auto& [key, value] : id.topology)
      text += (text.empty() ? "" : ",") + key + "=" + value;
    vars["KILN_TOPOLOGY"] = text;
  }
  return vars;
}

comm::EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

}  // namespace kiln::launch
