// The Slurm executor of the coordinator (`kiln serve --executor slurm`, docs/slurm.md).
//
// Slurm owns the machines; Kiln owns the job. Each attempt of a Kiln job becomes one Slurm
// allocation (sbatch: the attempt's node count, tasks per node, CPUs, memory and GPUs per task,
// --nodelist where Kiln's policy placed it, its time limit), named <prefix>.<job>.<attempt> so
// that a restarted coordinator finds its allocations again instead of submitting twice. Inside the
// allocation one `kiln agent --join` per node (srun, one task per node) starts and supervises the
// attempt's ranks exactly as on the local executor, so Kiln's fault handling (rank exits and
// heartbeats, the flight recorder's culprit, isolation, restart from the newest checkpoint) is the
// same on Slurm; a restart is a new allocation that avoids the culprit's node.
//
// Node states go both ways: a node Kiln cordons or suspects is drained in Slurm with Kiln's
// reason ("kiln: ..."), and resumed when Kiln readmits it (only drains whose reason starts
// "kiln:" are ever resumed by Kiln); a node Slurm marks down, not responding or drained for
// another reason is down or cordoned in Kiln ("slurm: ...").
//
// One thread runs the loop: ask the coordinator for its intent, read Slurm (sinfo, squeue), make
// Slurm match the intent (scontrol update, sbatch, scancel), report what it saw. Every command has
// a timeout and an output bound (a hung slurmctld stalls this loop, never the coordinator's API);
// a failed command is logged and retried next round.
#ifndef KILN_SCHED_SLURM_H_
#define KILN_SCHED_SLURM_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <kiln/base/log.h>
#include <kiln/base/result.h>
#include <kiln/sched/coordinator.h>

namespace kiln::sched {

// --- what Slurm's tools print, parsed (slurm_parse.cc) ---

// "n[1-3,5],gpu07,a[01-02]b" -> n1 n2 n3 n5 gpu07 a01b a02b (zero padding kept). kInvalidArgument
// on an unbalanced bracket or a bad range; at most `max_names` names (a typo such as n[1-99999999]
// cannot exhaust memory).
Result<std::vector<std::string>> expand_hostlist(const std::string& list, size_t max_names = 65536);

// The fields Kiln asks sinfo for, in order, '|'-separated: sinfo -N -h -o "<kSinfoFormat>".
inline constexpr const char* kSinfoFormat = "%N|%T|%c|%m|%P|%G|%E";
// One node per line of that output; a node in several partitions keeps its first. A line that
// does not parse is an error naming it.
Result<std::vector<ExternalNode>> parse_sinfo(const std::string& text);

// squeue -h -t all -o "<kSqueueFormat>".
inline constexpr const char* kSqueueFormat = "%i|%j|%T|%r|%N";
struct SlurmJob {
  std::string id;
  std::string name;
  std::string state;  // PENDING, RUNNING, COMPLETED, FAILED, NODE_FAIL, ...
  std::string reason;
  std::vector<std::string> nodes;
};
Result<std::vector<SlurmJob>> parse_squeue(const std::string& text);
// Whether a Slurm job state is an end (COMPLETED, FAILED, CANCELLED, NODE_FAIL, TIMEOUT, ...).
bool slurm_state_ended(const std::string& state);

// --- the executor ---

struct SlurmOptions {
  std::string coordinator_url;  // what the agents in the allocations join
  std::string kiln_binary;      // absolute; must be on the nodes at this path
  std::string node_token;       // the agents' token (sbatch passes it in the job's environment)
  std::string work_dir;         // batch scripts, allocation outputs, agents' work directories
  std::string partition;        // empty: Slurm's default
  std::string name_prefix = "kiln";
  std::string rank_address;  // --rank-address of the agents (an interface or IPv4), empty: default
  std::string ca_cert;       // the coordinator's certificate, for agents over TLS
  int64_t poll_ms = 1000;
  int64_t command_timeout_ms = 20000;
  // The environment of every Slurm command (SLURM_CONF, say), on top of this process's.
  std::vector<std::pair<std::string, std::string>> env;
};

class SlurmExecutor {
 public:
  SlurmExecutor(SlurmOptions options, Coordinator* coordinator, Logger log);
  ~SlurmExecutor();  // stops the loop

  // Checks that Slurm answers (sinfo) and writes the batch script; then starts the loop.
  Status start();
  void stop();

  // One round of the loop, for start() and tests: intent, observe, act, report.
  Status round();

 private:
  Status observe(ExecutorReport* report, std::vector<SlurmJob>* ours);
  Status submit(const AllocationIntent& a, ExecutorReport* report);
  Result<std::string> run(const std::vector<std::string>& argv);

  SlurmOptions options_;
  Coordinator* coordinator_;
  Logger log_;
  std::string script_path_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace kiln::sched

#endif  // KILN_SCHED_SLURM_H_
