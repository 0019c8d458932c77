// LocalJob: N ranks of one job as child processes on this host, with an embedded rendezvous
// store. `kiln comm-bench` and `kiln train --nproc N` use it; the coordinator's local executor
// will too.
//
// Each child gets KILN_RANK, KILN_WORLD_SIZE, KILN_LOCAL_RANK, KILN_NODE_ID, KILN_STORE_ADDR and
// KILN_JOB_TOKEN (a fresh random token unless one is given), plus KILN_HOST when the job fakes
// several hosts. Children inherit stdout and stderr.
//
// wait() watches every child (pidfds, no polling loop). When one fails (non-zero exit or a
// signal) the others get `grace_ms` to notice and exit on their own: they should, since a
// communicator stops within milliseconds when a peer dies. Then the launcher sends SIGUSR1 to
// those still running (so they dump their flight recorders), waits a moment, and kills them.
#ifndef KILN_COMM_LOCAL_LAUNCHER_H_
#define KILN_COMM_LOCAL_LAUNCHER_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <kiln/base/log.h>
#include <kiln/base/result.h>
#include <kiln/comm/store.h>

namespace kiln::comm {

struct LaunchOptions {
  int world_size = 1;
  // The command each rank runs; argv[0] is the executable's path.
  std::vector<std::string> argv;
  // Extra environment for every rank (on top of the parent's).
  std::map<std::string, std::string> env;
  // Rank r runs on fake host hosts[r % hosts.size()] (KILN_HOST); empty: all on this host.
  std::vector<std::string> hosts;
  std::string job_token;  // empty: a random one
  // After the first failure, how long the others may take to exit by themselves.
  int64_t grace_ms = 5'000;
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
};

struct JobResult {
  std::vector<RankExit> ranks;  // by rank
  // The rank that failed first (-1 if none), which is usually the cause.
  int first_failed = -1;
  bool ok() const { return first_failed < 0; }
};

class LocalJob {
 public:
  static Result<std::unique_ptr<LocalJob>> start(const LaunchOptions& options, Logger log);
  ~LocalJob();  // kills ranks still running

  const std::vector<pid_t>& pids() const { return pids_; }
  const std::string& store_address() const { return store_address_; }

  // Waits for every rank, handling failures as described above, up to `timeout_ms` in total
  // (then everything still running is killed and kTimeout names the ranks that were).
  Result<JobResult> wait(int64_t timeout_ms);

 private:
  LocalJob() = default;
  void kill_all(int signal);

  LaunchOptions options_;
  Logger log_;
  std::unique_ptr<StoreServer> store_;
  std::string store_address_;
  std::vector<pid_t> pids_;
  std::vector<int> pidfds_;
  std::vector<bool> reaped_;
};

}  // namespace kiln::comm

#endif  // KILN_COMM_LOCAL_LAUNCHER_H_
