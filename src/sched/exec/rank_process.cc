// See include/kiln/sched/rank_process.h.
//
// Starting a rank: fork + exec, not posix_spawn, because the child must switch user
// (setgroups/setgid/setuid) and close every inherited descriptor, which posix_spawn cannot do.
// Everything the child needs (the resolved executable, argv, envp, descriptors) is built before
// fork(): between fork and exec the child of this multi-threaded process may only make
// async-signal-safe calls, so it allocates nothing and takes no lock. A close-on-exec pipe
// carries {stage, errno} back if a step in the child fails; EOF on it means exec succeeded.
//
// Serving ranks: one thread waits in epoll_wait on every rank's pipes and pidfd (each event
// tagged serial << 2 | kind, so an event for a rank forgotten meanwhile finds no rank and is
// dropped, whatever its descriptor number is now) plus an eventfd that stop() and the destructor
// use to wake it. It handles a batch of events under `mu`, then calls on_exit with no lock held.
#include <kiln/base/json.h>
#include <kiln/base/unique_fd.h>
#include <kiln/sched/oom_kill.h>
#include <kiln/sched/rank_log.h>
#include <kiln/sched/rank_process.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>
#include <unordered_map>

extern char** environ;

namespace kiln::sched {
namespace {

// How long start() waits for the child to reach exec. Only a cwd on a hung file system or an
// exec that blocks on one takes more than milliseconds.
constexpr int64_t kExecWaitMs = 10'000;
// The longest the thread sleeps with nothing due: a safety net, not a timer anything relies on.
constexpr int kIdleWaitMs = 1'000;
// Ranks without a pidfd (a kernel before 5.3) are checked for an exit this often.
constexpr int kNoPidfdPollMs = 100;
// Bytes read from one stream per wake-up before the thread turns to the other ranks: a rank
// that prints without pause cannot starve the rest (level-triggered epoll brings it back).
constexpr size_t kDrainBytesMax = 1 << 20;
constexpr size_t kReadChunkBytes = 64 << 10;
constexpr int kEventsPerWait = 64;
// Descriptors below this are moved up before fork, so the child's dup2 onto 0..3 can never
// overwrite a source it still needs (an agent started with stdin closed gets a pipe as fd 0).
constexpr int kLowFdLimit = 10;
// Progress lines are at most 512 bytes (the trainer's bound); a little nesting room.
constexpr JsonLimits kProgressJsonLimits{kRankLogLineBytesMax, 4};
// Supervisor warnings (a log write that failed) at most this often, in bursts of this many.
constexpr int64_t kWarnIntervalMs = 10'000;
constexpr int64_t kWarnBurst = 5;

enum class Kind : uint64_t { kStdout = 0, kStderr = 1, kProgress = 2, kPidfd = 3 };
constexpr int kStreams = 3;       // stdout, stderr, progress: indexes of RankState::pipes
constexpr uint64_t kWakeTag = 0;  // serial 0 is never a rank's

uint64_t tag(uint64_t serial, Kind kind) {
  return serial << 2 | static_cast<uint64_t>(kind);
}

Status errno_status(const std::string& what, int err) {
  return Status::io_error(what + ": " + std::strerror(err));
}

// Moves `fd` to a number >= kLowFdLimit (keeping close-on-exec).
Status raise_fd(UniqueFd* fd) {
  if (fd->get() >= kLowFdLimit) return Status();
  const int high = fcntl(fd->get(), F_DUPFD_CLOEXEC, kLowFdLimit);
  if (high < 0) return errno_status("fcntl(F_DUPFD_CLOEXEC)", errno);
  fd->reset(high);
  return Status();
}

// A close-on-exec pipe with both ends above kLowFdLimit.
Status make_pipe(UniqueFd* read_end, UniqueFd* write_end) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return errno_status("pipe2", errno);
  read_end->reset(fds[0]);
  write_end->reset(fds[1]);
  KILN_RETURN_IF_ERROR(raise_fd(read_end));
  return raise_fd(write_end);
}

// ---------------------------------------------------------------------------------------------
// The child side

// Where the child failed, reported through the error pipe.
enum ChildStage : int {
  kStageSignals = 1,
  kStageSetpgid,
  kStageDup,
  kStageCloseFds,
  kStageSetgroups,
  kStageSetgid,
  kStageSetuid,
  kStageUserCheck,
  kStageChdir,
  kStageExec,
};

const char* stage_name(int stage) {
  switch (stage) {
    case kStageSignals: return "reset signals";
    case kStageSetpgid: return "setpgid";
    case kStageDup: return "dup2";
    case kStageCloseFds: return "close inherited descriptors";
    case kStageSetgroups: return "setgroups";
    case kStageSetgid: return "setgid";
    case kStageSetuid: return "setuid";
    case kStageUserCheck: return "check the user switch";
    case kStageChdir: return "chdir";
    case kStageExec: return "exec";
    default: return "?";
  }
}

// Everything the child needs, made before fork(): the child only reads it.
struct ChildPlan {
  std::string exe;  // resolved path
  std::string cwd;
  std::vector<std::string> argv_text, env_text;
  std::vector<char*> argv, envp;                // point into the texts; null-terminated
  std::array<int, 4> stdio = {-1, -1, -1, -1};  // sources of fds 0..3 (3: -1 without progress)
  int fd_count = 3;                             // 3, or 4 with a progress pipe
  int error_fd = -1;                            // write end of the error pipe
  int fd_limit = 1024;                          // closing stops here when close_range is missing
  bool set_user = false;
  uid_t uid = 0;
  gid_t gid = 0;
};

// Closes [lo, hi]; close_range(2) where the kernel has it (5.9), else one by one up to the
// descriptor limit. Async-signal-safe.
bool close_fds(unsigned lo, unsigned hi, int fd_limit) {
  if (lo > hi) return true;
  if (syscall(SYS_close_range, lo, hi, 0) == 0) return true;
  if (errno != ENOSYS) return false;
  for (unsigned fd = lo; fd <= hi && fd < static_cast<unsigned>(fd_limit); ++fd)
    close(static_cast<int>(fd));
  return true;
}

// Runs in the child between fork and exec: async-signal-safe calls only, no allocation. The
// user switch uses the raw system calls: the child has one thread, and glibc's wrappers would
// try to broadcast the change to the parent's other threads.
[[noreturn]] void exec_child(const ChildPlan& p) {
  auto fail = [&p](int stage) {
    const int report[2] = {stage, errno};
    // Nothing to do if this fails: the parent then sees EOF, then the exit status 127.
    ssize_t ignored = write(p.error_fd, report, sizeof report);
    (void)ignored;
    _exit(127);
  };
  // Dispositions first (a handler inherited from the agent must not run once unblocked), then the
  // mask. sigaction refuses SIGKILL, SIGSTOP and glibc's two internal signals; those need nothing.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int sig = 1; sig < NSIG; ++sig)
    sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  if (sigprocmask(SIG_SETMASK, &none, nullptr) != 0) fail(kStageSignals);
  if (setpgid(0, 0) != 0) fail(kStageSetpgid);
  for (int target = 0; target < p.fd_count; ++target) {
    if (dup2(p.stdio[static_cast<size_t>(target)], target) < 0) fail(kStageDup);
  }
  const unsigned err = static_cast<unsigned>(p.error_fd);
  if (!close_fds(static_cast<unsigned>(p.fd_count), err - 1, p.fd_limit) ||
      !close_fds(err + 1, ~0U, p.fd_limit)) {
    fail(kStageCloseFds);
  }
  if (p.set_user) {
    const gid_t groups[1] = {p.gid};
    if (syscall(SYS_setgroups, 1, groups) != 0) fail(kStageSetgroups);
    if (syscall(SYS_setgid, p.gid) != 0) fail(kStageSetgid);
    if (syscall(SYS_setuid, p.uid) != 0) fail(kStageSetuid);
    // Asking for a user means never root: every id switched, and no way back.
    if (getuid() != p.uid || geteuid() != p.uid || getgid() != p.gid || getegid() != p.gid ||
        syscall(SYS_setuid, 0) == 0) {
      errno = EPERM;
      fail(kStageUserCheck);
    }
  }
  if (chdir(p.cwd.c_str()) != 0) fail(kStageChdir);
  execve(p.exe.c_str(), p.argv.data(), p.envp.data());
  fail(kStageExec);
  _exit(127);  // not reached: fail() exits
}

// ---------------------------------------------------------------------------------------------
// Checks made before fork

std::string rank_prefix(int rank) {
  return "rank " + std::to_string(rank);
}

// What is at `path` for exec: 0 when it is an executable regular file, else an errno.
int exec_problem(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return errno;
  if (!S_ISREG(st.st_mode)) return EISDIR;  // a directory or a device: exec cannot run it
  if (access(path.c_str(), X_OK) != 0) return errno;
  return 0;
}

// argv[0] as exec will find it: a name with '/' is a path (relative to the rank's cwd), any other
// name is searched in `path_var` as execvp does (an empty element is the cwd).
Result<std::string> resolve_executable(const std::string& name, const std::string& cwd,
                                       const std::string& path_var, int rank) {
  const std::string who = rank_prefix(rank) + ": argv[0] '" + name + "'";
  if (name.find('/') != std::string::npos) {
    const std::string path = name[0] == '/' ? name : cwd + "/" + name;
    const int problem = exec_problem(path);
    if (problem == 0) return path;
    if (problem == ENOENT) return Status::not_found(who + ": " + path + ": no such file");
    if (problem == EISDIR) {
      return Status::invalid_argument(who + ": " + path + " is not a regular file");
    }
    return Status::invalid_argument(who + ": " + path + " is not executable (" +
                                    std::strerror(problem) + ")");
  }
  std::string not_executable;  // the first match that exec could not run, as a shell says
  size_t begin = 0;
  while (begin <= path_var.size()) {
    size_t end = path_var.find(':', begin);
    if (end == std::string::npos) end = path_var.size();
    const std::string dir = path_var.substr(begin, end - begin);
    const std::string path = (dir.empty() ? cwd : dir) + "/" + name;
    const int problem = exec_problem(path);
    if (problem == 0) return path;
    if (problem != ENOENT && problem != ENOTDIR && not_executable.empty()) not_executable = path;
    begin = end + 1;
  }
  if (!not_executable.empty()) {
    return Status::invalid_argument(who + ": found " + not_executable + ", not executable");
  }
  return Status::not_found(who + ": not found in PATH=" + path_var);
}

bool valid_env_name(const std::string& name) {
  return !name.empty() && name.find('=') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

// The child's environment: the agent's, minus the names the spawn sets and any progress variable
// of the agent's own, then the spawn's, then KILN_PROGRESS_FD.
Status build_env(const RankSpawn& spawn, ChildPlan* plan) {
  std::map<std::string, std::string> env = spawn.env;
  for (const auto& [k, v] : env) {
    if (!valid_env_name(k) || v.find('\0') != std::string::npos) {
      return Status::invalid_argument(rank_prefix(spawn.rank) + ": bad environment variable '" + k +
                                      "'");
    }
  }
  if (spawn.progress_pipe) env[kProgressFdVariable] = std::to_string(kRankProgressFd);
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string name(entry.substr(0, entry.find('=')));
    if (env.count(name) == 0 && name != kProgressFdVariable) plan->env_text.emplace_back(entry);
  }
  for (const auto& [k, v] : env)
    plan->env_text.push_back(k + "=" + v);
  for (std::string& e : plan->env_text)
    plan->envp.push_back(e.data());
  plan->envp.push_back(nullptr);
  return Status();
}

Status check_user(const RankSpawn& spawn, ChildPlan* plan) {
  if (!spawn.uid && !spawn.gid) return Status();
  const std::string who = rank_prefix(spawn.rank);
  if (!spawn.uid || !spawn.gid) {
    return Status::invalid_argument(who + ": give both uid and gid to run as a user, or neither");
  }
  if (*spawn.uid == 0 || *spawn.gid == 0) {
    return Status::invalid_argument(who + ": uid " + std::to_string(*spawn.uid) + " gid " +
                                    std::to_string(*spawn.gid) +
                                    ": a rank given a user never runs as root");
  }
  if (geteuid() != 0) {
    return Status::invalid_argument(who + ": running as uid " + std::to_string(*spawn.uid) +
                                    " needs the agent to run as root; it runs as uid " +
                                    std::to_string(geteuid()));
  }
  plan->set_user = true;
  plan->uid = *spawn.uid;
  plan->gid = *spawn.gid;
  return Status();
}

// Validates `spawn` and fills everything of `plan` but the descriptors.
Status plan_child(const RankSpawn& spawn, ChildPlan* plan) {
  const std::string who = rank_prefix(spawn.rank);
  if (spawn.argv.empty() || spawn.argv[0].empty()) {
    return Status::invalid_argument(who + ": empty argv");
  }
  for (const std::string& a : spawn.argv) {
    if (a.find('\0') != std::string::npos) {
      return Status::invalid_argument(who + ": an argument of " + spawn.argv[0] +
                                      " holds a NUL byte");
    }
  }
  struct stat st {};
  if (spawn.cwd.empty()) return Status::invalid_argument(who + ": no cwd");
  if (stat(spawn.cwd.c_str(), &st) != 0) {
    return Status(errno == ENOENT ? StatusCode::kNotFound : StatusCode::kIoError,
                  who + ": cwd " + spawn.cwd + ": " + std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::invalid_argument(who + ": cwd " + spawn.cwd + " is not a directory");
  }
  KILN_RETURN_IF_ERROR(check_user(spawn, plan));
  std::string path_var = "/usr/local/bin:/usr/bin:/bin";  // execvp's default
  if (const auto it = spawn.env.find("PATH"); it != spawn.env.end()) {
    path_var = it->second;
  } else if (const char* agent_path = std::getenv("PATH"); agent_path != nullptr) {
    path_var = agent_path;
  }
  KILN_ASSIGN_OR_RETURN(plan->exe,
                        resolve_executable(spawn.argv[0], spawn.cwd, path_var, spawn.rank));
  plan->cwd = spawn.cwd;
  plan->argv_text = spawn.argv;
  for (std::string& a : plan->argv_text)
    plan->argv.push_back(a.data());
  plan->argv.push_back(nullptr);
  KILN_RETURN_IF_ERROR(build_env(spawn, plan));
  struct rlimit limit {};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    plan->fd_limit = static_cast<int>(std::min<rlim_t>(limit.rlim_cur, 1 << 20));
  }
  return Status();
}

int open_pidfd(pid_t pid) {
  const long fd = syscall(SYS_pidfd_open, pid, 0);
  return fd < 0 ? -1 : static_cast<int>(fd);
}

// Waits for the child's report on the error pipe: OK on EOF (exec happened), else the child's
// failure. REQUIRES: the write end is closed in this process.
Status await_exec(int error_fd, const ChildPlan& plan, int rank) {
  const int64_t deadline_ns = monotonic_now_ns() + kExecWaitMs * 1'000'000;
  int report[2] = {0, 0};
  size_t got = 0;
  while (got < sizeof report) {
    const int64_t left_ms = (deadline_ns - monotonic_now_ns()) / 1'000'000;
    if (left_ms <= 0) {
      return Status::timeout(rank_prefix(rank) + ": " + plan.exe + " did not reach exec in " +
                             std::to_string(kExecWaitMs) + " ms (cwd " + plan.cwd +
                             " on a hung file system?)");
    }
    pollfd pfd{error_fd, POLLIN, 0};
    const int ready = poll(&pfd, 1, static_cast<int>(left_ms));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return errno_status(rank_prefix(rank) + ": poll", errno);
    if (ready == 0) continue;
    const ssize_t n = read(error_fd, reinterpret_cast<char*>(report) + got, sizeof report - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_status(rank_prefix(rank) + ": read the exec report", errno);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got == 0) return Status();  // exec closed the pipe
  if (got < sizeof report) {
    return Status::io_error(rank_prefix(rank) + ": a short report from the child before exec");
  }
  const int stage = report[0], err = report[1];
  std::string what = rank_prefix(rank) + ": " + stage_name(stage);
  if (stage == kStageExec) what += " " + plan.exe;
  if (stage == kStageChdir) what += " " + plan.cwd;
  if (plan.set_user && stage >= kStageChdir) what += " as uid " + std::to_string(plan.uid);
  what += std::string(": ") + std::strerror(err);
  if (stage == kStageExec && err == ENOENT) what += " (a script whose interpreter is missing?)";
  const bool not_found = err == ENOENT && (stage == kStageExec || stage == kStageChdir);
  return Status(not_found ? StatusCode::kNotFound : StatusCode::kInvalidArgument, what);
}

// ---------------------------------------------------------------------------------------------
// The supervisor's state

// A line being put together from a stream's reads.
struct LineBuffer {
  std::string partial;      // at most kRankLogLineBytesMax bytes
  bool discarding = false;  // the line was cut: drop up to its newline
};

struct RankState {
  std::string key;
  int rank = 0;
  uint64_t serial = 0;
  bool starting = true;  // reserved by start(); no process or descriptors yet
  pid_t pid = -1;
  UniqueFd pidfd;
  std::array<UniqueFd, kStreams> pipes;  // read ends: stdout, stderr, progress
  std::array<LineBuffer, kStreams> lines;
  std::unique_ptr<RankLogWriter> log;
  RankProgress progress;
  int64_t started_ns = 0;
  bool stop_requested = false;
  int64_t kill_at_ns = INT64_MAX;  // SIGKILL the group then (with stop_requested)
  bool killed = false;             // the grace ran out and the group got SIGKILL
  bool reaped = false;
  RankExitInfo exit;             // valid when reaped
  std::string last_stderr;       // RankExitInfo::last_stderr, as it goes
  uint64_t started_kmsg_us = 0;  // its start on the kernel log's clock (oom_kill.h)
};

}  // namespace

std::string RankExitInfo::describe() const {
  std::string s = rank_prefix(rank) + " (pid " + std::to_string(pid) + ")";
  if (exited) {
    s += " exited with code " + std::to_string(code);
    if (code == kExitStoppedResumable) s += " (stopped, resumable)";
  } else if (code < 0) {
    s += " ended, its status unknown (reaped by someone else)";
  } else {
    const char* name = sigabbrev_np(code);
    s += " was killed by signal " + std::to_string(code) + " (SIG" +
         (name != nullptr ? name : "?") + ")";
    if (oom_killed) s += " from the kernel's OOM killer (out of memory)";
  }
  if (stopped_by_agent) s += " after a stop request";
  return s;
}

struct RankSupervisor::Impl {
  explicit Impl(Options o)
      : options(std::move(o)), warn_limiter(kWarnIntervalMs, kWarnBurst, *options.clock) {
    read_buf.resize(kReadChunkBytes);
  }

  Options options;
  UniqueFd epoll;
  UniqueFd wake;  // eventfd
  std::thread thread;
  std::atomic<bool> shutdown{false};
  LogRateLimiter warn_limiter;
  std::vector<char> read_buf;  // used under `mu` only (the thread, forget(), the destructor)

  mutable std::mutex mu;
  std::map<std::string, std::unique_ptr<RankState>> ranks;  // GUARDED_BY(mu)
  std::unordered_map<uint64_t, RankState*> by_serial;       // GUARDED_BY(mu)
  uint64_t next_serial = 1;                                 // GUARDED_BY(mu)

  int64_t now_ns() const { return options.clock->monotonic_ns(); }
  void wake_thread() {
    const uint64_t one = 1;
    ssize_t ignored = write(wake.get(), &one, sizeof one);  // a full counter wakes it anyway
    (void)ignored;
  }
  void warn(std::string_view msg, std::initializer_list<LogField> fields) {
    int64_t suppressed = 0;
    if (warn_limiter.allow(&suppressed)) {
      options.log.warn(msg, fields);
      if (suppressed > 0) options.log.warn("warnings suppressed", {{"count", suppressed}});
    }
  }

  void run();
  int wait_timeout_ms();                                                 // REQUIRES: mu held
  void handle(const epoll_event& ev, std::vector<RankExitInfo>* exits);  // REQUIRES: mu held
  void read_stream(RankState* r, int stream, bool* eof);                 // REQUIRES: mu held
  void consume(RankState* r, int stream, const char* data, size_t size);
  void emit(RankState* r, int stream, bool truncated);
  void on_progress_line(RankState* r, std::string_view line, bool truncated);
  void close_stream(RankState* r, int stream);  // flushes, closes
  void drain_and_reap(RankState* r, std::vector<RankExitInfo>* exits);
  void check_without_pidfd(std::vector<RankExitInfo>* exits);
  void fire_kill_deadlines();
  void kill_group(RankState* r, int sig);
};

void RankSupervisor::Impl::emit(RankState* r, int stream, bool truncated) {
  LineBuffer& lb = r->lines[static_cast<size_t>(stream)];
  if (stream == static_cast<int>(Kind::kProgress)) {
    on_progress_line(r, lb.partial, truncated);
    lb.partial.clear();
    return;
  }
  if (stream == static_cast<int>(Kind::kStderr) && !lb.partial.empty()) {
    r->last_stderr.assign(lb.partial, 0, std::min(lb.partial.size(), kLastStderrBytes));
  }
  if (r->log) {
    const RankStream which = stream == 0 ? RankStream::kStdout : RankStream::kStderr;
    Status s = r->log->append(which, lb.partial, truncated);
    if (!s.ok()) {
      warn("rank log write failed; the line is lost",
           {{"key", r->key}, {"rank", r->rank}, {"error", s.to_string()}});
    }
  }
  lb.partial.clear();
}

// Splits `data` into lines (see "Output lines" in the header): complete lines are emitted, a
// line that passes kRankLogLineBytesMax is emitted cut and its remainder skipped.
void RankSupervisor::Impl::consume(RankState* r, int stream, const char* data, size_t size) {
  LineBuffer& lb = r->lines[static_cast<size_t>(stream)];
  size_t pos = 0;
  while (pos < size) {
    const void* nl = std::memchr(data + pos, '\n', size - pos);
    const size_t seg_end =
        nl != nullptr ? static_cast<size_t>(static_cast<const char*>(nl) - data) : size;
    if (!lb.discarding) {
      const size_t room = kRankLogLineBytesMax - lb.partial.size();
      const size_t take = std::min(seg_end - pos, room);
      lb.partial.append(data + pos, take);
      if (take < seg_end - pos) {
        emit(r, stream, /*truncated=*/true);
        lb.discarding = true;
      }
    }
    if (nl == nullptr) break;
    if (!lb.discarding) emit(r, stream, /*truncated=*/false);
    lb.discarding = false;
    pos = seg_end + 1;
  }
}

void RankSupervisor::Impl::on_progress_line(RankState* r, std::string_view line, bool truncated) {
  RankProgress& p = r->progress;
  if (p.done) return;  // the rank said it finished; later lines change nothing
  if (truncated) {
    ++p.lines_bad;
    return;
  }
  Result<nlohmann::json> j = parse_json_bounded(line, kProgressJsonLimits, "progress line");
  if (!j.ok() || !j->is_object()) {
    ++p.lines_bad;
    return;
  }
  auto number = [&j](const char* key) {
    const auto it = j->find(key);
    return it != j->end() && it->is_number() ? it->get<double>() : 0.0;
  };
  const auto event = j->find("event");
  const auto step = j->find("step");
  if (event != j->end() && event->is_string() && *event == "done") {
    p.done = true;
  } else if (step != j->end() && step->is_number_integer() && step->get<int64_t>() >= 0) {
    p.step = step->get<int64_t>();
    p.step_ms = number("step_ms");
    // A loss that is not finite is written as null: keep it NaN, an alert's business.
    const auto loss = j->find("loss");
    p.loss = loss != j->end() && loss->is_null() ? std::numeric_limits<double>::quiet_NaN()
                                                 : number("loss");
    p.tokens_per_s = number("tokens_per_s");
    p.comm_exposed_ms = number("comm_exposed_ms");
    // For the curves, an absent or null field is "no value" (NaN), not 0.
    auto value = [&j](const char* key) {
      const auto it = j->find(key);
      return it != j->end() && it->is_number() ? it->get<double>() : kNoValue;
    };
    RankProgress::Recent recent;
    recent.sample.step = p.step;
    recent.sample.step_ms = p.step_ms;
    recent.sample.loss = value("loss");
    recent.sample.val_loss = value("val_loss");
    recent.sample.lr = value("lr");
    recent.sample.tokens_per_s = value("tokens_per_s");
    recent.sample.mfu = value("mfu");
    recent.sample.comm_exposed_ms = value("comm_exposed_ms");
    recent.sample.ckpt_stall_ms = value("ckpt_stall_ms");
    recent.arrived_mono_ns = now_ns();
    if (p.recent.size() == kRecentStepsMax) p.recent.pop_front();
    p.recent.push_back(recent);
  } else {
    ++p.lines_bad;
    return;
  }
  p.updated_mono_ns = now_ns();
}

void RankSupervisor::Impl::close_stream(RankState* r, int stream) {
  UniqueFd& fd = r->pipes[static_cast<size_t>(stream)];
  if (!fd.valid()) return;
  epoll_ctl(epoll.get(), EPOLL_CTL_DEL, fd.get(), nullptr);
  fd.reset();
  LineBuffer& lb = r->lines[static_cast<size_t>(stream)];
  if (!lb.partial.empty() && !lb.discarding) emit(r, stream, /*truncated=*/false);
  lb.partial.clear();
  lb.discarding = false;
}

// Reads what the stream holds now (at most kDrainBytesMax); closes it at EOF or on an error.
void RankSupervisor::Impl::read_stream(RankState* r, int stream, bool* eof) {
  *eof = false;
  UniqueFd& fd = r->pipes[static_cast<size_t>(stream)];
  size_t total = 0;
  while (fd.valid() && total < kDrainBytesMax) {
    const ssize_t n = read(fd.get(), read_buf.data(), read_buf.size());
    if (n > 0) {
      consume(r, stream, read_buf.data(), static_cast<size_t>(n));
      total += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    // 0: every writer closed it (the rank and whatever it started). An error: nothing more can
    // come from it either.
    *eof = true;
    close_stream(r, stream);
  }
}

void RankSupervisor::Impl::kill_group(RankState* r, int sig) {
  // REQUIRES (the invariant in the header): r is not reaped, so the group id is still r's.
  KILN_CHECK(!r->reaped && r->pid > 0) << r->key;
  killpg(r->pid, sig);  // ESRCH: the group is gone already
}

// The rank's main process has ended (a zombie now): read what its pipes hold, kill what is left
// of its group while the zombie still pins the group id, reap it and record how it ended.
void RankSupervisor::Impl::drain_and_reap(RankState* r, std::vector<RankExitInfo>* exits) {
  bool eof = false;
  for (int s = 0; s < kStreams; ++s)
    read_stream(r, s, &eof);
  kill_group(r, SIGKILL);
  siginfo_t info{};
  int rc = 0;
  do {
    rc = r->pidfd.valid() ? waitid(P_PIDFD, static_cast<id_t>(r->pidfd.get()), &info, WEXITED)
                          : waitid(P_PID, static_cast<id_t>(r->pid), &info, WEXITED);
  } while (rc != 0 && errno == EINTR);
  const int wait_errno = rc != 0 ? errno : 0;
  RankExitInfo& e = r->exit;
  e.key = r->key;
  e.rank = r->rank;
  e.pid = r->pid;
  e.stopped_by_agent = r->stop_requested;
  e.runtime_ms = (now_ns() - r->started_ns) / 1'000'000;
  // Valid UTF-8, cut on a character: it travels in JSON, whose writer throws on anything else.
  e.last_stderr = utf8_text(r->last_stderr, kLastStderrBytes);
  if (rc != 0) {
    // ECHILD: something else in this process reaped it (a waitpid(-1)); its status is lost.
    e.exited = false;
    e.code = -1;
    warn("a rank was reaped elsewhere; its exit status is unknown",
         {{"key", r->key}, {"pid", r->pid}, {"error", std::strerror(wait_errno)}});
  } else {
    e.exited = info.si_code == CLD_EXITED;
    e.code = info.si_status;
    // A SIGKILL Kiln did not send: the kernel's log says whether its OOM killer did.
    if (!e.exited && e.code == SIGKILL && !r->killed) {
      e.oom_killed = oom_killed(r->pid, r->started_kmsg_us);
    }
  }
  r->reaped = true;
  if (r->pidfd.valid()) {
    epoll_ctl(epoll.get(), EPOLL_CTL_DEL, r->pidfd.get(), nullptr);
    r->pidfd.reset();
  }
  exits->push_back(e);
}

void RankSupervisor::Impl::handle(const epoll_event& ev, std::vector<RankExitInfo>* exits) {
  if (ev.data.u64 == kWakeTag) {
    uint64_t count = 0;
    ssize_t ignored = read(wake.get(), &count, sizeof count);
    (void)ignored;
    return;
  }
  const auto it = by_serial.find(ev.data.u64 >> 2);
  if (it == by_serial.end()) return;  // forgotten since the event was queued
  RankState* r = it->second;
  const auto kind = static_cast<Kind>(ev.data.u64 & 3);
  if (kind == Kind::kPidfd) {
    if (!r->reaped) drain_and_reap(r, exits);
    return;
  }
  bool eof = false;
  read_stream(r, static_cast<int>(kind), &eof);
}

// Without a pidfd, an exit is seen by polling waitid without reaping (WNOWAIT keeps the zombie,
// and with it the group id, until drain_and_reap).
void RankSupervisor::Impl::check_without_pidfd(std::vector<RankExitInfo>* exits) {
  for (auto& [key, r] : ranks) {
    if (r->starting || r->reaped || r->pidfd.valid()) continue;
    siginfo_t info{};
    if (waitid(P_PID, static_cast<id_t>(r->pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid == r->pid) {
      drain_and_reap(r.get(), exits);
    }
  }
}

void RankSupervisor::Impl::fire_kill_deadlines() {
  const int64_t now = now_ns();
  for (auto& [key, r] : ranks) {
    if (r->starting || r->reaped || !r->stop_requested || r->killed || now < r->kill_at_ns) {
      continue;
    }
    kill_group(r.get(), SIGKILL);
    r->killed = true;
  }
}

int RankSupervisor::Impl::wait_timeout_ms() {
  int64_t wait_ms = kIdleWaitMs;
  if (options.clock != &system_clock()) wait_ms = RankSupervisor::kFakeClockPollMs;
  const int64_t now = now_ns();
  for (const auto& [key, r] : ranks) {
    if (r->starting || r->reaped) continue;
    if (!r->pidfd.valid()) wait_ms = std::min<int64_t>(wait_ms, kNoPidfdPollMs);
    if (r->stop_requested && !r->killed) {
      // Rounded up, so the wake-up is never before the deadline.
      wait_ms =
          std::min(wait_ms, std::max<int64_t>(0, (r->kill_at_ns - now + 999'999) / 1'000'000));
    }
  }
  return static_cast<int>(wait_ms);
}

void RankSupervisor::Impl::run() {
  std::array<epoll_event, kEventsPerWait> events{};
  std::vector<RankExitInfo> exits;
  while (!shutdown.load()) {
    int timeout_ms = 0;
    {
      std::lock_guard lock(mu);
      timeout_ms = wait_timeout_ms();
    }
    const int n = epoll_wait(epoll.get(), events.data(), kEventsPerWait, timeout_ms);
    if (n < 0 && errno != EINTR) {
      // Only a broken epoll descriptor does this; waiting on the timer keeps the loop from
      // spinning while the deadlines still fire.
      warn("epoll_wait failed", {{"error", std::strerror(errno)}});
      pollfd none{-1, 0, 0};
      poll(&none, 1, kNoPidfdPollMs);
    }
    exits.clear();
    {
      std::lock_guard lock(mu);
      for (int i = 0; i < n; ++i)
        handle(events[static_cast<size_t>(i)], &exits);
      check_without_pidfd(&exits);
      fire_kill_deadlines();
    }
    if (options.on_exit) {
      for (const RankExitInfo& e : exits)
        options.on_exit(e);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Public methods

RankSupervisor::RankSupervisor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<RankSupervisor>> RankSupervisor::create(Options options) {
  if (options.ranks_max < 1 || options.ranks_max > kRanksMaxLimit) {
    return Status::invalid_argument("rank supervisor: ranks_max " +
                                    std::to_string(options.ranks_max) + " is outside [1, " +
                                    std::to_string(kRanksMaxLimit) + "]");
  }
  if (options.clock == nullptr) return Status::invalid_argument("rank supervisor: no clock");
  auto impl = std::make_unique<Impl>(std::move(options));
  impl->epoll.reset(epoll_create1(EPOLL_CLOEXEC));
  if (!impl->epoll.valid()) return errno_status("rank supervisor: epoll_create1", errno);
  impl->wake.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!impl->wake.valid()) return errno_status("rank supervisor: eventfd", errno);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeTag;
  if (epoll_ctl(impl->epoll.get(), EPOLL_CTL_ADD, impl->wake.get(), &ev) != 0) {
    return errno_status("rank supervisor: epoll_ctl", errno);
  }
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<RankSupervisor>(new RankSupervisor(std::move(impl)));
}

RankSupervisor::~RankSupervisor() {
  Impl& d = *impl_;
  d.shutdown.store(true);
  d.wake_thread();
  d.thread.join();
  std::lock_guard lock(d.mu);
  for (auto& [key, r] : d.ranks) {
    if (!r->starting && !r->reaped) d.kill_group(r.get(), SIGKILL);
  }
  // SIGKILL ends a process unless it sits in an uninterruptible wait (a hung file system); the
  // destructor gives them kDestroyReapMs in all, then leaves the rest as zombies.
  const int64_t deadline_ns = monotonic_now_ns() + kDestroyReapMs * 1'000'000;
  std::vector<RankExitInfo> ignored;
  for (auto& [key, r] : d.ranks) {
    if (r->starting || r->reaped) continue;
    if (r->pidfd.valid()) {
      pollfd pfd{r->pidfd.get(), POLLIN, 0};
      const int64_t left_ms = std::max<int64_t>(0, (deadline_ns - monotonic_now_ns()) / 1'000'000);
      if (poll(&pfd, 1, static_cast<int>(left_ms)) != 1) {
        d.options.log.warn("rank did not end after SIGKILL; left unreaped",
                           {{"key", r->key}, {"pid", r->pid}});
        continue;
      }
    }
    d.drain_and_reap(r.get(), &ignored);
  }
  for (auto& [key, r] : d.ranks) {
    for (int s = 0; s < kStreams; ++s)
      d.close_stream(r.get(), s);
  }
}

Result<pid_t> RankSupervisor::start(const std::string& key, RankSpawn spawn) {
  Impl& d = *impl_;
  const std::string who = rank_prefix(spawn.rank);
  if (key.empty()) return Status::invalid_argument(who + ": empty key");
  ChildPlan plan;
  KILN_RETURN_IF_ERROR(plan_child(spawn, &plan));
  RankLogOptions log_options;
  log_options.path = spawn.log_path;
  log_options.rank = spawn.rank;
  log_options.bytes_max = spawn.log_bytes_max;
  log_options.clock = d.options.clock;
  Result<std::unique_ptr<RankLogWriter>> log = RankLogWriter::open(log_options);
  if (!log.ok()) return log.status().with_context(who + ": log");

  // Reserve the key, so a concurrent start() with it fails, then build the process unlocked.
  RankState* r = nullptr;
  {
    std::lock_guard lock(d.mu);
    if (d.ranks.count(key) > 0) {
      return Status::invalid_argument(who + ": key '" + key + "' is already held");
    }
    if (d.ranks.size() >= d.options.ranks_max) {
      return Status::unavailable(who + ": " + std::to_string(d.ranks.size()) +
                                 " ranks held, the most this supervisor takes (ranks_max)");
    }
    auto state = std::make_unique<RankState>();
    state->key = key;
    state->rank = spawn.rank;
    state->serial = d.next_serial++;
    r = state.get();
    d.ranks.emplace(key, std::move(state));
  }
  auto release_key = [&d, &key] {
    std::lock_guard lock(d.mu);
    d.ranks.erase(key);
  };

  // Descriptors: the parent keeps the read ends; the child gets /dev/null, the write ends and
  // the error pipe. All are close-on-exec here; the child's dup2 copies are not.
  std::array<UniqueFd, kStreams> read_ends, write_ends;
  UniqueFd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  UniqueFd error_read, error_write;
  Status s = dev_null.valid() ? raise_fd(&dev_null) : errno_status("open /dev/null", errno);
  const int streams = spawn.progress_pipe ? kStreams : 2;
  for (int i = 0; i < streams && s.ok(); ++i)
    s = make_pipe(&read_ends[static_cast<size_t>(i)], &write_ends[static_cast<size_t>(i)]);
  if (s.ok()) s = make_pipe(&error_read, &error_write);
  if (!s.ok()) {
    release_key();
    return s.with_context(who);
  }
  plan.stdio = {dev_null.get(), write_ends[0].get(), write_ends[1].get(),
                spawn.progress_pipe ? write_ends[2].get() : -1};
  plan.fd_count = spawn.progress_pipe ? 4 : 3;
  plan.error_fd = error_write.get();

  const int64_t started_ns = d.now_ns();
  const pid_t pid = fork();
  if (pid == 0) exec_child(plan);
  if (pid < 0) {
    const int err = errno;
    release_key();
    return errno_status(who + ": fork", err);
  }
  // The child does the same; doing it here too means the group exists before start() returns
  // (EACCES once the child has exec'd, ESRCH if it already died: both fine).
  setpgid(pid, pid);
  UniqueFd pidfd(open_pidfd(pid));
  dev_null.reset();
  error_write.reset();
  for (UniqueFd& w : write_ends)
    w.reset();
  s = await_exec(error_read.get(), plan, spawn.rank);
  if (!s.ok()) {
    // The child exits (127) after its report, or is killed when it hangs before exec.
    if (s.is_timeout()) kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    release_key();
    return s;
  }

  std::lock_guard lock(d.mu);
  r->starting = false;
  r->pid = pid;
  r->pidfd = std::move(pidfd);
  r->started_ns = started_ns;
  r->started_kmsg_us = kmsg_clock_us();
  r->log = std::move(*log);
  for (int i = 0; i < streams; ++i) {
    UniqueFd& fd = read_ends[static_cast<size_t>(i)];
    fcntl(fd.get(), F_SETFL, fcntl(fd.get(), F_GETFL) | O_NONBLOCK);
    r->lines[static_cast<size_t>(i)].partial.reserve(kRankLogLineBytesMax);
    r->pipes[static_cast<size_t>(i)] = std::move(fd);
  }
  // From here the thread sees the rank. A registration that fails leaves that stream unread, or
  // (pidfd) makes the exit seen by polling instead.
  auto watch = [&d, r](int fd, Kind kind) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag(r->serial, kind);
    return epoll_ctl(d.epoll.get(), EPOLL_CTL_ADD, fd, &ev) == 0;
  };
  for (int i = 0; i < streams; ++i) {
    if (!watch(r->pipes[static_cast<size_t>(i)].get(), static_cast<Kind>(i))) {
      d.warn("cannot watch a rank's pipe", {{"key", key}, {"error", std::strerror(errno)}});
    }
  }
  if (r->pidfd.valid() && !watch(r->pidfd.get(), Kind::kPidfd)) r->pidfd.reset();
  d.by_serial.emplace(r->serial, r);
  // A stop() that came while the rank was starting takes effect now.
  if (r->stop_requested) {
    r->killed = r->kill_at_ns <= d.now_ns();
    d.kill_group(r, r->killed ? SIGKILL : SIGTERM);
  }
  d.wake_thread();
  return pid;
}

Status RankSupervisor::stop(const std::string& key, int64_t grace_ms) {
  Impl& d = *impl_;
  std::lock_guard lock(d.mu);
  const auto it = d.ranks.find(key);
  if (it == d.ranks.end()) return Status::not_found("stop: no rank '" + key + "'");
  RankState* r = it->second.get();
  if (r->reaped) return Status();
  const int64_t now = d.now_ns();
  // A grace beyond a day is no grace a caller means; the cap keeps the sum below INT64_MAX.
  constexpr int64_t kGraceMsMax = 24LL * 3600 * 1000;
  const int64_t kill_at = grace_ms <= 0 ? now : now + std::min(grace_ms, kGraceMsMax) * 1'000'000;
  const bool first = !r->stop_requested;
  r->stop_requested = true;
  r->kill_at_ns = std::min(r->kill_at_ns, kill_at);
  if (r->starting) return Status();  // start() sends the signal once the process exists
  if (!r->killed && r->kill_at_ns <= now) {
    d.kill_group(r, SIGKILL);
    r->killed = true;
  } else if (first) {
    d.kill_group(r, SIGTERM);
  }
  d.wake_thread();  // the grace timer may now be the nearest deadline
  return Status();
}

std::optional<RankProgress> RankSupervisor::progress(const std::string& key) const {
  std::lock_guard lock(impl_->mu);
  const auto it = impl_->ranks.find(key);
  if (it == impl_->ranks.end()) return std::nullopt;
  return it->second->progress;
}

std::vector<std::string> RankSupervisor::running_keys() const {
  std::lock_guard lock(impl_->mu);
  std::vector<std::string> keys;
  for (const auto& [key, r] : impl_->ranks) {
    if (!r->starting && !r->reaped) keys.push_back(key);
  }
  return keys;
}

std::optional<RankExitInfo> RankSupervisor::exit_info(const std::string& key) const {
  std::lock_guard lock(impl_->mu);
  const auto it = impl_->ranks.find(key);
  if (it == impl_->ranks.end() || !it->second->reaped) return std::nullopt;
  return it->second->exit;
}

Status RankSupervisor::forget(const std::string& key) {
  Impl& d = *impl_;
  std::lock_guard lock(d.mu);
  const auto it = d.ranks.find(key);
  if (it == d.ranks.end()) return Status::not_found("forget: no rank '" + key + "'");
  RankState* r = it->second.get();
  if (!r->reaped) {
    return Status::invalid_argument("forget: rank '" + key + "' is still " +
                                    (r->starting ? "starting" : "running"));
  }
  // Output still in the pipes (from processes that left the rank's group) is read first.
  bool eof = false;
  for (int s = 0; s < kStreams; ++s) {
    d.read_stream(r, s, &eof);
    d.close_stream(r, s);
  }
  d.by_serial.erase(r->serial);
  d.ranks.erase(it);
  return Status();
}

}  // namespace kiln::sched
