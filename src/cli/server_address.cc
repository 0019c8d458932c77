#include "cli/server_address.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <span>

#include <nlohmann/json.hpp>

#include <kiln/base/file_system.h>

namespace kiln::cli {
namespace {

std::string home() {
  const char* h = std::getenv("HOME");
  return h != nullptr && *h != '\0' ? std::string(h) : std::string("/root");
}

std::string discovery_path() {
  return home() + "/.kiln/server.json";
}

Result<std::string> first_line(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) return Status::not_found(what + " " + path + ": cannot read it");
  std::string line;
  std::getline(in, line);
  while (!line.empty() && (line.back() == '\r' || line.back() == ' '))
    line.pop_back();
  if (line.empty()) return Status::invalid_argument(what + " " + path + ": the file is empty");
  return line;
}

}  // namespace

std::string default_state_dir() {
  return home() + "/.kiln/serve";
}

Status write_client_discovery(const std::string& url, const std::string& token_path,
                              const std::string& ca_cert) {
  KILN_RETURN_IF_ERROR(make_dirs_durably(posix_file_system(), home() + "/.kiln"));
  const std::string text =
      nlohmann::json{{"server", url}, {"token_file", token_path}, {"ca_cert", ca_cert}}.dump() +
      "\n";
  const ByteSpan span{text.data(), text.size()};
  Result<DurableWriteResult> w = write_file_durably(posix_file_system(), discovery_path(),
                                                    std::span<const ByteSpan>(&span, 1));
  return w.ok() ? Status() : w.status();
}

Result<ServerTarget> resolve_server(const std::string& server_flag,
                                    const std::string& token_file_flag) {
  ServerTarget out;
  nlohmann::json discovered;
  {
    std::ifstream in(discovery_path());
    if (in) discovered = nlohmann::json::parse(in, nullptr, false);
    if (!discovered.is_object()) discovered = nlohmann::json::object();
  }
  const char* env_server = std::getenv("KILN_SERVER");
  if (!server_flag.empty()) {
    out.url = server_flag;
  } else if (env_server != nullptr && *env_server != '\0') {
    out.url = env_server;
  } else if (discovered.contains("server") && discovered["server"].is_string()) {
    out.url = discovered["server"].get<std::string>();
  } else {
    return Status::invalid_argument(
        "no coordinator: pass --server URL, set KILN_SERVER, or start `kiln serve` on this host");
  }
  const char* env_token = std::getenv("KILN_TOKEN");
  const char* env_token_file = std::getenv("KILN_TOKEN_FILE");
  if (env_token != nullptr && *env_token != '\0') {
    out.token = env_token;
  } else if (!token_file_flag.empty()) {
    KILN_ASSIGN_OR_RETURN(out.token, first_line(token_file_flag, "--token-file"));
  } else if (env_token_file != nullptr && *env_token_file != '\0') {
    KILN_ASSIGN_OR_RETURN(out.token, first_line(env_token_file, "KILN_TOKEN_FILE"));
  } else if (discovered.contains("token_file") && discovered["token_file"].is_string()) {
    KILN_ASSIGN_OR_RETURN(out.token, first_line(discovered["token_file"].get<std::string>(),
                                                "the token file of " + discovery_path() + ":"));
  }
  if (const char* ca = std::getenv("KILN_CA_CERT"); ca != nullptr && *ca != '\0') {
    out.ca_cert = ca;
  } else if (discovered.contains("ca_cert") && discovered["ca_cert"].is_string()) {
    out.ca_cert = discovered["ca_cert"].get<std::string>();
  }
  return out;
}

}  // namespace kiln::cli
