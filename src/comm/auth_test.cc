// Tests of the job-token handshake over socketpairs: success, wrong tokens, garbage, peers that
// close or stall, replay, and that the token never reaches the wire.
#include "comm/auth.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <string>
#include <thread>

#include "comm/net/socket.h"

namespace kiln::comm {
namespace {

constexpr std::string_view kToken = "t0k3n-of-job-42-e1b0c9f3a7d24d1b";
constexpr int64_t kTestTimeoutMs = 10'000;  // a hang fails the test instead of stalling ctest

struct Pair {
  net::Fd a;
  net::Fd b;
};

Pair socket_pair() {
  int fds[2] = {-1, -1};
  KILN_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0) << "socketpair";
  return {net::Fd(fds[0]), net::Fd(fds[1])};
}

struct Outcome {
  Status client;
  Status server;
  double elapsed_ms = 0;
};

Outcome handshake(std::string_view client_token, std::string_view server_token,
                  std::string_view client_purpose = kAuthPurposeStore,
                  std::string_view server_purpose = kAuthPurposeStore) {
  Pair p = socket_pair();
  Outcome out;
  const Stopwatch watch;
  std::thread server([&] {
    out.server = authenticate_as_server(p.b.get(), server_token, server_purpose,
                                        Deadline::after_ms(kTestTimeoutMs), "client-peer");
    // A real server closes a connection it rejected; do the same so the client never waits.
    if (!out.server.ok()) p.b.reset();
  });
  out.client = authenticate_as_client(p.a.get(), client_token, client_purpose,
                                      Deadline::after_ms(kTestTimeoutMs), "server-peer");
  if (!out.client.ok()) p.a.reset();
  server.join();
  out.elapsed_ms = watch.elapsed_ms();
  return out;
}

TEST(AuthTest, SameTokenSucceedsBothWays) {
  const Outcome o = handshake(kToken, kToken);
  EXPECT_TRUE(o.client.ok()) << o.client.to_string();
  EXPECT_TRUE(o.server.ok()) << o.server.to_string();
}

TEST(AuthTest, WrongTokenFailsOnBothSidesWithoutHanging) {
  const Outcome o = handshake(kToken, "another-job-token");
  EXPECT_TRUE(o.client.is_aborted()) << o.client.to_string();
  EXPECT_TRUE(o.server.is_aborted()) << o.server.to_string();
  EXPECT_NE(o.client.message().find("server-peer"), std::string::npos) << o.client.message();
  EXPECT_NE(o.client.message().find("tokens differ"), std::string::npos) << o.client.message();
  EXPECT_NE(o.server.message().find("client-peer"), std::string::npos) << o.server.message();
  EXPECT_NE(o.server.message().find("bad proof"), std::string::npos) << o.server.message();
  EXPECT_LT(o.elapsed_ms, kTestTimeoutMs / 2) << "a rejection must be prompt, not a timeout";
}

TEST(AuthTest, PurposesSeparateDomains) {
  const Outcome o = handshake(kToken, kToken, kAuthPurposeComm, kAuthPurposeStore);
  EXPECT_TRUE(o.client.is_aborted()) << o.client.to_string();
  EXPECT_TRUE(o.server.is_aborted()) << o.server.to_string();
}

TEST(AuthTest, EmptyTokenIsInvalidArgument) {
  Pair p = socket_pair();
  EXPECT_TRUE(
      authenticate_as_client(p.a.get(), "", kAuthPurposeStore, Deadline::after_ms(100), "peer")
          .is_invalid_argument());
  EXPECT_TRUE(
      authenticate_as_server(p.b.get(), "", kAuthPurposeStore, Deadline::after_ms(100), "peer")
          .is_invalid_argument());
  EXPECT_TRUE(ServerHandshake::start("", kAuthPurposeStore, "peer").status().is_invalid_argument());
}

TEST(AuthTest, ClientFacingGarbageFailsCleanly) {
  Pair p = socket_pair();
  const std::string garbage = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
  ASSERT_GE(garbage.size(), kAuthServerHelloBytes);
  ASSERT_TRUE(
      net::write_all(p.b.get(), garbage.data(), garbage.size(), Deadline::after_ms(1000), "garbage")
          .ok());
  const Status s = authenticate_as_client(p.a.get(), kToken, kAuthPurposeStore,
                                          Deadline::after_ms(kTestTimeoutMs), "10.0.0.9:29500");
  EXPECT_TRUE(s.is_aborted()) << s.to_string();
  EXPECT_NE(s.message().find("10.0.0.9:29500"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("bad magic"), std::string::npos) << s.message();
}

TEST(AuthTest, ServerFacingGarbageRejectsWithAVerdict) {
  Pair p = socket_pair();
  Status server;
  std::thread t([&] {
    server = authenticate_as_server(p.b.get(), kToken, kAuthPurposeStore,
                                    Deadline::after_ms(kTestTimeoutMs), "client-peer");
  });
  std::string hello(kAuthServerHelloBytes, '\0');
  ASSERT_TRUE(
      net::read_exact(p.a.get(), hello.data(), hello.size(), Deadline::after_ms(1000), "h").ok());
  const std::string garbage(kAuthClientHelloBytes, 'x');
  ASSERT_TRUE(
      net::write_all(p.a.get(), garbage.data(), garbage.size(), Deadline::after_ms(1000), "g")
          .ok());
  std::string verdict(kAuthVerdictBytes, '\0');
  ASSERT_TRUE(
      net::read_exact(p.a.get(), verdict.data(), verdict.size(), Deadline::after_ms(1000), "v")
          .ok());
  t.join();
  EXPECT_TRUE(server.is_aborted()) << server.to_string();
  EXPECT_NE(server.message().find("bad magic"), std::string::npos) << server.message();
  EXPECT_EQ(verdict.substr(0, 4), "KLNA");
  EXPECT_EQ(verdict[6], 2) << "flag 2: rejected as malformed";
  EXPECT_EQ(verdict.substr(kAuthHeaderBytes), std::string(kAuthMacBytes, '\0'))
      << "a rejection carries no proof";
}

TEST(AuthTest, WrongVersionIsNamed) {
  Pair p = socket_pair();
  std::string hello = "KLNA";
  hello += {static_cast<char>(9), 1, 0, 0};
  hello.resize(kAuthServerHelloBytes, 'n');
  ASSERT_TRUE(
      net::write_all(p.b.get(), hello.data(), hello.size(), Deadline::after_ms(1000), "h").ok());
  const Status s = authenticate_as_client(p.a.get(), kToken, kAuthPurposeStore,
                                          Deadline::after_ms(kTestTimeoutMs), "peer");
  EXPECT_TRUE(s.is_aborted()) << s.to_string();
  EXPECT_NE(s.message().find("version 9"), std::string::npos) << s.message();
}

TEST(AuthTest, PeerClosingMidHandshakeFailsCleanly) {
  {
    // The server sends half its hello and goes away.
    Pair p = socket_pair();
    ASSERT_TRUE(net::write_all(p.b.get(), "KLNA\x01", 5, Deadline::after_ms(1000), "h").ok());
    p.b.reset();
    const Status s = authenticate_as_client(p.a.get(), kToken, kAuthPurposeStore,
                                            Deadline::after_ms(kTestTimeoutMs), "server-peer");
    EXPECT_TRUE(s.is_aborted()) << s.to_string();
    EXPECT_NE(s.message().find("server-peer"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("closed by peer"), std::string::npos) << s.message();
  }
  {
    // The client reads the server's hello and goes away.
    Pair p = socket_pair();
    p.a.reset();
    const Status s = authenticate_as_server(p.b.get(), kToken, kAuthPurposeStore,
                                            Deadline::after_ms(kTestTimeoutMs), "client-peer");
    EXPECT_TRUE(s.is_aborted()) << s.to_string();
    EXPECT_NE(s.message().find("client-peer"), std::string::npos) << s.message();
  }
}

TEST(AuthTest, SilentPeerHitsTheDeadline) {
  Pair p = socket_pair();
  const Stopwatch watch;
  const Status client = authenticate_as_client(p.a.get(), kToken, kAuthPurposeStore,
                                               Deadline::after_ms(200), "silent-server");
  EXPECT_TRUE(client.is_timeout()) << client.to_string();
  EXPECT_NE(client.message().find("silent-server"), std::string::npos) << client.message();
  const Status server = authenticate_as_server(p.b.get(), kToken, kAuthPurposeStore,
                                               Deadline::after_ms(200), "silent-client");
  EXPECT_TRUE(server.is_timeout()) << server.to_string();
  EXPECT_GE(watch.elapsed_ms(), 400);
  EXPECT_LT(watch.elapsed_ms(), 5000);
}

// Relays one handshake between two socketpairs and records every byte either side wrote.
TEST(AuthTest, TheTokenNeverCrossesTheWire) {
  Pair client_side = socket_pair();
  Pair server_side = socket_pair();
  std::string wire;
  auto relay = [&wire](int from, int to, size_t bytes) {
    std::string buf(bytes, '\0');
    const Deadline deadline = Deadline::after_ms(kTestTimeoutMs);
    if (!net::read_exact(from, buf.data(), buf.size(), deadline, "relay").ok()) return false;
    wire += buf;
    return net::write_all(to, buf.data(), buf.size(), deadline, "relay").ok();
  };
  Status client;
  Status server;
  std::thread c([&] {
    client = authenticate_as_client(client_side.a.get(), kToken, kAuthPurposeStore,
                                    Deadline::after_ms(kTestTimeoutMs), "s");
  });
  std::thread s([&] {
    server = authenticate_as_server(server_side.a.get(), kToken, kAuthPurposeStore,
                                    Deadline::after_ms(kTestTimeoutMs), "c");
  });
  EXPECT_TRUE(relay(server_side.b.get(), client_side.b.get(), kAuthServerHelloBytes));
  EXPECT_TRUE(relay(client_side.b.get(), server_side.b.get(), kAuthClientHelloBytes));
  EXPECT_TRUE(relay(server_side.b.get(), client_side.b.get(), kAuthVerdictBytes));
  c.join();
  s.join();
  ASSERT_TRUE(client.ok()) << client.to_string();
  ASSERT_TRUE(server.ok()) << server.to_string();
  EXPECT_EQ(wire.size(), kAuthServerHelloBytes + kAuthClientHelloBytes + kAuthVerdictBytes);
  EXPECT_EQ(wire.find(kToken), std::string::npos);
  // Not even a recognisable piece of it: no 8-byte window of the token appears.
  for (size_t i = 0; i + 8 <= kToken.size(); ++i) {
    EXPECT_EQ(wire.find(kToken.substr(i, 8)), std::string::npos) << "token bytes at " << i;
  }
}

// A client hello recorded from one connection is worthless on the next: the server's nonce is
// fresh, so the recorded proof no longer matches.
TEST(AuthTest, ARecordedProofCannotBeReplayed) {
  Pair p = socket_pair();
  Status client;
  std::thread c([&] {
    client = authenticate_as_client(p.a.get(), kToken, kAuthPurposeStore,
                                    Deadline::after_ms(kTestTimeoutMs), "s");
  });
  Result<ServerHandshake> first = ServerHandshake::start(kToken, kAuthPurposeStore, "c");
  ASSERT_TRUE(first.ok());
  const std::string hello = first->hello();
  ASSERT_EQ(hello.size(), kAuthServerHelloBytes);
  const Deadline deadline = Deadline::after_ms(kTestTimeoutMs);
  ASSERT_TRUE(net::write_all(p.b.get(), hello.data(), hello.size(), deadline, "h").ok());
  std::string recorded(kAuthClientHelloBytes, '\0');
  ASSERT_TRUE(net::read_exact(p.b.get(), recorded.data(), recorded.size(), deadline, "r").ok());
  std::string verdict;
  EXPECT_TRUE(first->verify_client_hello(recorded, &verdict).ok());
  ASSERT_TRUE(net::write_all(p.b.get(), verdict.data(), verdict.size(), deadline, "v").ok());
  c.join();
  EXPECT_TRUE(client.ok()) << client.to_string();

  Result<ServerHandshake> second = ServerHandshake::start(kToken, kAuthPurposeStore, "replayer");
  ASSERT_TRUE(second.ok());
  EXPECT_NE(second->hello(), hello) << "every handshake draws a fresh nonce";
  const Status replayed = second->verify_client_hello(recorded, &verdict);
  EXPECT_TRUE(replayed.is_aborted()) << replayed.to_string();
  EXPECT_EQ(verdict[6], 1) << "flag 1: rejected, bad proof";
}

}  // namespace
}  // namespace kiln::comm
