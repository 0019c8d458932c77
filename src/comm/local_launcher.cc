// See include/kiln/comm/local_launcher.h.
#include <kiln/comm/local_launcher.h>

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <kiln/base/checksum.h>
#include <kiln/base/clock.h>

#include <cstring>
#include <random>

#include "comm/transport/progress.h"

extern char** environ;

namespace kiln::comm {
namespace {

// After a failure and the grace period, ranks still running get SIGUSR1 (dump the flight
// recorder) and this long to write it before SIGKILL.
constexpr int64_t kDumpWaitMs = 1'000;

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

Result<std::unique_ptr<LocalJob>> LocalJob::start(const LaunchOptions& options, Logger log) {
  if (options.world_size < 1) return Status::invalid_argument("world size must be at least 1");
  if (options.argv.empty()) return Status::invalid_argument("no command to launch");
  std::unique_ptr<LocalJob> job(new LocalJob());
  job->options_ = options;
  job->log_ = log;
  if (job->options_.job_token.empty()) job->options_.job_token = random_token();
  StoreServerOptions store_options;
  store_options.token = job->options_.job_token;
  KILN_ASSIGN_OR_RETURN(job->store_, StoreServer::start(store_options, log.child("store")));
  job->store_address_ = "127.0.0.1:" + std::to_string(job->store_->port());

  std::vector<char*> argv;
  for (const std::string& a : options.argv)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (int r = 0; r < options.world_size; ++r) {
    std::map<std::string, std::string> env = options.env;
    env["KILN_RANK"] = std::to_string(r);
    env["KILN_WORLD_SIZE"] = std::to_string(options.world_size);
    env["KILN_STORE_ADDR"] = job->store_address_;
    env["KILN_JOB_TOKEN"] = job->options_.job_token;
    // Every rank runs on this machine, so TCP links (fake hosts, --transport tcp) go over
    // loopback whether or not the host name resolves (comm_env.h).
    env.emplace("KILN_COMM_ADDR", "127.0.0.1");
    if (!options.hosts.empty()) {
      const size_t h = static_cast<size_t>(r) % options.hosts.size();
      env["KILN_HOST"] = options.hosts[h];
      env["KILN_NODE_ID"] = std::to_string(h);
      env["KILN_LOCAL_RANK"] = std::to_string(r / options.hosts.size());
    } else {
      env["KILN_NODE_ID"] = "0";
      env["KILN_LOCAL_RANK"] = std::to_string(r);
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
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), envp.data());
    if (rc != 0) {
      job->kill_all(SIGKILL);
      return Status::io_error("spawn rank " + std::to_string(r) + " (" + options.argv[0] +
                              "): " + std::strerror(rc));
    }
    job->pids_.push_back(pid);
    job->pidfds_.push_back(open_pidfd(pid));
    job->reaped_.push_back(false);
    log.info("rank started", {{"rank", r}, {"pid", pid}});
  }
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

Result<JobResult> LocalJob::wait(int64_t timeout_ms) {
  const Deadline deadline = Deadline::after_ms(timeout_ms);
  JobResult result;
  result.ranks.resize(pids_.size());
  Deadline grace_end = Deadline::never();
  Deadline dump_end = Deadline::never();
  bool dumped = false;
  bool killed = false;
  size_t running = 0;
  for (bool r : reaped_)
    running += r ? 0 : 1;
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
      if (!e.ok() && !e.killed_by_launcher && result.first_failed < 0) {
        result.first_failed = static_cast<int>(r);
        grace_end = Deadline::after_ms(options_.grace_ms);
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
    if (result.first_failed >= 0 && grace_end.expired() && !dumped) {
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
    if (result.first_failed >= 0 && !dumped)
      sleep_ms = std::min(sleep_ms, grace_end.remaining_ms());
    poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(sleep_ms, 1)));
  }
  return result;
}

}  // namespace kiln::comm
