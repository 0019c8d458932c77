// Running a short command-line tool (sbatch, squeue, sinfo, scontrol, scancel, a preflight probe
// of kiln itself) and reading what it printed, with a deadline and a bound on the output: a hung
// slurmctld or a tool that prints without end costs the caller at most timeout_ms and output_max
// bytes, never the coordinator. Used by the Slurm executor, the node agent's preflight probes
// (src/sched/agent/probe.h) and `kiln lock --trial`.
#ifndef KILN_SCHED_COMMAND_H_
#define KILN_SCHED_COMMAND_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <kiln/base/result.h>

namespace kiln::sched::slurm {

struct CommandSpec {
  std::vector<std::string> argv;  // argv[0] found on PATH
  // Added to this process's environment (these win).
  std::vector<std::pair<std::string, std::string>> env;
  std::string cwd;  // where it runs (must exist); empty: the caller's directory
  int64_t timeout_ms = 20000;
  size_t output_max = 4 << 20;  // bytes of stdout, and of stderr, kept; more is an error
};

struct CommandOutput {
  int exit_code = 0;  // 128 + signal when killed by one
  std::string out;
  std::string err;
};

// Runs `spec` to its end. kTimeout (the process is killed) or kIoError name the command; a
// non-zero exit is not an error here: the caller reads exit_code and err.
Result<CommandOutput> run_command(const CommandSpec& spec);

// "sbatch --parsable ..." (argv joined with spaces), for messages.
std::string command_line(const std::vector<std::string>& argv);

}  // namespace kiln::sched::slurm

#endif  // KILN_SCHED_COMMAND_H_
