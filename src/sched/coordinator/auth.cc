#include <kiln/sched/auth.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <cstdio>

#include <kiln/base/config.h>

namespace kiln::sched {
namespace {

std::string hex(const unsigned char* bytes, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out += kDigits[bytes[i] >> 4];
    out += kDigits[bytes[i] & 15];
  }
  return out;
}

bool is_sha256_hex(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// Equal lengths are the only case that matters (both are hex SHA-256); CRYPTO_memcmp takes the
// same time whatever the first differing byte, so a client learns nothing from timing.
bool same_hash(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace

std::string sha256_hex(std::string_view text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(text.data(), text.size(), digest, &n, EVP_sha256(), nullptr);
  return hex(digest, n);
}

Result<std::string> new_token() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    return Status::io_error("cannot draw random bytes for a token (RAND_bytes failed)");
  }
  return hex(bytes, sizeof(bytes));
}

Result<TokenRegistry> TokenRegistry::load_file(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(ConfigDocument doc, ConfigDocument::load_file(path));
  return from_document(doc);
}

Result<TokenRegistry> TokenRegistry::parse(std::string_view yaml, const std::string& source_name) {
  KILN_ASSIGN_OR_RETURN(ConfigDocument doc, ConfigDocument::parse(yaml, source_name));
  return from_document(doc);
}

Result<TokenRegistry> TokenRegistry::from_document(const ConfigDocument& doc) {
  TokenRegistry out;
  ConfigReader root = doc.root();
  ConfigReader tokens = root.section("tokens", kRequired);
  for (const std::string& name : tokens.keys()) {
    ConfigReader t = tokens.section(name);
    TokenEntry e;
    e.name = name;
    t.read_string("team", &e.team, kRequired);
    t.read_bool("admin", &e.admin);
    t.read_string("sha256", &e.sha256, kRequired);
    if (!e.sha256.empty() && !is_sha256_hex(e.sha256)) {
      t.report("sha256", "expected 64 lower-case hex digits (the SHA-256 of the token)");
    }
    out.tokens_.push_back(std::move(e));
  }
  root.read_string("node_token_sha256", &out.node_sha256_);
  if (!out.node_sha256_.empty() && !is_sha256_hex(out.node_sha256_)) {
    root.report("node_token_sha256", "expected 64 lower-case hex digits");
  }
  root.read_string_map("team_users", &out.team_users_);
  KILN_RETURN_IF_ERROR(doc.finish());
  return out;
}

std::optional<Caller> TokenRegistry::caller_for(std::string_view token) const {
  if (token.empty()) return std::nullopt;
  const std::string hash = sha256_hex(token);
  std::optional<Caller> found;
  for (const TokenEntry& e : tokens_) {
    // Every entry is compared, found or not, so the time does not say which entry matched.
    if (same_hash(hash, e.sha256) && !found) found = Caller{e.name, e.team, e.admin};
  }
  return found;
}

bool TokenRegistry::is_node_token(std::string_view token) const {
  return !token.empty() && !node_sha256_.empty() && same_hash(sha256_hex(token), node_sha256_);
}

std::string TokenRegistry::unix_user_of(const std::string& team) const {
  auto it = team_users_.find(team);
  return it == team_users_.end() ? std::string() : it->second;
}

std::string TokenRegistry::render(const std::vector<TokenEntry>& tokens,
                                  const std::string& node_sha256,
                                  const std::map<std::string, std::string>& team_users) {
  std::string out = "# Written by kiln serve: token hashes (SHA-256), never the tokens.\ntokens:\n";
  for (const TokenEntry& e : tokens) {
    out += "  " + e.name + ": {team: " + e.team + ", admin: " + (e.admin ? "true" : "false") +
           ", sha256: " + e.sha256 + "}\n";
  }
  if (!node_sha256.empty()) out += "node_token_sha256: " + node_sha256 + "\n";
  if (!team_users.empty()) {
    out += "team_users:\n";
    for (const auto& [team, user] : team_users)
      out += "  " + team + ": " + user + "\n";
  }
  return out;
}

}  // namespace kiln::sched
