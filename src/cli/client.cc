// The coordinator's client plumbing (client.h).
#include "cli/client.h"

#include <iostream>
#include <utility>

#include "cli/command.h"
#include "cli/server_address.h"

namespace kiln::cli {

using json = nlohmann::json;

void add_client_flags(CLI::App* app, ClientFlags* flags) {
  app->add_option("--server", flags->server, "coordinator URL (default $KILN_SERVER)");
  app->add_option("--token-file", flags->token_file,
                  "file holding the token (default $KILN_TOKEN)");
  app->add_flag("--json", flags->json, "print JSON lines");
}

Client connect(const ClientFlags& flags, const std::string& command, int io_timeout_ms) {
  Client c;
  Result<ServerTarget> target = resolve_server(flags.server, flags.token_file);
  if (!target.ok()) {
    c.error = report_error(command, target.status());
    return c;
  }
  obs::HttpClientOptions o;
  o.base_url = target->url;
  o.bearer_token = target->token;
  o.ca_cert_path = target->ca_cert;
  if (io_timeout_ms > 0) o.io_timeout_ms = io_timeout_ms;
  Result<std::unique_ptr<obs::HttpClient>> http = obs::HttpClient::create(o);
  if (!http.ok()) {
    c.error = report_error(command, http.status());
    return c;
  }
  c.http = std::move(*http);
  return c;
}

Result<json> call(Result<obs::HttpResponse> r, int want, const std::string& command, int* code) {
  if (!r.ok()) {
    *code = report_error(command, r.status());
    return r.status();
  }
  json body = json::parse(r->body, nullptr, false);
  if (r->status != want) {
    std::string message =
        body.is_object() && body.contains("error") ? body["error"].get<std::string>() : r->body;
    std::cerr << "kiln " << command << ": " << message << " (HTTP " << r->status << ")\n";
    *code = r->status == 400 || r->status == 404 ? kExitBadInput : kExitFailure;
    return Status::aborted(message);
  }
  if (body.is_discarded()) {
    *code = report_error(command, Status::io_error("the coordinator's answer is not JSON"));
    return Status::io_error("not JSON");
  }
  return body;
}

}  // namespace kiln::cli
