// LocalJob: N ranks of one job as child processes on this host, with an embedded rendezvous
// store. `kiln comm-bench` and `kiln train --nproc N` use it; the coordinator's local executor
// will too.
//
// Each child gets the rank environment of rank_env.h (rank_env_vars): its rank and the world
// size, KILN_LOCAL_RANK, KILN_NODE_ID, the store's address, the job token (a fresh random one
// unless given), the job id (made up as local-<pid>-<unix seconds> unless given) and the attempt,
// plus KILN_HOST when the job fakes several hosts. Children inherit stdout and stderr, and start
// with no signal blocked and every signal the launcher handles at its default action. Each is
// bound to its CPUs from its first instruction: it is spawned from a launcher thread bound to
// them (a spawned process inherits its parent thread's CPU affinity), and KILN_CPUS says which.
//
// wait() watches every child (pidfds, no polling loop). When one fails (a non-zero exit other
// than kExitStoppedResumable, or a signal) the others get `grace_ms` to notice and exit on their
// own: they should, since a communicator stops within milliseconds when a peer dies. Then the
// launcher sends SIGUSR1 to those still running (so they dump their flight recorders), waits a
// moment, and kills them. A rank that exits kExitStoppedResumable stopped on request; the others
// get the same `grace_ms` to stop too (they agreed on the step), and those still running after it
// are treated as failed. Signals the caller takes while waiting (take_signal) go to every rank
// still running.
#ifndef KILN_LAUNCH_LOCAL_LAUNCHER_H_
#define KILN_LAUNCH_LOCAL_LAUNCHER_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <kiln/base/log.h>
#include <kiln/base/result.h>
#include <kiln/comm/store.h>
#include <kiln/launch/placement.h>
#include <kiln/launch/rank_env.h>

namespace kiln::launch {

struct LaunchOptions {
  int world_size = 1;
  // The command each rank runs; argv[0] is the executable's path.
  std::vector<std::string> argv;
  // Extra environment for every rank (on top of the parent's; the contract's variables win).
  std::map<std::string, std::string> env;
  // Rank r runs on fake host hosts[r % hosts.size()] (KILN_HOST); empty: all on this host.
  std::vector<std::string> hosts;
  std::string job_token;  // empty: a random one
  std::string job_id;     // empty: local-<pid>-<unix seconds>; else a valid job id
  int attempt = 0;        // in [0, kAttemptMax]
  // After the first failure or stop, how long the others may take to exit by themselves.
  int64_t grace_ms = 5'000;
  // Which CPUs each rank runs on (kiln/launch/placement.h), planned over the CPUs the launcher
  // may use for world_size ranks of threads_per_rank compute threads. Every rank runs on this
  // machine, fake hosts or not, so all of them are planned together.
  CpuBind cpu_bind;
  int threads_per_rank = 1;  // >= 1
};

// How one rank ended.
struct RankExit {
  int rank = 0;
  pid_t pid = 0;
  bool exited = false;  // false: killed by a signal
  int code = 0;         // exit code, or the signal number
  bool killed_by_launcher = false;
  // "rank 3 (pid 4242) was killed by signal 9 (SIGKILL)" / "... exited with code 1"
  std::string describe() const;
  bool ok() const { return exited && code == 0; }
  bool stopped() const { return exited && code == kExitStoppedResumable; }
};

struct JobResult {
  std::vector<RankExit> ranks;  // by rank
  // The rank that failed first (-1 if none), which is usually the cause.
  int first_failed = -1;
  bool ok() const { return first_failed < 0; }
  // No rank failed and at least one stopped on request (the others finished).
  bool stopped() const;
};

class LocalJob {
 public:
  // kInvalidArgument for a bad world size, command, job id or attempt; kIoError naming the rank
  // when a spawn fails (the ranks already started are killed).
  static Result<std::unique_ptr<LocalJob>> start(const LaunchOptions& options, Logger log);
  ~LocalJob();  // kills ranks still running

  const std::vector<pid_t>& pids() const { return pids_; }
  const std::string& store_address() const { return store_address_; }
  const JobAttempt& job() const { return job_; }
  const Placement& placement() const { return placement_; }

  // Waits for every rank, handling failures and stops as described above, up to `timeout_ms` in
  // total (then everything still running is killed and kTimeout names the ranks that were).
  // `take_signal`, when set, is called at least every 100 ms on this thread; a non-zero signal
  // number it returns is sent to every rank still running.
  Result<JobResult> wait(int64_t timeout_ms, const std::function<int()>& take_signal = {});

 private:
  LocalJob() = default;
  void kill_all(int signal);

  LaunchOptions options_;
  JobAttempt job_;
  Placement placement_;
  Logger log_;
  std::unique_ptr<comm::StoreServer> store_;
  std::string store_address_;
  std::vector<pid_t> pids_;
  std::vector<int> pidfds_;
  std::vector<bool> reaped_;
};

}  // namespace kiln::launch

#endif  // KILN_LAUNCH_LOCAL_LAUNCHER_H_
