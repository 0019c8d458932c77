// Where the coordinator is and which token to present, for every client command.
//
// The server: --server, else $KILN_SERVER, else the discovery file a local `kiln serve` wrote
// (~/.kiln/server.json: {"server": URL, "token_file": PATH}). The token: $KILN_TOKEN, else the
// file --token-file or $KILN_TOKEN_FILE names, else the discovery file's token_file. For https,
// the CA certificate: $KILN_CA_CERT, else the discovery file's ca_cert. So a client
// on the same host as a default `kiln serve` needs no flags at all.
#ifndef KILN_CLI_SERVER_ADDRESS_H_
#define KILN_CLI_SERVER_ADDRESS_H_

#include <string>

#include <kiln/base/result.h>

namespace kiln::cli {

std::string default_state_dir();  // ~/.kiln/serve
// `ca_cert`: the certificate clients should trust for an https `url` (empty: the system's).
Status write_client_discovery(const std::string& url, const std::string& token_path,
                              const std::string& ca_cert = "");

struct ServerTarget {
  std::string url;
  std::string token;
  std::string ca_cert;  // $KILN_CA_CERT for https
};
Result<ServerTarget> resolve_server(const std::string& server_flag,
                                    const std::string& token_file_flag);

}  // namespace kiln::cli

#endif  // KILN_CLI_SERVER_ADDRESS_H_
