// RankSupervisor: the part of the node agent that owns rank processes (slurmd's or the kubelet's
// job on a node): it starts each rank, captures what it prints into the rank's log (rank_log.h),
// reads its progress pipe, stops it, and reports how it ended. Intent (which ranks should run)
// lives with the coordinator; this only runs what it is told and says what happened.
//
// One background thread serves every rank: an epoll set holds each rank's stdout, stderr and
// progress pipe and its pidfd, so there is no thread per rank and a node with 1024 ranks costs
// one thread and 5 descriptors a rank (RLIMIT_NOFILE must allow 5 x ranks_max plus the agent's
// own; start() fails with the descriptor error, naming the rank, when it does not).
//
// A rank's process:
// - starts in a process group of its own (pgid = pid), so a stop reaches the processes it
//   started too, and the agent's own terminal or session signals never reach it;
// - starts with every signal unblocked and at its default action, stdin on /dev/null, stdout and
//   stderr on pipes to the agent, fd 3 the write end of its progress pipe (when asked; the rank
//   is told by KILN_PROGRESS_FD=3), and no other descriptor of the agent's;
// - is not tied to the agent's life (no PR_SET_PDEATHSIG): a restarted agent or coordinator must
//   not take running ranks down with it. (What the restart does lose: the read ends of the
//   stdio pipes. A rank that keeps the default SIGPIPE action dies at its next write to them;
//   `kiln train` ranks under an agent ignore SIGPIPE for that reason, see src/cli/cmd_train.cc.
//   TODO: a per-node log holder that outlives the agent, so a restart also keeps the logs.)
// - when given uid/gid, runs as that user: setgroups({gid}), setgid, setuid in the child before
//   exec, which needs the agent to be root. uid 0 or gid 0 is refused: asking for a user means
//   never running as root.
//
// A rank's process group lives exactly as long as the rank: when the rank's main process ends,
// whatever is left in its group is killed (SIGKILL) before the main process is reaped. The
// group's id cannot be reused while its leader is an unreaped zombie, so the supervisor signals
// a group only then or before, never after the reap: no signal can hit an unrelated process
// that happens to get the same number later. A process that leaves the group (setsid, setpgid)
// escapes this; containing those is a cgroup's job (TODO with the node's cgroup support).
//
// Output lines: each line a rank writes to stdout or stderr becomes one record of its log. A
// line longer than kRankLogLineBytesMax is cut there and marked "truncated":true; the rest of it,
// up to the next newline, is dropped. At most that much is buffered per stream. A last line
// without a newline is written when its pipe ends or the rank is forgotten.
//
// Progress: a rank writes one JSON line per optimizer step to fd 3:
//   {"step":12,"step_ms":210.3,"loss":6.12,"tokens_per_s":1234.5,"comm_exposed_ms":3.1,
//    "lr":6e-4,"mfu":0.31,"ckpt_stall_ms":0[,"val_loss":6.3]}   then   {"event":"done"}
// progress() returns the latest, and its last kRecentStepsMax steps (the curves' points). Lines
// that are not such JSON, or name a negative step, are ignored (and counted), as is anything
// after the done line.
//
// Last words: the last line a rank wrote to stderr (RankExitInfo::last_stderr) is kept, so the
// coordinator can say why a program failed without reading its log.
//
// Thread safety: every public method may be called from any thread, including from on_exit
// (which runs on the supervisor thread with no lock held).
#ifndef KILN_SCHED_RANK_PROCESS_H_
#define KILN_SCHED_RANK_PROCESS_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <kiln/base/clock.h>
#include <kiln/base/log.h>
#include <kiln/base/result.h>
#include <kiln/base/status.h>
#include <kiln/sched/step_series.h>

namespace kiln::sched {

// The descriptor a rank finds its progress pipe on, and the variable that tells it so.
inline constexpr int kRankProgressFd = 3;
inline constexpr const char* kProgressFdVariable = "KILN_PROGRESS_FD";
// A rank's "stopped on request, resumable" exit status: launch::kExitStoppedResumable
// (include/kiln/launch/rank_env.h), repeated here so this library needs no kiln_launch for it;
// rank_process_test.cc checks the two agree.
inline constexpr int kExitStoppedResumable = 75;
// The most a rank may hold at once (start() refuses more): far above any node's accelerators,
// and a bound on the supervisor's descriptors and buffers.
inline constexpr size_t kRanksMaxLimit = 4096;

// How to start one rank.
struct RankSpawn {
  int rank = 0;  // for the log records and for messages; the caller's key identifies the rank
  // argv[0]: a path (containing '/') or a name looked up in the PATH the rank will see (env's
  // PATH when given, else the agent's).
  std::vector<std::string> argv;
  // Added to the agent's environment; these win over the agent's values.
  std::map<std::string, std::string> env;
  std::string cwd;       // must exist; entered after the user switch, so with the user's rights
  std::string log_path;  // this rank's log (rank_log.h); its directory must exist
  int64_t log_bytes_max = 64LL << 20;  // then rotated once to <log_path>.1
  // Run as this user and group (both or neither; neither 0). Needs the agent to be root.
  std::optional<uid_t> uid;
  std::optional<gid_t> gid;
  bool progress_pipe = true;  // give the rank a progress pipe on fd 3 and KILN_PROGRESS_FD=3
};

inline constexpr size_t kLastStderrBytes = 1024;

// How a rank ended.
struct RankExitInfo {
  std::string key;  // the caller's key from start()
  int rank = 0;
  pid_t pid = 0;
  bool exited = false;            // true: exited with `code`; false: killed by signal `code`
  int code = 0;                   // exit status or signal number
  bool stopped_by_agent = false;  // stop() was called for it before it ended
  int64_t runtime_ms = 0;         // from start() to the reap, on the supervisor's clock
  // The last line it wrote to stderr, cut to kLastStderrBytes: a failing program's own account
  // of why (what the coordinator's error signatures read). Empty when it wrote none.
  std::string last_stderr;
  // Killed by SIGKILL from the kernel's OOM killer (the kernel log says so: oom_kill.h).
  bool oom_killed = false;

  // "rank 1 (pid 42) exited with code 3", "rank 1 (pid 42) was killed by signal 9 (SIGKILL)",
  // with " after a stop request" when stopped_by_agent and " (stopped, resumable)" for
  // kExitStoppedResumable.
  std::string describe() const;
};

// The latest progress line of a rank.
struct RankProgress {
  int64_t step = -1;  // -1: no step line yet
  double step_ms = 0;
  double loss = 0;  // NaN when the line said null (a diverged loss)
  double tokens_per_s = 0;
  double comm_exposed_ms = 0;   // this rank's wait on the gradient collective in that step
  int64_t updated_mono_ns = 0;  // when the latest line arrived (supervisor's clock); 0: never
  // The last kRecentStepsMax step lines, oldest first (step_series.h), each stamped with its
  // arrival on the supervisor's clock: what the coordinator's curves are drawn from.
  struct Recent {
    StepSample sample;  // age_ms unset: the reader computes it from arrived_mono_ns
    int64_t arrived_mono_ns = 0;
  };
  std::deque<Recent> recent;
  bool done = false;      // the rank wrote {"event":"done"}
  int64_t lines_bad = 0;  // lines that were not progress JSON (ignored)
};

class RankSupervisor {
 public:
  struct Options {
    // start() refuses a rank beyond this many held (running, or ended and not yet forgotten).
    // REQUIRES: 1 <= ranks_max <= kRanksMaxLimit.
    size_t ranks_max = 1024;
    // Called once per rank, on the supervisor thread, right after the rank's process is reaped
    // (its output read up to that moment is in its log). Must be cheap and must not block: the
    // thread serves every other rank meanwhile. May call this supervisor's methods. Empty: none.
    std::function<void(const RankExitInfo&)> on_exit;
    // Time for progress stamps, the stop grace and runtime_ms. Not owned; outlives the
    // supervisor. A fake clock is polled at least every kFakeClockPollMs.
    const Clock* clock = &system_clock();
    Logger log;  // the supervisor's own problems (a log write that failed); rate limited
  };

  // Starts the supervisor thread. Errors: kInvalidArgument for bad options, kIoError when epoll
  // or the thread cannot be made.
  static Result<std::unique_ptr<RankSupervisor>> create(Options options);

  // Kills (SIGKILL) the process group of every rank still running, reaps them (waiting at most
  // kDestroyReapMs in all), writes what they printed so far and joins the thread. on_exit is not
  // called for them: the owner is going away.
  ~RankSupervisor();
  RankSupervisor(const RankSupervisor&) = delete;
  RankSupervisor& operator=(const RankSupervisor&) = delete;

  // Starts a rank in a new process group and returns its pid. `key` is the caller's name for it
  // ("j-000001/0/rank1"), unique among the ranks held. Checked before anything starts, each error
  // naming the rank and the path: argv[0] not found or not executable, cwd missing, the log not
  // writable, uid/gid invalid or not allowed; kInvalidArgument for an empty or duplicate key,
  // kUnavailable when ranks_max are held. A failure in the child between fork and exec (chdir
  // as the user, exec itself) is reported the same way, and nothing is left running.
  Result<pid_t> start(const std::string& key, RankSpawn spawn);

  // Stops a rank: SIGTERM to its process group now, SIGKILL to the group once grace_ms have
  // passed if it is still running (grace_ms <= 0: SIGKILL now). Returns at once; the supervisor
  // thread keeps the grace timer, and on_exit reports the end with stopped_by_agent set.
  // A second stop() may shorten the grace, never lengthen it. OK (and nothing sent) when the
  // rank has already ended; kNotFound for an unknown key.
  Status stop(const std::string& key, int64_t grace_ms);

  // The latest progress of a rank held; none for an unknown key.
  std::optional<RankProgress> progress(const std::string& key) const;

  // The keys of ranks whose process has not been reaped yet, in key order.
  std::vector<std::string> running_keys() const;

  // How a held rank ended; none while it runs or for an unknown key.
  std::optional<RankExitInfo> exit_info(const std::string& key) const;

  // Lets go of an ended rank: writes its unfinished output lines, closes its pipes and log and
  // frees its slot. kNotFound for an unknown key, kInvalidArgument while it still runs.
  Status forget(const std::string& key);

  // How often the thread re-reads a clock that is not system_clock() (tests advance fake ones).
  static constexpr int64_t kFakeClockPollMs = 20;
  // How long the destructor waits for SIGKILLed ranks to be reaped before it gives up on them.
  static constexpr int64_t kDestroyReapMs = 10'000;

  struct Impl;  // defined in rank_process.cc

 private:
  explicit RankSupervisor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::sched

#endif  // KILN_SCHED_RANK_PROCESS_H_
