// Where a rank learns who it is: the environment a launcher gives it. This is the part of the
// rank environment contract kiln_comm needs (identity, store, token); the whole contract, with
// the job id and attempt and the writer that launchers use, is kiln_launch's
// (include/kiln/launch/rank_env.h, docs/launch.md), which parses through this.
//
// Kiln's own variables come first:
//   KILN_RANK, KILN_WORLD_SIZE   this rank and the number of ranks (required, integers)
//   KILN_LOCAL_RANK, KILN_NODE_ID   optional
//   KILN_STORE_ADDR              host:port of the rendezvous store (required)
//   KILN_JOB_TOKEN               the job's shared secret (or KILN_JOB_TOKEN_FILE: a file holding
//   it) KILN_HOST                    overrides the hostname for grouping ranks by host
//   KILN_TOPOLOGY                failure-domain labels, outermost first: "rack=r1,switch=s3"
// When KILN_RANK and KILN_WORLD_SIZE are absent, Slurm's are used instead:
//   SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID
// (the store address and token still come from KILN_STORE_ADDR and KILN_JOB_TOKEN[_FILE]).
//
// Every error names the variable and the value that was wrong.
#ifndef KILN_COMM_BOOTSTRAP_H_
#define KILN_COMM_BOOTSTRAP_H_

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <kiln/base/result.h>

namespace kiln::comm {

struct RankEnvironment {
  int rank = 0;
  int world_size = 1;
  int local_rank = -1;  // -1: not given
  int node_id = -1;     // -1: not given
  std::string store_address;
  std::string job_token;
  std::string host;  // KILN_HOST, else empty (the communicator then uses the hostname)
  std::vector<std::pair<std::string, std::string>> topology;
  std::string source;  // "kiln" or "slurm": where rank and world size came from
};

// Looks a variable up; std::nullopt when unset. Tests pass a map; processes use getenv.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

Result<RankEnvironment> rank_environment(const EnvLookup& env);
Result<RankEnvironment> rank_environment_from_process();

}  // namespace kiln::comm

#endif  // KILN_COMM_BOOTSTRAP_H_
