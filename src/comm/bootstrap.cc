// See include/kiln/comm/bootstrap.h.
#include <kiln/comm/bootstrap.h>

#include <charconv>
#include <fstream>
#include <sstream>

#include "comm/comm_env.h"
#include "comm/topology.h"

namespace kiln::comm {
namespace {

Result<int> read_int(const EnvLookup& env, const std::string& name, int min, int max) {
  std::optional<std::string> text = env(name);
  if (!text) return Status::not_found(name + " is not set");
  int value = 0;
  const char* end = text->data() + text->size();
  auto [ptr, ec] = std::from_chars(text->data(), end, value);
  if (ec != std::errc() || ptr != end || text->empty()) {
    return Status::invalid_argument(name + "='" + *text + "' is not an integer");
  }
  if (value < min || value > max) {
    return Status::invalid_argument(name + "=" + *text + " is out of range [" +
                                    std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return value;
}

Result<int> optional_int(const EnvLookup& env, const std::string& name, int min, int max) {
  if (!env(name)) return -1;
  return read_int(env, name, min, max);
}

}  // namespace

Result<RankEnvironment> rank_environment(const EnvLookup& env) {
  RankEnvironment out;
  constexpr int kIntMax = 1 << 30;
  if (env("KILN_RANK") || env("KILN_WORLD_SIZE")) {
    out.source = "kiln";
    KILN_ASSIGN_OR_RETURN(out.world_size, read_int(env, "KILN_WORLD_SIZE", 1, kIntMax));
    KILN_ASSIGN_OR_RETURN(out.rank, read_int(env, "KILN_RANK", 0, out.world_size - 1));
    KILN_ASSIGN_OR_RETURN(out.local_rank, optional_int(env, "KILN_LOCAL_RANK", 0, kIntMax));
    KILN_ASSIGN_OR_RETURN(out.node_id, optional_int(env, "KILN_NODE_ID", 0, kIntMax));
  } else if (env("SLURM_PROCID")) {
    out.source = "slurm";
    KILN_ASSIGN_OR_RETURN(out.world_size, read_int(env, "SLURM_NTASKS", 1, kIntMax));
    KILN_ASSIGN_OR_RETURN(out.rank, read_int(env, "SLURM_PROCID", 0, out.world_size - 1));
    KILN_ASSIGN_OR_RETURN(out.local_rank, optional_int(env, "SLURM_LOCALID", 0, kIntMax));
    KILN_ASSIGN_OR_RETURN(out.node_id, optional_int(env, "SLURM_NODEID", 0, kIntMax));
  } else {
    return Status::not_found(
        "no rank identity in the environment: set KILN_RANK and KILN_WORLD_SIZE, or run under "
        "Slurm (SLURM_PROCID, SLURM_NTASKS)");
  }
  std::optional<std::string> store = env("KILN_STORE_ADDR");
  if (!store || store->empty()) {
    return Status::not_found("KILN_STORE_ADDR is not set (host:port of the rendezvous store)");
  }
  out.store_address = *store;
  if (std::optional<std::string> token = env("KILN_JOB_TOKEN"); token && !token->empty()) {
    out.job_token = *token;
  } else if (std::optional<std::string> path = env("KILN_JOB_TOKEN_FILE")) {
    std::ifstream in(*path);
    if (!in) return Status::not_found("KILN_JOB_TOKEN_FILE=" + *path + ": cannot open");
    std::getline(in, out.job_token);
    if (out.job_token.empty()) {
      return Status::invalid_argument("KILN_JOB_TOKEN_FILE=" + *path + " is empty");
    }
  } else {
    return Status::not_found("KILN_JOB_TOKEN (or KILN_JOB_TOKEN_FILE) is not set");
  }
  if (std::optional<std::string> host = env("KILN_HOST")) {
    out.host = *host;
  } else if (std::optional<std::string> node = env("SLURMD_NODENAME");
             out.source == "slurm" && node && !node->empty()) {
    // Under Slurm the node is what Slurm calls it: several slurmd on one machine (or hosts
    // whose names all resolve alike) are still different nodes, whose ranks use TCP.
    out.host = *node;
  }
  if (std::optional<std::string> topo = env("KILN_TOPOLOGY"); topo && !topo->empty()) {
    Result<Labels> labels = parse_topology(*topo);
    if (!labels.ok()) return labels.status().with_context("KILN_TOPOLOGY");
    out.topology = std::move(*labels);
  }
  return out;
}

Result<RankEnvironment> rank_environment_from_process() {
  return rank_environment(process_env());
}

}  // namespace kiln::comm
