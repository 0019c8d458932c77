// The `kiln` binary: parses the command line and hands over to one subcommand.
//
// Thin on purpose: each subcommand's flags live in its own cmd_<name>.cc and everything it does
// lives in a library.
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <kiln/base/cpu.h>
#include <kiln/ops/blas.h>

#include "cli/command.h"

namespace {

// Two facts about OpenBLAS that only its environment at load time can change, so the first kiln
// process sets them and executes itself again (its children, the ranks of a job, inherit them):
//
// - kiln_ops runs sgemm single-threaded inside its own thread pool. OpenBLAS's threaded build,
//   which Kiln links (its serial build is not safe to call from several threads at once), starts
//   its own worker threads when the library loads, before main() can block the signals Kiln
//   handles on a signal thread; a process-directed SIGINT/SIGTERM/SIGUSR1 landing on one of those
//   workers would take the default action and kill the process. OPENBLAS_NUM_THREADS=1: none.
// - OpenBLAS picks its kernels from a table of CPU models; on a model newer than its table it
//   falls back to generic ones (Prescott, SSE3) whatever the CPU's ISA (kiln/ops/blas.h).
//   OPENBLAS_CORETYPE: the core whose kernels use the best ISA the CPU has.
//
// A value the user set is kept, and the second process finds both set, so it never loops.
void prepare_openblas_environment(char** argv) {
  bool changed = false;
  if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr) {
    if (::setenv("OPENBLAS_NUM_THREADS", "1", /*overwrite=*/1) != 0) return;
    changed = true;
  }
  const kiln::ops::BlasInfo blas = kiln::ops::blas_info();
  const std::optional<std::string> core =
      kiln::ops::openblas_coretype_to_force(blas, kiln::detect_cpu_features());
  if (core) {
    if (::setenv("OPENBLAS_CORETYPE", core->c_str(), /*overwrite=*/1) != 0) return;
    // For kiln facts and the logs: what the first process found, before the fix.
    ::setenv("KILN_OPENBLAS_CORE_FOUND", blas.core.c_str(), /*overwrite=*/1);
    changed = true;
  }
  if (!changed) return;
  ::execv("/proc/self/exe", argv);
  // Only reached when the exec failed: carry on with OpenBLAS's threads idle beside ours and
  // the kernels it chose.
}

// The kernel names a process after the file it executed, "exe" after the re-exec above, and
// ps, top and pkill show that. Name it after the binary again (at most 15 bytes, the kernel's
// limit). argv stays the user's, so `ps -f` shows the command line as typed.
void name_process_after_binary() {
  std::error_code ec;
  const std::filesystem::path binary = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return;
  const std::string name = binary.filename().string().substr(0, 15);
  ::prctl(PR_SET_NAME, name.c_str(), 0, 0, 0);
}

// Last resort for an exception that escaped into std::terminate: a thread that could not be
// started where no adapter catches it (every --threads pool does, see ThreadPool::create) says
// so and exits 1 instead of aborting with a core dump and a bare "terminate called".
[[noreturn]] void report_uncaught_exception() {
  try {
    if (std::exception_ptr e = std::current_exception()) std::rethrow_exception(e);
    std::cerr << "kiln: fatal: std::terminate without an exception\n";
  } catch (const std::system_error& e) {
    std::cerr << "kiln: fatal: " << e.what() << " (a thread or resource could not be created: "
              << "the limit on processes and threads, ulimit -u, or on memory, ulimit -v, is "
              << "reached)\n";
  } catch (const std::exception& e) {
    std::cerr << "kiln: fatal: uncaught exception: " << e.what() << "\n";
  } catch (...) {
    std::cerr << "kiln: fatal: uncaught exception of unknown type\n";
  }
  std::_Exit(kiln::cli::kExitFailure);
}

// The first word of argv that is neither a global flag nor its value: the subcommand the user
// meant, or empty. CLI11 reports an unknown one as "A subcommand is required", which does not
// say what was wrong.
std::string first_command_word(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--log-level" || arg == "--log-file") {
      ++i;  // its value
      continue;
    }
    if (arg.starts_with("-")) continue;
    return std::string(arg);
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  prepare_openblas_environment(argv);
  name_process_after_binary();
  std::set_terminate(report_uncaught_exception);
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
      kiln::cli::add_comm_tune_command(app),  kiln::cli::add_serve_command(app),
      kiln::cli::add_sched_sim_command(app),  kiln::cli::add_lock_command(app),
      kiln::cli::add_preflight_command(app),  kiln::cli::add_link_check_command(app),
  };
  for (Command& command : kiln::cli::add_job_commands(app))
    commands.push_back(std::move(command));
  const std::string word = first_command_word(argc, argv);
  if (!word.empty()) {
    std::string names;
    bool known = false;
    for (const Command& command : commands) {
      known |= command.app->get_name() == word;
      names += (names.empty() ? "" : ", ") + command.app->get_name();
    }
    if (!known) {
      std::cerr << "kiln: unknown command '" << word << "'; the commands are: " << names
                << "\nRun `kiln --help` for what each does.\n";
      return kiln::cli::kExitBadInput;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version are "errors" with exit code 0; real parse errors are bad input.
    const int printed = app.exit(e);
    return printed == 0 ? kiln::cli::kExitOk : kiln::cli::kExitBadInput;
  }
  for (const Command& command : commands) {
    if (!command.app->parsed()) continue;
    int rc = command.run(globals);
    // A log that could not be written (a full disk, /dev/full) fails the run.
    const kiln::Status logged = kiln::cli::log_write_status();
    if (!logged.ok()) {
      std::cerr << "kiln " << command.app->get_name() << ": " << logged.to_string() << "\n";
      if (rc == kiln::cli::kExitOk) rc = kiln::cli::kExitFailure;
    }
    return rc;
  }
  std::cerr << app.help();
  return kiln::cli::kExitBadInput;
}
