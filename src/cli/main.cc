// The `kiln` binary: parses the command line and hands over to one subcommand.
//
// Thin on purpose: each subcommand's flags live in its own cmd_<name>.cc and everything it does
// lives in a library.
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <vector>

#include "cli/command.h"

namespace {

// kiln_ops runs sgemm single-threaded inside its own thread pool. OpenBLAS's threaded build,
// which Kiln links (its serial build is not safe to call from several threads at once), starts
// its own worker threads when the library loads, before main() can block the signals Kiln
// handles on a signal thread; a process-directed SIGINT/SIGTERM/SIGUSR1 landing on one of those
// workers would take the default action and kill the process. With OPENBLAS_NUM_THREADS=1 in
// the environment at load time it starts none, so the first kiln process sets it and executes
// itself again (its children, the ranks of a job, inherit it). A value the user set is kept.
void ensure_openblas_starts_no_threads(char** argv) {
  if (std::getenv("OPENBLAS_NUM_THREADS") != nullptr) return;
  if (::setenv("OPENBLAS_NUM_THREADS", "1", /*overwrite=*/1) != 0) return;
  ::execv("/proc/self/exe", argv);
  // Only reached when the exec failed: carry on with OpenBLAS's threads idle beside ours.
}

}  // namespace

int main(int argc, char** argv) {
  ensure_openblas_starts_no_threads(argv);
  using kiln::cli::Command;
  CLI::App app{
      "Kiln: infrastructure for training large models across many machines.\n"
      "Run `kiln <command> --help` for a command's flags.",
      "kiln"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags may also follow the subcommand
  kiln::cli::GlobalOptions globals;
  globals.args.assign(argv + 1, argv + argc);
  app.add_option("--log-level", globals.log_level, "debug, info, warn, error or off")
      ->capture_default_str();
  app.add_option("--log-file", globals.log_file, "append JSON-line logs here (default: stderr)");

  std::vector<Command> commands = {
      kiln::cli::add_version_command(app),    kiln::cli::add_facts_command(app),
      kiln::cli::add_agent_command(app),      kiln::cli::add_store_command(app),
      kiln::cli::add_comm_bench_command(app), kiln::cli::add_ops_check_command(app),
      kiln::cli::add_ops_bench_command(app),  kiln::cli::add_train_command(app),
      kiln::cli::add_sample_command(app),     kiln::cli::add_export_command(app),
      kiln::cli::add_tokenize_command(app),   kiln::cli::add_encode_command(app),
      kiln::cli::add_decode_command(app),     kiln::cli::add_ckpt_command(app),
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version are "errors" with exit code 0; real parse errors are bad input.
    const int printed = app.exit(e);
    return printed == 0 ? kiln::cli::kExitOk : kiln::cli::kExitBadInput;
  }
  for (const Command& command : commands) {
    if (command.app->parsed()) return command.run(globals);
  }
  std::cerr << app.help();
  return kiln::cli::kExitBadInput;
}
