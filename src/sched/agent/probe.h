// A probe: one of Kiln's own checks that the full preflight asks a node agent to run
// (POST /v1/probe on the agent's endpoint, node token), as a child process of the node's own
// kiln binary, so that what is measured is the node's build, not the coordinator's:
//   links  `kiln link-check`, one rank per node of the check (kiln/preflight/link_probe.h)
//   ops    `kiln ops-check --json --isa ISA`, the optimised path the stack should take
//   trial  `kiln train CONFIG --max-steps N --json ...`, a job's trial (kiln/preflight/trial.h),
//          in the job's directory, as its team's Unix user when the coordinator maps one
// The request names only the check and its parameters: an agent never runs a command line it
// was sent. Private to src/sched/ (the agent runs probes, the coordinator's preflight asks).
#ifndef KILN_SCHED_AGENT_PROBE_H_
#define KILN_SCHED_AGENT_PROBE_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <kiln/base/result.h>

#include <kiln/sched/command.h>

namespace kiln::sched {

inline constexpr int64_t kProbeTimeoutMsMax = 300'000;
// Of a probe's output the answer carries at most this much (the tail).
inline constexpr size_t kProbeOutputMax = size_t{1} << 20;

struct ProbeRequest {
  std::string check;  // "links" or "ops"
  int64_t timeout_ms = 60'000;
  // links: this node's rank among the check's nodes, the rendezvous store and the check's id.
  int rank = 0;
  int world = 1;
  std::string store_address;
  std::string store_token;
  std::string run_id;  // a job id (KILN_JOB_ID): the check's keys in the store
  int random_rounds = 1;
  uint64_t seed = 1;
  std::string bytes = "4M";
  int iters = 3;
  // ops: the ISA whose kernels are checked (the one the stack should dispatch to).
  std::string isa;
  // trial: the job's config and the flags of its command that shape the computation (only
  // those trial_from_command keeps), the steps, the job's directory (absolute) and the Unix user
  // it runs as (empty: the agent's).
  std::string config;
  std::vector<std::string> overrides;
  int steps = 0;
  std::string workdir;
  std::string user;
};

// Who a trial runs as: the user's ids on this node.
struct ProbeUser {
  uint32_t uid = 0;
  uint32_t gid = 0;
};

struct ProbeResult {
  int exit_code = 0;
  std::string out;  // stdout's tail
  std::string err;  // stderr's tail
};

nlohmann::json to_json(const ProbeRequest& request);
// kInvalidArgument naming the field that is missing or out of range.
Result<ProbeRequest> probe_request_from_json(const nlohmann::json& j);
nlohmann::json to_json(const ProbeResult& result);
Result<ProbeResult> probe_result_from_json(const nlohmann::json& j);

// The command the agent runs: `kiln_binary` with the check's arguments and, for links, the rank
// environment (node_name as KILN_HOST; rank_address, when set, as KILN_COMM_ADDR). A trial with
// `user` runs under setpriv(1) as that user with its primary group only and no new privileges,
// and enters the job's directory after the switch (env -C). REQUIRES: user's ids are not 0.
slurm::CommandSpec probe_command(const ProbeRequest& request, const std::string& kiln_binary,
                                 const std::string& node_name, const std::string& rank_address,
                                 const ProbeUser* user = nullptr);

}  // namespace kiln::sched

#endif  // KILN_SCHED_AGENT_PROBE_H_
