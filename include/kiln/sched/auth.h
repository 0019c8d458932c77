// Tokens and who they speak for: the coordinator's least-privilege model.
//
// Every API call carries "Authorization: Bearer <token>". The coordinator's auth file maps the
// SHA-256 of each token (never the token itself) to a name, a team, whether it may manage nodes
// (admin), and optionally the Unix user that team's ranks run as. Node agents present the node
// token, which may only report and fetch assignments. The file (YAML, read strictly):
//
//   tokens:                      # by name: the name the audit log shows
//     alice: {team: vision, sha256: 9f86d0...}
//     ops: {team: ops, admin: true, sha256: 60303a...}
//   node_token_sha256: 2c26b4...
//   team_users: {vision: alice}      # ranks of team vision run as the Unix user alice
//
// `kiln serve` without --auth-file makes an admin token and a node token for itself, writes them
// (mode 0600) under its state directory and the hashes to its auth file.
#ifndef KILN_SCHED_AUTH_H_
#define KILN_SCHED_AUTH_H_

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/base/config.h>
#include <kiln/base/result.h>
#include <kiln/sched/coordinator.h>

namespace kiln::sched {

// Lower-case hex SHA-256 of `text`.
std::string sha256_hex(std::string_view text);
// A fresh token: 32 random bytes from the OS as 64 hex characters.
Result<std::string> new_token();

struct TokenEntry {
  std::string name;
  std::string team;
  bool admin = false;
  std::string sha256;  // of the token
};

class TokenRegistry {
 public:
  // Errors name the file, line and key (strict YAML), or the entry with a malformed hash.
  static Result<TokenRegistry> load_file(const std::string& path);
  static Result<TokenRegistry> parse(std::string_view yaml, const std::string& source_name);

  // The caller `token` speaks for; nullopt for an unknown token. Compares hashes in constant time.
  std::optional<Caller> caller_for(std::string_view token) const;
  bool is_node_token(std::string_view token) const;
  // The Unix user a team's ranks run as; empty: the agent's own user.
  std::string unix_user_of(const std::string& team) const;
  const std::map<std::string, std::string>& team_users() const { return team_users_; }

  // The file's text for these entries (what `kiln serve` writes for its local default).
  static std::string render(const std::vector<TokenEntry>& tokens, const std::string& node_sha256,
                            const std::map<std::string, std::string>& team_users);

 private:
  static Result<TokenRegistry> from_document(const ConfigDocument& doc);

  std::vector<TokenEntry> tokens_;
  std::string node_sha256_;
  std::map<std::string, std::string> team_users_;
};

}  // namespace kiln::sched

#endif  // KILN_SCHED_AUTH_H_
