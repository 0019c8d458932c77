// The job-token handshake: a mutual HMAC-SHA256 challenge-response that proves both ends of a
// fresh TCP connection hold the same job token, without the token ever crossing the wire.
//
// Shared by the rendezvous store ("kiln-store/1") and the TCP transport ("kiln-comm/1"); the
// purpose string separates the two domains so that a proof made for one is worthless for the
// other. The message grammar is at the top of auth.cc and in docs/store.md.
//
// Invariants:
//   - each side proves with a nonce the other side chose freshly (RAND_bytes), so a recorded
//     proof cannot be replayed on another connection;
//   - the proofs of the two roles differ (the role is part of the MAC input), so a proof cannot
//     be reflected back at its sender;
//   - the server never sends a proof before the client has proved itself, so an unauthenticated
//     client learns nothing about the token;
//   - proofs are compared in constant time (CRYPTO_memcmp).
//
// Two ways in: the blocking functions for a connected socket, and ServerHandshake, which does no
// I/O at all so that an event loop can run many handshakes at once without one slow peer
// stalling the others.
#ifndef KILN_COMM_AUTH_H_
#define KILN_COMM_AUTH_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include <kiln/base/clock.h>
#include <kiln/base/result.h>
#include <kiln/base/status.h>

namespace kiln::comm {

// The purposes in use; one per protocol that authenticates connections.
inline constexpr std::string_view kAuthPurposeStore = "kiln-store/1";
inline constexpr std::string_view kAuthPurposeComm = "kiln-comm/1";

// 32 bytes: the HMAC-SHA256 output size, and 256 bits of nonce make a collision between two
// connections of one job negligible.
inline constexpr size_t kAuthNonceBytes = 32;
inline constexpr size_t kAuthMacBytes = 32;

// Sizes of the three handshake messages (grammar in auth.cc): header (magic, version, type,
// flag, reserved) of 8 bytes, then the fixed-size fields.
inline constexpr size_t kAuthHeaderBytes = 8;
inline constexpr size_t kAuthServerHelloBytes = kAuthHeaderBytes + kAuthNonceBytes;
inline constexpr size_t kAuthClientHelloBytes = kAuthHeaderBytes + kAuthNonceBytes + kAuthMacBytes;
inline constexpr size_t kAuthVerdictBytes = kAuthHeaderBytes + kAuthMacBytes;

// Mutual challenge-response over a connected socket: each side sends a fresh 32-byte random
// nonce (RAND_bytes) and proves it holds `token` by returning HMAC-SHA256(token, purpose ||
// role || nonce_server || nonce_client); the token itself never crosses the wire; comparison in
// constant time (CRYPTO_memcmp). `purpose` separates domains ("kiln-store/1", "kiln-comm/1").
// Fails with kAborted naming the peer address and why (bad proof, wrong protocol magic/version,
// short read); kTimeout at the deadline. An empty token is kInvalidArgument.
// REQUIRES: `fd` is a connected stream socket (blocking or not); `purpose` is not empty.
Status authenticate_as_client(int fd, std::string_view token, std::string_view purpose,
                              Deadline deadline, std::string_view peer_name);
Status authenticate_as_server(int fd, std::string_view token, std::string_view purpose,
                              Deadline deadline, std::string_view peer_name);

// The server side of one handshake, without I/O. Usage:
//
//   Result<ServerHandshake> hs = ServerHandshake::start(token, purpose, peer);
//   send(hs->hello());                                      // kAuthServerHelloBytes
//   receive exactly kAuthClientHelloBytes into `hello`;
//   std::string verdict;
//   Status s = hs->verify_client_hello(hello, &verdict);
//   send(verdict);                                          // always: accept or reject
//   if (!s.ok()) close the connection.
//
// Not thread-safe; one object per connection.
class ServerHandshake {
 public:
  // Draws the server's nonce. kInvalidArgument for an empty token; kIoError if the random
  // generator fails. REQUIRES: `purpose` is not empty.
  static Result<ServerHandshake> start(std::string_view token, std::string_view purpose,
                                       std::string_view peer_name);

  // The first message, to send as soon as the connection is accepted.
  std::string hello() const;

  // Checks the client's hello (REQUIRES: exactly kAuthClientHelloBytes bytes) and fills
  // `*verdict` with the reply to send: the server's proof when the client proved it holds the
  // token, else a rejection that carries no proof. OK iff the client is authenticated; kAborted
  // naming the peer and the reason otherwise. May be called once.
  Status verify_client_hello(std::string_view client_hello, std::string* verdict);

 private:
  ServerHandshake(std::string token, std::string purpose, std::string peer_name)
      : token_(std::move(token)), purpose_(std::move(purpose)), peer_name_(std::move(peer_name)) {}

  std::string token_;
  std::string purpose_;
  std::string peer_name_;
  std::array<uint8_t, kAuthNonceBytes> nonce_server_{};
  bool verified_ = false;  // verify_client_hello() was called
};

}  // namespace kiln::comm

#endif  // KILN_COMM_AUTH_H_
