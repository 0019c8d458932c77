// Launching the ranks of a job from a subcommand (`kiln train --nproc N`, `kiln comm-bench`):
// the one place a rank's command line is built, and the launcher's wait with signal forwarding
// and the report of how the ranks ended. The contract with the ranks is kiln_launch's
// (include/kiln/launch/rank_env.h, docs/launch.md).
#ifndef KILN_CLI_RANK_LAUNCH_H_
#define KILN_CLI_RANK_LAUNCH_H_

#include <kiln/base/log.h>
#include <kiln/launch/local_launcher.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/signals.h"

namespace kiln::cli {

// Every rank runs this binary with the arguments the launcher was given (global flags
// included), followed by `extra` (comm-bench's `--worker`); a rank tells itself apart by the
// rank environment (KILN_RANK) or by `extra`.
std::vector<std::string> rank_command_line(const GlobalOptions& globals,
                                           const std::vector<std::string>& extra = {});

// Fills options->job_id and ->attempt from this process's KILN_JOB_ID and KILN_ATTEMPT, so a
// launcher started by a scheduler passes its job on (unset: LocalJob makes an id up, attempt
// 0). kInvalidArgument names the variable.
Status job_from_environment(launch::LaunchOptions* options);

// Starts the job and waits up to `timeout_ms` for it. `signals` (constructed first thing, with
// SIGINT, SIGTERM and SIGUSR1) is started here: each of those signals the launcher takes is sent
// on to every rank still running. Returns the exit code: kExitOk when every rank finished,
// kExitStoppedResumable when they stopped on request, kExitFailure (after naming on stderr the
// rank that failed first, then the others) otherwise.
int run_local_job(const std::string& command, const launch::LaunchOptions& options,
                  const Logger& log, int64_t timeout_ms, SignalThread* signals);

}  // namespace kiln::cli

#endif  // KILN_CLI_RANK_LAUNCH_H_
