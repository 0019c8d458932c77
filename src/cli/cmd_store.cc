// `kiln store`: serve the rendezvous store until SIGINT/SIGTERM.
//
// The job token comes from --token-file (its first line, surrounding whitespace dropped) or else
// from $KILN_JOB_TOKEN; there is no default, and no token is bad input (exit 2). The token is
// never printed or logged. With --json it prints {"event":"serving","port":P} once the port is
// bound, and {"event":"stopped","signal":N} on the way out.
#include <kiln/comm/store.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <iostream>

#include "cli/command.h"
#include "cli/signals.h"

namespace kiln::cli {
namespace {

// A token file holds one short secret; anything bigger is not a token file.
constexpr std::streamsize kTokenFileBytesMax = 4096;
// How often the serving loop wakes without a signal; it only bounds how stale a check can be.
constexpr int64_t kSignalWaitMs = 1000;

struct StoreFlags {
  int port = -1;
  std::string bind = "127.0.0.1";
  std::string token_file;
  bool json = false;
};

std::string trim(std::string s) {
  const char* space = " \t\r\n";
  const size_t first = s.find_first_not_of(space);
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(space) - first + 1);
}

// The token from --token-file, else $KILN_JOB_TOKEN. kInvalidArgument when there is none.
Result<std::string> read_token(const StoreFlags& flags) {
  if (!flags.token_file.empty()) {
    std::ifstream file(flags.token_file, std::ios::binary);
    if (!file) return Status::not_found("--token-file " + flags.token_file + ": cannot open");
    std::string text(kTokenFileBytesMax + 1, '\0');
    file.read(text.data(), kTokenFileBytesMax + 1);
    text.resize(static_cast<size_t>(file.gcount()));
    if (text.size() > static_cast<size_t>(kTokenFileBytesMax)) {
      return Status::invalid_argument("--token-file " + flags.token_file + ": more than " +
                                      std::to_string(kTokenFileBytesMax) +
                                      " bytes; expected one token");
    }
    std::string token = trim(text.substr(0, text.find('\n')));
    if (token.empty()) {
      return Status::invalid_argument("--token-file " + flags.token_file + ": the file is empty");
    }
    return token;
  }
  const char* env = std::getenv("KILN_JOB_TOKEN");
  if (env != nullptr && *env != '\0') return std::string(env);
  return Status::invalid_argument(
      "no job token: pass --token-file FILE or set KILN_JOB_TOKEN; clients must present the same "
      "token");
}

int run_store(const StoreFlags& flags, const GlobalOptions& globals) {
  TerminationSignals signals;  // first: the server thread must inherit the blocked mask
  std::shared_ptr<LogSink> sink = open_log_sink(globals);
  if (!sink) return kExitBadInput;
  Logger log(sink, "store");

  Result<std::string> token = read_token(flags);
  if (!token.ok()) return report_error("store", token.status());
  comm::StoreServerOptions options;
  options.bind_address = flags.bind;
  options.port = flags.port;
  options.token = std::move(*token);
  Result<std::unique_ptr<comm::StoreServer>> server = comm::StoreServer::start(options, log);
  if (!server.ok()) return report_error("store", server.status());
  if (flags.json) {
    nlohmann::ordered_json event;
    event["event"] = "serving";
    event["port"] = (*server)->port();
    std::cout << event.dump() << std::endl;
  }

  int signal_number = 0;
  while (signal_number == 0)
    signal_number = signals.wait(kSignalWaitMs);
  (*server)->stop();
  log.info("store server stopped", {{"signal", signal_number}});
  if (flags.json) {
    nlohmann::ordered_json event;
    event["event"] = "stopped";
    event["signal"] = signal_number;
    std::cout << event.dump() << std::endl;
  }
  return kExitOk;
}

}  // namespace

Command add_store_command(CLI::App& parent) {
  auto flags = std::make_shared<StoreFlags>();
  CLI::App* app = parent.add_subcommand(
      "store", "Serve the rendezvous store that a job's ranks use to find each other");
  app->add_option("--port", flags->port, "port to serve on (0: pick a free one)")
      ->required()
      ->check(CLI::Range(0, 65535));
  app->add_option("--bind", flags->bind, "address to serve on")->capture_default_str();
  app->add_option("--token-file", flags->token_file,
                  "file holding the job token (default: $KILN_JOB_TOKEN)");
  app->add_flag("--json", flags->json, "print JSON lines when serving and stopping");
  return {app, [flags](const GlobalOptions& globals) { return run_store(*flags, globals); }};
}

}  // namespace kiln::cli
