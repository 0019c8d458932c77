// See rank_launch.h.
#include "cli/rank_launch.h"

#include <signal.h>

#include <atomic>
#include <iostream>
#include <iterator>
#include <memory>

namespace kiln::cli {
namespace {

// The signals a launcher forwards, as bits of a pending mask (the signal thread sets them, the
// wait loop takes them), in the order they are taken.
constexpr int kForwarded[] = {SIGTERM, SIGINT, SIGUSR1};

}  // namespace

std::vector<std::string> rank_command_line(const GlobalOptions& globals,
                                           const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {self_executable()};
  argv.insert(argv.end(), globals.args.begin(), globals.args.end());
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

Status job_from_environment(launch::LaunchOptions* options) {
  launch::JobAttempt none;
  none.id.clear();
  KILN_ASSIGN_OR_RETURN(launch::JobAttempt job, launch::job_attempt(launch::process_env(), none));
  options->job_id = job.id;
  options->attempt = job.attempt;
  return Status();
}

int run_local_job(const std::string& command, const launch::LaunchOptions& options,
                  const Logger& log, int64_t timeout_ms, SignalThread* signals) {
  // Shared with the handler, which may outlive this call (the caller owns the signal thread).
  auto pending = std::make_shared<std::atomic<unsigned>>(0);
  signals->start([pending](int sig) {
    for (size_t i = 0; i < std::size(kForwarded); ++i) {
      if (kForwarded[i] == sig) pending->fetch_or(1u << i);
    }
  });
  auto take_signal = [pending]() -> int {
    const unsigned bits = pending->load();
    for (size_t i = 0; i < std::size(kForwarded); ++i) {
      if ((bits & (1u << i)) != 0) {
        pending->fetch_and(~(1u << i));
        return kForwarded[i];
      }
    }
    return 0;
  };
  Result<std::unique_ptr<launch::LocalJob>> job = launch::LocalJob::start(options, log);
  if (!job.ok()) return report_error(command, job.status());
  Result<launch::JobResult> result = (*job)->wait(timeout_ms, take_signal);
  if (!result.ok()) return report_error(command, result.status());
  if (!result->ok()) {
    const launch::RankExit& first = result->ranks[result->first_failed];
    std::cerr << "kiln " << command << ": " << first.describe() << std::endl;
    for (const launch::RankExit& e : result->ranks) {
      if (&e != &first && !e.ok() && !e.stopped()) {
        std::cerr << "  then " << e.describe() << std::endl;
      }
    }
    return kExitFailure;
  }
  if (result->stopped()) {
    log.warn("the ranks stopped on request; a rerun resumes",
             {{"exit_code", launch::kExitStoppedResumable}, {"job_id", (*job)->job().id}});
    return launch::kExitStoppedResumable;
  }
  return kExitOk;
}

}  // namespace kiln::cli
