// The shape every `kiln` subcommand shares. A subcommand file defines one Add<Name>Command that
// registers its flags on a CLI11 sub-app and returns what to run once parsing succeeded. The run
// function turns flags into library calls and returns the process exit code; library code never
// exits.
#ifndef KILN_CLI_COMMAND_H_
#define KILN_CLI_COMMAND_H_

#include <kiln/base/log.h>

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kiln::cli {

// Flags every subcommand accepts (they are registered on the top-level app).
struct GlobalOptions {
  std::string log_level = "info";
  std::string log_file;  // empty: stderr
  // The arguments kiln was started with (argv[1..]): a launcher's ranks run them again.
  std::vector<std::string> args;
};

// Exit codes shared by all subcommands.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;   // the operation failed (peer lost, checksum, ...)
inline constexpr int kExitBadInput = 2;  // flags, config or input files are wrong

struct Command {
  CLI::App* app = nullptr;
  std::function<int(const GlobalOptions&)> run;
};

Command add_version_command(CLI::App& parent);
Command add_facts_command(CLI::App& parent);
Command add_lock_command(CLI::App& parent);
Command add_preflight_command(CLI::App& parent);
Command add_link_check_command(CLI::App& parent);
Command add_agent_command(CLI::App& parent);
Command add_store_command(CLI::App& parent);
Command add_comm_bench_command(CLI::App& parent);
Command add_comm_tune_command(CLI::App& parent);
Command add_serve_command(CLI::App& parent);
Command add_sched_sim_command(CLI::App& parent);
// submit, status, events, logs, cancel, nodes, cordon, uncordon: the coordinator's clients.
std::vector<Command> add_job_commands(CLI::App& parent);
Command add_ops_check_command(CLI::App& parent);
Command add_ops_bench_command(CLI::App& parent);
Command add_ckpt_command(CLI::App& parent);
Command add_train_command(CLI::App& parent);
Command add_sample_command(CLI::App& parent);
Command add_export_command(CLI::App& parent);
Command add_tokenize_command(CLI::App& parent);
Command add_encode_command(CLI::App& parent);
Command add_decode_command(CLI::App& parent);

// Opens the log sink the global flags ask for. On failure prints the error to stderr and returns
// null; the caller exits with kExitBadInput.
std::shared_ptr<LogSink> open_log_sink(const GlobalOptions& options);

// OK, or the first write error of any sink open_log_sink() opened in this process (a log on a
// full disk). main() checks it after the command: a run whose log was lost exits non-zero.
Status log_write_status();

// Parses a byte count with an optional binary suffix: "8", "4K", "1M", "64M", "2G".
Result<size_t> parse_bytes(const std::string& text);

// All of stdin, read in 1 MiB blocks; kInvalidArgument once it passes `limit` bytes (a bound on
// what a command holds in memory), kIoError when the read fails.
Result<std::string> read_stdin(size_t limit);

// A job spec file's text for the coordinator (`kiln submit`, `kiln preflight --job`), and the
// directory the command runs in (the job's working directory: its paths are relative to it).
// kNotFound or kInvalidArgument (over kConfigBytesMax) naming the path; kIoError.
struct JobFile {
  std::string text;
  std::string workdir;
};
Result<JobFile> read_job_file(const std::string& path);

// The absolute path of the running kiln binary, for launching ranks of itself.
std::string self_executable();

// OK if a file can be created at `path`: its directory exists, is a directory and is writable.
// Else kInvalidArgument naming `flag`, the path and what is wrong. For outputs written only at
// the end of a long run (--export), checked at its start.
Status check_output_path(const std::string& flag, const std::string& path);

// Prints `status` as "kiln <command>: <message>" to stderr and returns the exit code for it.
int report_error(const std::string& command, const Status& status);

}  // namespace kiln::cli

#endif  // KILN_CLI_COMMAND_H_
