// What every client command of the coordinator shares (cmd_jobs.cc, cmd_preflight.cc): its
// flags, a connected HTTP client, and one call's answer or the exit code for its error.
#ifndef KILN_CLI_CLIENT_H_
#define KILN_CLI_CLIENT_H_

#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <kiln/base/result.h>
#include <kiln/obs/http_client.h>

namespace kiln::cli {

struct ClientFlags {
  std::string server;
  std::string token_file;
  bool json = false;
};

// --server, --token-file and --json.
void add_client_flags(CLI::App* app, ClientFlags* flags);

// A client, or an exit code after printing why there is none.
struct Client {
  std::unique_ptr<obs::HttpClient> http;
  int error = 0;
};
// `io_timeout_ms`: how long one answer may take (0: the client's default).
Client connect(const ClientFlags& flags, const std::string& command, int io_timeout_ms = 0);

// The answer's JSON when its status is `want`, else an exit code (in *code) after printing the
// error as "kiln <command>: <message> (HTTP <status>)".
Result<nlohmann::json> call(Result<obs::HttpResponse> r, int want, const std::string& command,
                            int* code);

}  // namespace kiln::cli

#endif  // KILN_CLI_CLIENT_H_
