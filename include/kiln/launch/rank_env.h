// The rank environment contract: what a launcher tells each rank it starts, through environment
// variables, and what a rank tells its launcher through its exit status. `kiln train --nproc`,
// `kiln comm-bench` (LocalJob, local_launcher.h), the coordinator's executors and Slurm launch
// ranks; `docs/launch.md` is the same contract in prose.
//
// Variables (every value is checked; an error names the variable and the value):
//   KILN_RANK            this rank, in [0, KILN_WORLD_SIZE)                      required
//   KILN_WORLD_SIZE      the number of ranks, >= 1                               required
//   KILN_LOCAL_RANK      this rank's index among the ranks of its host           optional
//   KILN_NODE_ID         the index of this rank's host in the job                optional
//   KILN_STORE_ADDR      host:port of the rendezvous store                       required
//   KILN_JOB_TOKEN       the job's shared secret (or KILN_JOB_TOKEN_FILE: a file whose first line
//                        holds it); proves a client to the store and peers to each other
//   KILN_HOST            overrides the hostname for grouping ranks by host       optional
//   KILN_TOPOLOGY        failure-domain labels, outermost first: "rack=r1,switch=s3"  optional
//   KILN_JOB_ID          the job: 1..128 of [A-Za-z0-9._-]                       optional
//   KILN_ATTEMPT         which attempt of the job this is, an integer >= 0       optional
// Under Slurm, when KILN_RANK and KILN_WORLD_SIZE are absent: SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID, SLURM_NODEID give the identity, SLURMD_NODENAME the host (unless KILN_HOST is
// set), SLURM_JOB_ID and SLURM_RESTART_COUNT the job and attempt. Without any of them the job is
// "default", attempt 0 (a rank uses what it is given).
//
// kiln_comm parses the identity part itself (include/kiln/comm/bootstrap.h: comm sits below this
// library and must not include it); this header adds the job and attempt, writes the whole set
// (rank_env_vars) and is its one definition. rank_env_test.cc checks that writing and parsing
// agree.
//
// Every rendezvous key a rank writes or reads lives under JobAttempt::store_prefix(), so a
// restarted attempt against a long-lived store never reads the records of a dead one.
//
// Exit status: 0 done; kExitStoppedResumable when the rank was asked to stop (SIGTERM) and did so
// at a step boundary all ranks agreed on, after its checkpoint committed; anything else failed.
#ifndef KILN_LAUNCH_RANK_ENV_H_
#define KILN_LAUNCH_RANK_ENV_H_

#include <cstddef>
#include <map>
#include <string>

#include <kiln/base/result.h>
#include <kiln/comm/bootstrap.h>

namespace kiln::launch {

// "Stopped on request, resumable": sysexits.h's EX_TEMPFAIL ("a temporary failure; retry"). A
// rank exits with it after a stop request once its part of the stop step's checkpoint is durable;
// a launcher exits with it when every rank did. A rerun with the same checkpoint directory
// continues from that step.
inline constexpr int kExitStoppedResumable = 75;

// A job id becomes one component of store keys (and of shared-memory names through them): short,
// and without '/', so it cannot reach into another job's keys.
inline constexpr size_t kJobIdBytesMax = 128;
// Attempts are counted by whoever restarts the job; a billion restarts is beyond any job.
inline constexpr int kAttemptMax = 1'000'000'000;

// The job a rank belongs to, and which attempt of it.
struct JobAttempt {
  std::string id = "default";
  int attempt = 0;

  // "kiln/job/<id>/attempt/<attempt>": the root of every key of this attempt in the store.
  std::string store_prefix() const;
};

// Everything a launcher gives a rank.
struct RankEnv {
  comm::RankEnvironment identity;  // rank, world size, store, token, host, topology
  JobAttempt job;
};

// kOk iff `id` is a valid job id; kInvalidArgument naming `variable` otherwise.
Status check_job_id(const std::string& id, const std::string& variable);

// The job and attempt from KILN_JOB_ID / KILN_ATTEMPT (else Slurm's SLURM_JOB_ID /
// SLURM_RESTART_COUNT), each falling back to `defaults` when unset. kInvalidArgument names the
// variable and its value.
Result<JobAttempt> job_attempt(const comm::EnvLookup& env, const JobAttempt& defaults = {});

// The whole contract from `env`; errors name the variable.
Result<RankEnv> rank_env(const comm::EnvLookup& env);
Result<RankEnv> rank_env_from_process();

// The variables that make rank_env() return `e` (optional ones only when set: local_rank and
// node_id >= 0, host and topology non-empty). `source` is not written: it says where a parse came
// from.
std::map<std::string, std::string> rank_env_vars(const RankEnv& e);

// Looks variables up in this process's environment.
comm::EnvLookup process_env();

}  // namespace kiln::launch

#endif  // KILN_LAUNCH_RANK_ENV_H_
