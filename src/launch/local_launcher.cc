// See include/kiln/launch/local_launcher.h.
#include <kiln/launch/local_launcher.h>

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <kiln/base/checksum.h>
#include <kiln/base/clock.h>
#include <kiln/base/cpu_set.h>
#include <kiln/base/cpu_topology.h>
#include <kiln/comm/machine_profile.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <random>

extern char** environ;

namespace kiln::launch {
namespace {

// After a failure and the grace period, ranks still running get SIGUSR1 (dump the flight
// recorder) and this long to write it before SIGKILL.
constexpr int64_t kDumpWaitMs = 1'000;

// A pidfd becomes readable when the process ends; -1 when the kernel has none (before 5.3): the
// wait loop then only wakes on its timer.
int open_pidfd(pid_t pid) {
  const long fd = syscall(SYS_pidfd_open, pid, 0);
  return fd < 0 ? -1 : static_cast<int>(fd);
}

std::string random_token() {
  std::random_device device;
  std::string token;
  for (int i = 0; i < 4; ++i) {
    token += checksum_hex((static_cast<uint64_t>(device()) << 32) | device());
  }
  return token;
}

}  // namespace

std::string RankExit::describe() const {
  std::string s = "rank " + std::to_string(rank) + " (pid " + std::to_string(pid) + ")";
  if (exited) return s + " exited with code " + std::to_string(code);
  const char* name = sigabbrev_np(code);
  return s + " was killed by signal " + std::to_string(code) + " (SIG" +
         (name != nullptr ? name : "?") + ")" + (killed_by_launcher ? " by the launcher" : "");
}

bool JobResult::stopped() const {
  if (!ok()) return false;
  for (const RankExit& e : ranks) {
    if (e.stopped()) return true;
  }
  return false;
}

namespace {

void cache_machine_profile(const Logger& log) {
  Result<std::string> path = comm::machine_profile_path_from_process_env();
  if (!path.ok() || path->empty()) return;  // a bad value fails each rank's communicator
  comm::ProfileCacheOptions cache;
  cache.path = *path;
  Result<comm::CachedProfile> got = comm::load_or_measure_machine_profile(cache);
  if (!got.ok()) {
    log.warn("machine profile unavailable", {{"error", got.status().to_string()}});
    return;
  }
  const comm::MachineProfile& p = got->profile;
  log.info(got->measured ? "machine profile measured" : "machine profile cached",
           {{"path", got->path},
            {"handoff_ns_p50", p.handoff_ns.p50},
            {"wakeup_ns_p99", p.wakeup_ns.p99},
            {"copy_gbps", p.copy_gbps},
            {"reduce_gbps", p.reduce_gbps},
            {"measure_ms", p.measure_ms}});
}

}  // namespace

Result<std::unique_ptr<LocalJob>> LocalJob::start(const LaunchOptions& options, Logger log) {
  if (options.world_size < 1) return Status::invalid_argument("world size must be at least 1");
  if (options.argv.empty()) return Status::invalid_argument("no command to launch");
  if (options.threads_per_rank < 1) {
    return Status::invalid_argument("threads per rank must be at least 1, not " +
                                    std::to_string(options.threads_per_rank));
  }
  if (options.attempt < 0 || options.attempt > kAttemptMax) {
    return Status::invalid_argument("attempt " + std::to_string(options.attempt) +
                                    " is out of range [0, " + std::to_string(kAttemptMax) + "]");
  }
  std::unique_ptr<LocalJob> job(new LocalJob());
  job->options_ = options;
  job->log_ = log;
  if (job->options_.job_token.empty()) job->options_.job_token = random_token();
  job->job_.id = options.job_id.empty() ? "local-" + std::to_string(getpid()) + "-" +
                                              std::to_string(std::time(nullptr))
                                        : options.job_id;
  KILN_RETURN_IF_ERROR(check_job_id(job->job_.id, "job id"));
  job->job_.attempt = options.attempt;
  // Planned before anything starts, so a bad --cpu-bind list costs nothing. The topology covers
  // exactly the CPUs the launcher may use, which it returns to once the ranks are spawned.
  KILN_ASSIGN_OR_RETURN(const CpuTopology topology, this_machine_topology());
  const CpuSet launcher_cpus = topology.all_cpus();
  KILN_ASSIGN_OR_RETURN(
      job->placement_,
      plan_placement(topology, options.world_size, options.threads_per_rank, options.cpu_bind));
  log.info("placement",
           {{"cpu_bind", options.cpu_bind.to_string()}, {"summary", job->placement_.summary}});
  // Measure the machine for comm's tuning now, while no rank runs, so that ranks read the cache
  // instead of measuring while their peers start (kiln/comm/machine_profile.h).
  if (options.world_size > 1) cache_machine_profile(log);
  comm::StoreServerOptions store_options;
  store_options.token = job->options_.job_token;
  KILN_ASSIGN_OR_RETURN(job->store_, comm::StoreServer::start(store_options, log.child("store")));
  job->store_address_ = "127.0.0.1:" + std::to_string(job->store_->port());

  // The launcher may block or handle these (kiln's CLI takes them on a signal thread); a rank
  // starts with none blocked and each at its default action, as if run from a shell.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig : {SIGINT, SIGTERM, SIGUSR1})
    sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  std::vector<char*> argv;
  for (const std::string& a : options.argv)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (int r = 0; r < options.world_size; ++r) {
    RankEnv contract;
    contract.identity.rank = r;
    contract.identity.world_size = options.world_size;
    contract.identity.store_address = job->store_address_;
    contract.identity.job_token = job->options_.job_token;
    contract.job = job->job_;
    if (!options.hosts.empty()) {
      const size_t h = static_cast<size_t>(r) % options.hosts.size();
      contract.identity.host = options.hosts[h];
      contract.identity.node_id = static_cast<int>(h);
      contract.identity.local_rank = static_cast<int>(r / options.hosts.size());
    } else {
      contract.identity.node_id = 0;
      contract.identity.local_rank = r;
    }
    std::map<std::string, std::string> env = options.env;
    for (auto& [k, v] : rank_env_vars(contract))
      env[k] = v;
    // Every rank runs on this machine, so TCP links (fake hosts, --transport tcp) go over
    // loopback whether or not the host name resolves (comm/comm_env.h).
    env.emplace("KILN_COMM_ADDR", "127.0.0.1");
    if (!job->placement_.rank_cpus.empty()) {
      env["KILN_CPUS"] = job->placement_.rank_cpus[static_cast<size_t>(r)].to_string();
    }
    // The parent's environment, minus anything we set, then ours.
    std::vector<std::string> entries;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry(*e);
      const std::string name = entry.substr(0, entry.find('='));
      if (env.count(name) == 0) entries.push_back(entry);
    }
    for (const auto& [k, v] : env)
      entries.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (std::string& e : entries)
      envp.push_back(e.data());
    envp.push_back(nullptr);
    Status bound;
    if (!job->placement_.rank_cpus.empty()) {
      bound = bind_this_thread(job->placement_.rank_cpus[static_cast<size_t>(r)]);
    }
    pid_t pid = 0;
    const int rc =
        bound.ok() ? posix_spawn(&pid, argv[0], nullptr, &attr, argv.data(), envp.data()) : 0;
    if (!bound.ok() || rc != 0) {
      posix_spawnattr_destroy(&attr);
      (void)bind_this_thread(launcher_cpus);
      job->kill_all(SIGKILL);
      if (!bound.ok()) {
        return Status::io_error("rank " + std::to_string(r) + ": " + bound.message());
      }
      return Status::io_error("spawn rank " + std::to_string(r) + " (" + options.argv[0] +
                              "): " + std::strerror(rc));
    }
    job->pids_.push_back(pid);
    job->pidfds_.push_back(open_pidfd(pid));
    job->reaped_.push_back(false);
    log.info("rank started",
             {{"rank", r},
              {"pid", pid},
              {"job_id", job->job_.id},
              {"attempt", job->job_.attempt},
              {"cpus", job->placement_.rank_cpus.empty()
                           ? std::string("any")
                           : job->placement_.rank_cpus[static_cast<size_t>(r)].to_string()}});
  }
  posix_spawnattr_destroy(&attr);
  // Back to where the launcher ran: it should not crowd rank 0's CPUs (it only waits).
  Status restored = bind_this_thread(launcher_cpus);
  if (!restored.ok()) log.warn("cannot rebind the launcher", {{"error", restored.message()}});
  return job;
}

LocalJob::~LocalJob() {
  kill_all(SIGKILL);
  for (size_t r = 0; r < pids_.size(); ++r) {
    if (!reaped_[r]) waitpid(pids_[r], nullptr, 0);
    if (pidfds_[r] >= 0) close(pidfds_[r]);
  }
}

void LocalJob::kill_all(int signal) {
  for (size_t r = 0; r < pids_.size(); ++r) {
    if (!reaped_[r]) kill(pids_[r], signal);
  }
}

Result<JobResult> LocalJob::wait(int64_t timeout_ms, const std::function<int()>& take_signal) {
  const Deadline deadline = Deadline::after_ms(timeout_ms);
  JobResult result;
  result.ranks.resize(pids_.size());
  // The grace period starts at the first failure or the first stop, whichever comes first.
  bool grace_started = false;
  Deadline grace_end = Deadline::never();
  Deadline dump_end = Deadline::never();
  bool dumped = false;
  bool killed = false;
  size_t running = 0;
  for (bool r : reaped_)
    running += r ? 0 : 1;
  auto start_grace = [&] {
    if (grace_started) return;
    grace_started = true;
    grace_end = Deadline::after_ms(options_.grace_ms);
  };
  while (running > 0) {
    // Reap whatever has ended.
    for (size_t r = 0; r < pids_.size(); ++r) {
      if (reaped_[r]) continue;
      int status = 0;
      const pid_t got = waitpid(pids_[r], &status, WNOHANG);
      if (got != pids_[r]) continue;
      reaped_[r] = true;
      --running;
      RankExit& e = result.ranks[r];
      e.rank = static_cast<int>(r);
      e.pid = pids_[r];
      e.exited = WIFEXITED(status);
      e.code = e.exited ? WEXITSTATUS(status) : WTERMSIG(status);
      e.killed_by_launcher = dumped || killed;
      if (e.stopped() && !e.killed_by_launcher) {
        log_.info("rank stopped on request", {{"rank", static_cast<int>(r)}});
        start_grace();
      } else if (!e.ok() && !e.killed_by_launcher && result.first_failed < 0) {
        result.first_failed = static_cast<int>(r);
        start_grace();
        log_.error("rank failed", {{"rank", static_cast<int>(r)}, {"what", e.describe()}});
      }
    }
    if (running == 0) break;
    if (deadline.expired()) {
      std::string still;
      for (size_t r = 0; r < pids_.size(); ++r) {
        if (!reaped_[r]) still += (still.empty() ? "" : ", ") + std::to_string(r);
      }
      kill_all(SIGKILL);
      return Status::timeout("job did not finish in " + std::to_string(timeout_ms) +
                             " ms; killed ranks " + still);
    }
    if (take_signal) {
      const int sig = take_signal();
      if (sig != 0 && !dumped) {
        log_.info("forwarding a signal to the ranks", {{"signal", sig}});
        kill_all(sig);
      }
    }
    if (grace_started && grace_end.expired() && !dumped) {
      if (result.first_failed < 0) {
        // Ranks stopped on request and these did not follow within the grace period.
        for (size_t r = 0; r < pids_.size() && result.first_failed < 0; ++r) {
          if (!reaped_[r]) result.first_failed = static_cast<int>(r);
        }
        log_.error("ranks did not stop with the others",
                   {{"first", result.first_failed}, {"grace_ms", options_.grace_ms}});
      }
      kill_all(SIGUSR1);  // ask for flight-recorder dumps first
      dumped = true;
      dump_end = Deadline::after_ms(kDumpWaitMs);
    }
    if (dumped && dump_end.expired() && !killed) {
      kill_all(SIGKILL);
      killed = true;
    }
    // Sleep until a child ends or the next timer is due.
    std::vector<pollfd> fds;
    for (size_t r = 0; r < pids_.size(); ++r) {
      if (!reaped_[r] && pidfds_[r] >= 0) fds.push_back({pidfds_[r], POLLIN, 0});
    }
    int64_t sleep_ms = std::min<int64_t>(deadline.remaining_ms(), 100);
    if (grace_started && !dumped) sleep_ms = std::min(sleep_ms, grace_end.remaining_ms());
    poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(sleep_ms, 1)));
  }
  return result;
}

}  // namespace kiln::launch
