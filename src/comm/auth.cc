// The job-token handshake. See auth.h for the guarantees; this is the format.
//
// Every message starts with the same 8-byte header; every field is a single byte or a fixed-size
// byte string, so there is no byte order to agree on.
//
//   header        := magic[4] = "KLNA"  version:u8 = 1  type:u8  flag:u8  reserved:u8 = 0
//   server_hello  := header(type = 1, flag = 0)  nonce_server[32]                      40 bytes
//   client_hello  := header(type = 2, flag = 0)  nonce_client[32]  proof_client[32]    72 bytes
//   verdict       := header(type = 3, flag)      proof_server[32]                      40 bytes
//     flag := 0  accepted; proof_server is the server's proof
//           | 1  rejected: the client's proof is wrong (different token or purpose); zeros
//           | 2  rejected: the client's hello is malformed or of another version; zeros
//
//   proof_<role>  := HMAC-SHA256(key = token, purpose || role || nonce_server || nonce_client)
//     role := "client" | "server"   (both 6 bytes, so the MAC input splits one way only)
//
// The exchange, one and a half round trips:
//
//   server -> client  server_hello     the server's challenge
//   client -> server  client_hello     the client's challenge and its answer to the server's
//   server -> client  verdict          the server's answer to the client's challenge, or "no"
//
// The server speaks first so that a client can tell a Kiln server from anything else by its
// first 8 bytes, and it proves itself last so that it never answers for an unauthenticated peer.
#include "comm/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstring>

#include "comm/net/socket.h"

namespace kiln::comm {
namespace {

constexpr char kMagic[4] = {'K', 'L', 'N', 'A'};
constexpr uint8_t kVersion = 1;
// Offsets within the header.
constexpr size_t kVersionOffset = 4;
constexpr size_t kTypeOffset = 5;
constexpr size_t kFlagOffset = 6;

enum class MessageType : uint8_t { kServerHello = 1, kClientHello = 2, kVerdict = 3 };
enum class Verdict : uint8_t { kAccepted = 0, kBadProof = 1, kMalformed = 2 };

using Nonce = std::array<uint8_t, kAuthNonceBytes>;
using Mac = std::array<uint8_t, kAuthMacBytes>;

std::string header(MessageType type, uint8_t flag) {
  std::string out(kMagic, sizeof(kMagic));
  out.push_back(static_cast<char>(kVersion));
  out.push_back(static_cast<char>(type));
  out.push_back(static_cast<char>(flag));
  out.push_back('\0');  // reserved
  return out;
}

void append(std::string* out, const uint8_t* data, size_t bytes) {
  out->append(reinterpret_cast<const char*>(data), bytes);
}

// Checks the header of a received message. Names the peer and what is wrong.
Status check_header(std::string_view message, MessageType expected, std::string_view peer_name) {
  const std::string where = "handshake with " + std::string(peer_name);
  if (std::memcmp(message.data(), kMagic, sizeof(kMagic)) != 0) {
    return Status::aborted(where + ": not a Kiln handshake (bad magic)");
  }
  const uint8_t version = static_cast<uint8_t>(message[kVersionOffset]);
  if (version != kVersion) {
    return Status::aborted(where + ": peer speaks handshake version " + std::to_string(version) +
                           ", this build speaks " + std::to_string(kVersion));
  }
  const uint8_t type = static_cast<uint8_t>(message[kTypeOffset]);
  if (type != static_cast<uint8_t>(expected)) {
    return Status::aborted(where + ": unexpected message type " + std::to_string(type) +
                           " (wanted " + std::to_string(static_cast<int>(expected)) + ")");
  }
  return Status();
}

Result<Nonce> fresh_nonce() {
  Nonce nonce{};
  if (RAND_bytes(nonce.data(), static_cast<int>(nonce.size())) != 1) {
    return Status::io_error("handshake: RAND_bytes failed to produce a nonce");
  }
  return nonce;
}

// HMAC-SHA256(token, purpose || role || nonce_server || nonce_client).
Mac proof(std::string_view token, std::string_view purpose, std::string_view role,
          const uint8_t* nonce_server, const uint8_t* nonce_client) {
  std::string input;
  input.reserve(purpose.size() + role.size() + 2 * kAuthNonceBytes);
  input.append(purpose).append(role);
  append(&input, nonce_server, kAuthNonceBytes);
  append(&input, nonce_client, kAuthNonceBytes);
  Mac mac{};
  unsigned int mac_bytes = 0;
  const unsigned char* ok = HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
                                 reinterpret_cast<const unsigned char*>(input.data()), input.size(),
                                 mac.data(), &mac_bytes);
  KILN_CHECK(ok != nullptr && mac_bytes == kAuthMacBytes) << "HMAC-SHA256 failed";
  return mac;
}

bool same_mac(const Mac& expected, const char* received) {
  return CRYPTO_memcmp(expected.data(), received, kAuthMacBytes) == 0;
}

// I/O failures during the handshake: the deadline stays kTimeout, anything else (closed, reset,
// short read) means the handshake did not complete and is kAborted.
Status io_failure(const Status& s) {
  if (s.ok() || s.is_timeout()) return s;
  return Status::aborted(s.message());
}

Status check_token(std::string_view token, std::string_view purpose) {
  KILN_CHECK(!purpose.empty()) << "the handshake needs a purpose";
  if (token.empty()) return Status::invalid_argument("handshake: the job token is empty");
  return Status();
}

}  // namespace

Result<ServerHandshake> ServerHandshake::start(std::string_view token, std::string_view purpose,
                                               std::string_view peer_name) {
  KILN_RETURN_IF_ERROR(check_token(token, purpose));
  ServerHandshake hs{std::string(token), std::string(purpose), std::string(peer_name)};
  KILN_ASSIGN_OR_RETURN(hs.nonce_server_, fresh_nonce());
  return hs;
}

std::string ServerHandshake::hello() const {
  std::string out = header(MessageType::kServerHello, 0);
  append(&out, nonce_server_.data(), nonce_server_.size());
  return out;
}

Status ServerHandshake::verify_client_hello(std::string_view client_hello, std::string* verdict) {
  KILN_CHECK(!verified_) << "verify_client_hello called twice for " << peer_name_;
  KILN_CHECK_EQ(client_hello.size(), kAuthClientHelloBytes);
  verified_ = true;
  const Mac zeros{};
  Status s = check_header(client_hello, MessageType::kClientHello, peer_name_);
  if (!s.ok()) {
    *verdict = header(MessageType::kVerdict, static_cast<uint8_t>(Verdict::kMalformed));
    append(verdict, zeros.data(), zeros.size());
    return s;
  }
  const auto* nonce_client =
      reinterpret_cast<const uint8_t*>(client_hello.data()) + kAuthHeaderBytes;
  const char* proof_client = client_hello.data() + kAuthHeaderBytes + kAuthNonceBytes;
  const Mac expected = proof(token_, purpose_, "client", nonce_server_.data(), nonce_client);
  if (!same_mac(expected, proof_client)) {
    *verdict = header(MessageType::kVerdict, static_cast<uint8_t>(Verdict::kBadProof));
    append(verdict, zeros.data(), zeros.size());
    return Status::aborted("handshake with " + peer_name_ +
                           ": bad proof: the peer does not hold this job's token (or speaks "
                           "another protocol than " +
                           purpose_ + ")");
  }
  *verdict = header(MessageType::kVerdict, static_cast<uint8_t>(Verdict::kAccepted));
  const Mac mine = proof(token_, purpose_, "server", nonce_server_.data(), nonce_client);
  append(verdict, mine.data(), mine.size());
  return Status();
}

Status authenticate_as_server(int fd, std::string_view token, std::string_view purpose,
                              Deadline deadline, std::string_view peer_name) {
  KILN_ASSIGN_OR_RETURN(ServerHandshake hs, ServerHandshake::start(token, purpose, peer_name));
  const std::string where = "handshake with " + std::string(peer_name);
  const std::string hello = hs.hello();
  KILN_RETURN_IF_ERROR(
      io_failure(net::write_all(fd, hello.data(), hello.size(), deadline, where + ": send hello")));
  std::string client_hello(kAuthClientHelloBytes, '\0');
  KILN_RETURN_IF_ERROR(io_failure(net::read_exact(fd, client_hello.data(), client_hello.size(),
                                                  deadline, where + ": receive hello")));
  std::string verdict;
  const Status verified = hs.verify_client_hello(client_hello, &verdict);
  // The verdict goes out either way, so a rejected client fails fast instead of timing out.
  const Status sent = io_failure(
      net::write_all(fd, verdict.data(), verdict.size(), deadline, where + ": send verdict"));
  KILN_RETURN_IF_ERROR(verified);
  return sent;
}

Status authenticate_as_client(int fd, std::string_view token, std::string_view purpose,
                              Deadline deadline, std::string_view peer_name) {
  KILN_RETURN_IF_ERROR(check_token(token, purpose));
  const std::string where = "handshake with " + std::string(peer_name);
  std::string server_hello(kAuthServerHelloBytes, '\0');
  KILN_RETURN_IF_ERROR(io_failure(net::read_exact(fd, server_hello.data(), server_hello.size(),
                                                  deadline, where + ": receive hello")));
  KILN_RETURN_IF_ERROR(check_header(server_hello, MessageType::kServerHello, peer_name));
  const auto* nonce_server =
      reinterpret_cast<const uint8_t*>(server_hello.data()) + kAuthHeaderBytes;
  KILN_ASSIGN_OR_RETURN(const Nonce nonce_client, fresh_nonce());

  std::string client_hello = header(MessageType::kClientHello, 0);
  append(&client_hello, nonce_client.data(), nonce_client.size());
  const Mac mine = proof(token, purpose, "client", nonce_server, nonce_client.data());
  append(&client_hello, mine.data(), mine.size());
  KILN_RETURN_IF_ERROR(io_failure(net::write_all(fd, client_hello.data(), client_hello.size(),
                                                 deadline, where + ": send hello")));

  std::string verdict(kAuthVerdictBytes, '\0');
  KILN_RETURN_IF_ERROR(io_failure(
      net::read_exact(fd, verdict.data(), verdict.size(), deadline, where + ": receive verdict")));
  KILN_RETURN_IF_ERROR(check_header(verdict, MessageType::kVerdict, peer_name));
  const uint8_t flag = static_cast<uint8_t>(verdict[kFlagOffset]);
  if (flag == static_cast<uint8_t>(Verdict::kBadProof)) {
    return Status::aborted(where + ": the peer rejected our proof: the job tokens differ");
  }
  if (flag == static_cast<uint8_t>(Verdict::kMalformed)) {
    return Status::aborted(where + ": the peer rejected our hello as malformed");
  }
  if (flag != static_cast<uint8_t>(Verdict::kAccepted)) {
    return Status::aborted(where + ": unknown verdict " + std::to_string(flag));
  }
  const Mac expected = proof(token, purpose, "server", nonce_server, nonce_client.data());
  if (!same_mac(expected, verdict.data() + kAuthHeaderBytes)) {
    return Status::aborted(where + ": bad proof: the peer does not hold this job's token");
  }
  return Status();
}

}  // namespace kiln::comm
