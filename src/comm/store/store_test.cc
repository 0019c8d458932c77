// The Store contract, run against both implementations: the in-process MemoryStore and a real
// StoreServer reached through TcpStoreClient. Then the server's own duties: refusing wrong
// tokens, surviving garbage and silent clients, and failing pending waits on stop().
#include <gtest/gtest.h>
#include <kiln/comm/store.h>

#include <algorithm>
#include <atomic>
#include <ostream>
#include <set>
#include <thread>

#include "comm/auth.h"
#include "comm/net/socket.h"
#include "comm/store/protocol.h"

namespace kiln::comm {
namespace {

constexpr std::string_view kToken = "store-test-token-3f9a2c";
// Generous bounds for "promptly" and "did not hang": CI machines are small and shared.
constexpr int64_t kPromptMs = 3000;
constexpr int64_t kLongMs = 30'000;

bool contains(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

std::unique_ptr<StoreServer> start_server(StoreServerOptions options = {}) {
  if (options.token.empty()) options.token = std::string(kToken);
  Result<std::unique_ptr<StoreServer>> server = StoreServer::start(options, Logger());
  KILN_CHECK(server.ok()) << server.status().to_string();
  return std::move(*server);
}

Result<std::unique_ptr<Store>> connect(int port, std::string_view token = kToken) {
  StoreClientOptions options;
  options.address = "127.0.0.1:" + std::to_string(port);
  options.token = std::string(token);
  options.connect_timeout_ms = 10'000;
  return connect_tcp_store(options);
}

enum class Backend { kMemory, kTcp };

// Names the backend in test names and ctest listings.
void PrintTo(Backend backend, std::ostream* os) {
  *os << (backend == Backend::kMemory ? "Memory" : "Tcp");
}

class StoreTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    if (GetParam() == Backend::kMemory) {
      memory_ = make_memory_store();
    } else {
      server_ = start_server();
    }
  }

  // A client of the store under test. TCP: a new connection, as each rank has its own; memory:
  // the one shared store. Owned by the fixture.
  Store* client() {
    if (memory_) return memory_.get();
    Result<std::unique_ptr<Store>> c = connect(server_->port());
    KILN_CHECK(c.ok()) << c.status().to_string();
    clients_.push_back(std::move(*c));
    return clients_.back().get();
  }

  Store& store() {
    if (first_ == nullptr) first_ = client();
    return *first_;
  }

  std::unique_ptr<Store> memory_;
  std::unique_ptr<StoreServer> server_;
  std::vector<std::unique_ptr<Store>> clients_;
  Store* first_ = nullptr;
};

INSTANTIATE_TEST_SUITE_P(Backends, StoreTest, ::testing::Values(Backend::kMemory, Backend::kTcp),
                         [](const ::testing::TestParamInfo<Backend>& param) {
                           return param.param == Backend::kMemory ? "Memory" : "Tcp";
                         });

TEST_P(StoreTest, SetThenGet) {
  ASSERT_TRUE(store().set("job/1/rank/0", "10.0.0.1:29500").ok());
  Result<std::string> v = store().get("job/1/rank/0", 0);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(*v, "10.0.0.1:29500");
  ASSERT_TRUE(store().set("job/1/rank/0", std::string("\0bin\xff", 5)).ok());
  EXPECT_EQ(store().get("job/1/rank/0", 0).value(), std::string("\0bin\xff", 5));
  ASSERT_TRUE(store().set("empty", "").ok());
  EXPECT_EQ(store().get("empty", 0).value(), "");
}

TEST_P(StoreTest, GetWaitsForALaterSetFromAnotherThread) {
  Store* setter = client();
  Store& getter = store();
  const Stopwatch watch;
  std::thread t([setter] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    EXPECT_TRUE(setter->set("late", "here").ok());
  });
  Result<std::string> v = getter.get("late", kLongMs);
  t.join();
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(*v, "here");
  EXPECT_GE(watch.elapsed_ms(), 140);
  EXPECT_LT(watch.elapsed_ms(), kLongMs / 2) << "woken by the set, not by the timeout";
}

TEST_P(StoreTest, GetTimesOutNamingTheKey) {
  const Stopwatch watch;
  Result<std::string> v = store().get("job/1/rank/7/addr", 200);
  EXPECT_TRUE(v.status().is_timeout()) << v.status().to_string();
  EXPECT_TRUE(contains(v.status().message(), "'job/1/rank/7/addr'")) << v.status().message();
  EXPECT_TRUE(contains(v.status().message(), "200 ms")) << v.status().message();
  EXPECT_GE(watch.elapsed_ms(), 195);
  EXPECT_LT(watch.elapsed_ms(), 200 + kPromptMs);
  // A zero timeout is an immediate check.
  EXPECT_TRUE(store().get("absent", 0).status().is_timeout());
}

TEST_P(StoreTest, WaitReturnsOnceEveryKeyIsSet) {
  ASSERT_TRUE(store().set("a", "1").ok());
  EXPECT_TRUE(store().wait({"a"}, 0).ok());
  EXPECT_TRUE(store().wait({}, 0).ok());
  Store* setter = client();
  std::thread t([setter] {
    for (const char* key : {"b", "c", "d"}) {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      EXPECT_TRUE(setter->set(key, "x").ok());
    }
  });
  const Status s = store().wait({"a", "b", "c", "d"}, kLongMs);
  t.join();
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST_P(StoreTest, WaitTimesOutNamingTheMissingKeys) {
  ASSERT_TRUE(store().set("rank/0", "up").ok());
  ASSERT_TRUE(store().set("rank/2", "up").ok());
  const Status s = store().wait({"rank/0", "rank/1", "rank/2", "rank/3"}, 150);
  EXPECT_TRUE(s.is_timeout()) << s.to_string();
  EXPECT_TRUE(contains(s.message(), "2 of 4 keys")) << s.message();
  EXPECT_TRUE(contains(s.message(), "'rank/1', 'rank/3'")) << s.message();
  EXPECT_FALSE(contains(s.message(), "'rank/0'")) << s.message();
}

TEST_P(StoreTest, ConcurrentAddsSumExactly) {
  constexpr int kThreads = 8;
  constexpr int kAddsPerThread = 200;
  std::vector<Store*> clients;
  for (int i = 0; i < kThreads; ++i)
    clients.push_back(client());
  std::vector<std::vector<int64_t>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      for (int j = 0; j < kAddsPerThread; ++j) {
        Result<int64_t> v = clients[i]->add("counter", 1);
        ASSERT_TRUE(v.ok()) << v.status().to_string();
        seen[i].push_back(*v);
      }
    });
  }
  for (std::thread& t : threads)
    t.join();
  // Atomic increments hand out every value from 1 to N exactly once.
  std::set<int64_t> all;
  for (const auto& values : seen)
    all.insert(values.begin(), values.end());
  ASSERT_EQ(all.size(), size_t{kThreads * kAddsPerThread});
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kThreads * kAddsPerThread);
  EXPECT_EQ(store().get("counter", 0).value(), std::to_string(kThreads * kAddsPerThread));
  EXPECT_EQ(store().add("counter", -kThreads * kAddsPerThread).value(), 0);
}

TEST_P(StoreTest, AddRejectsWhatIsNotAnInteger) {
  EXPECT_EQ(store().add("fresh", -5).value(), -5) << "absent counts as 0";
  ASSERT_TRUE(store().set("word", "seven").ok());
  Result<int64_t> r = store().add("word", 1);
  EXPECT_TRUE(r.status().is_invalid_argument()) << r.status().to_string();
  EXPECT_TRUE(contains(r.status().message(), "not a decimal integer")) << r.status().message();
  ASSERT_TRUE(store().set("big", std::to_string(INT64_MAX)).ok());
  EXPECT_TRUE(store().add("big", 1).status().is_invalid_argument()) << "overflow";
  EXPECT_EQ(store().get("big", 0).value(), std::to_string(INT64_MAX)) << "unchanged";
}

TEST_P(StoreTest, CompareAndSetSemantics) {
  // Absent key: an empty `expected` matches and sets.
  EXPECT_EQ(store().compare_and_set("gen", "", "1").value(), "1");
  // Absent key, non-empty expected: no change, returns empty.
  EXPECT_EQ(store().compare_and_set("other", "x", "y").value(), "");
  EXPECT_TRUE(store().get("other", 0).status().is_timeout()) << "still absent";
  // Match swaps.
  EXPECT_EQ(store().compare_and_set("gen", "1", "2").value(), "2");
  // Mismatch leaves the value and returns it.
  EXPECT_EQ(store().compare_and_set("gen", "1", "3").value(), "2");
  EXPECT_EQ(store().get("gen", 0).value(), "2");
}

TEST_P(StoreTest, RemoveReportsWhetherTheKeyExisted) {
  ASSERT_TRUE(store().set("k", "v").ok());
  EXPECT_TRUE(store().remove("k").value());
  EXPECT_FALSE(store().remove("k").value());
  EXPECT_TRUE(store().get("k", 0).status().is_timeout());
}

TEST_P(StoreTest, AddAndCompareAndSetWakeWaiters) {
  Store* writer = client();
  std::thread t([writer] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_TRUE(writer->add("n", 3).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_TRUE(writer->compare_and_set("flag", "", "set").ok());
  });
  EXPECT_EQ(store().get("n", kLongMs).value(), "3");
  EXPECT_EQ(store().get("flag", kLongMs).value(), "set");
  t.join();
}

TEST_P(StoreTest, LimitsAreEnforcedWithClearErrors) {
  const std::string long_key(kStoreKeyBytesMax + 1, 'k');
  Status s = store().set(long_key, "v");
  EXPECT_TRUE(s.is_invalid_argument());
  EXPECT_TRUE(contains(s.message(), "kStoreKeyBytesMax")) << s.message();
  s = store().set("k", std::string(kStoreValueBytesMax + 1, 'v'));
  EXPECT_TRUE(s.is_invalid_argument());
  EXPECT_TRUE(contains(s.message(), "kStoreValueBytesMax")) << s.message();
  EXPECT_TRUE(store().set("", "v").is_invalid_argument());
  EXPECT_TRUE(store().get(long_key, 0).status().is_invalid_argument());
  EXPECT_TRUE(store()
                  .compare_and_set("k", "", std::string(kStoreValueBytesMax + 1, 'v'))
                  .status()
                  .is_invalid_argument());
  std::vector<std::string> keys(kStoreWaitKeysMax + 1, "k");
  s = store().wait(keys, 0);
  EXPECT_TRUE(s.is_invalid_argument());
  EXPECT_TRUE(contains(s.message(), "kStoreWaitKeysMax")) << s.message();
  // The limits themselves are admitted.
  const std::string max_key(kStoreKeyBytesMax, 'k');
  const std::string max_value(kStoreValueBytesMax, 'v');
  ASSERT_TRUE(store().set(max_key, max_value).ok());
  EXPECT_EQ(store().get(max_key, 0).value(), max_value);
}

// ---- the server's own duties

class StoreServerTest : public ::testing::Test {
 protected:
  // A raw connection that completed the handshake, for speaking frames by hand.
  static net::Fd raw_client(int port) {
    Result<net::Fd> fd = net::connect_tcp({"127.0.0.1", port}, Deadline::after_ms(10'000));
    KILN_CHECK(fd.ok()) << fd.status().to_string();
    const Status s = authenticate_as_client(fd->get(), kToken, kAuthPurposeStore,
                                            Deadline::after_ms(10'000), "server");
    KILN_CHECK(s.ok()) << s.to_string();
    return std::move(*fd);
  }

  // Reads one response frame.
  static Result<store::Response> read_response(int fd) {
    const Deadline deadline = Deadline::after_ms(10'000);
    std::string frame(store::kFrameLengthBytes, '\0');
    KILN_RETURN_IF_ERROR(net::read_exact(fd, frame.data(), frame.size(), deadline, "prefix"));
    KILN_ASSIGN_OR_RETURN(const size_t body, store::decode_frame_length(frame));
    frame.resize(frame.size() + body);
    KILN_RETURN_IF_ERROR(
        net::read_exact(fd, frame.data() + store::kFrameLengthBytes, body, deadline, "body"));
    return store::decode_response(frame);
  }

  // True once the server has closed `fd` (EOF), waiting up to `timeout_ms`.
  static bool closed_by_server(int fd, int64_t timeout_ms) {
    char byte;
    return net::read_exact(fd, &byte, 1, Deadline::after_ms(timeout_ms), "eof").is_unavailable();
  }

  // A client works end to end.
  static void expect_serving(int port, const std::string& key) {
    Result<std::unique_ptr<Store>> c = connect(port);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    ASSERT_TRUE((*c)->set(key, "ok").ok());
    EXPECT_EQ((*c)->get(key, 0).value(), "ok");
  }
};

TEST_F(StoreServerTest, AWrongTokenIsRefusedAndTheServerKeepsServing) {
  std::unique_ptr<StoreServer> server = start_server();
  const Stopwatch watch;
  Result<std::unique_ptr<Store>> bad = connect(server->port(), "not-the-token");
  EXPECT_TRUE(bad.status().is_aborted()) << bad.status().to_string();
  EXPECT_TRUE(contains(bad.status().message(), "127.0.0.1:" + std::to_string(server->port())))
      << bad.status().message();
  EXPECT_LT(watch.elapsed_ms(), kPromptMs);
  expect_serving(server->port(), "after-bad-token");
}

TEST_F(StoreServerTest, GarbageAfterAGoodHandshakeDisconnectsOnlyThatClient) {
  std::unique_ptr<StoreServer> server = start_server();
  Result<std::unique_ptr<Store>> good = connect(server->port());
  ASSERT_TRUE(good.ok());
  ASSERT_TRUE((*good)->set("before", "1").ok());

  // A frame with a plausible length and a bad magic: an error response, then EOF.
  net::Fd raw = raw_client(server->port());
  const std::string garbage = std::string("\x08\x00\x00\x00", 4) + "GARBAGE!";
  ASSERT_TRUE(
      net::write_all(raw.get(), garbage.data(), garbage.size(), Deadline::after_ms(1000), "w")
          .ok());
  Result<store::Response> resp = read_response(raw.get());
  ASSERT_TRUE(resp.ok()) << resp.status().to_string();
  EXPECT_EQ(resp->code, StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(resp->message, "bad magic")) << resp->message;
  EXPECT_TRUE(closed_by_server(raw.get(), kPromptMs));

  // A length prefix beyond the frame limit: refused before anything is buffered.
  net::Fd huge = raw_client(server->port());
  ASSERT_TRUE(
      net::write_all(huge.get(), "\xff\xff\xff\xff", 4, Deadline::after_ms(1000), "w").ok());
  resp = read_response(huge.get());
  ASSERT_TRUE(resp.ok()) << resp.status().to_string();
  EXPECT_EQ(resp->code, StatusCode::kInvalidArgument);
  EXPECT_TRUE(closed_by_server(huge.get(), kPromptMs));

  // The well-behaved client never noticed.
  EXPECT_EQ((*good)->get("before", 0).value(), "1");
  ASSERT_TRUE((*good)->set("after", "2").ok());
  expect_serving(server->port(), "fresh-client");
}

TEST_F(StoreServerTest, SilentAndStalledClientsAreDroppedWithoutBlockingOthers) {
  StoreServerOptions options;
  options.handshake_timeout_ms = 1500;
  std::unique_ptr<StoreServer> server = start_server(options);
  const Stopwatch watch;
  Result<net::Fd> silent =
      net::connect_tcp({"127.0.0.1", server->port()}, Deadline::after_ms(5000));
  ASSERT_TRUE(silent.ok());
  Result<net::Fd> stalled =
      net::connect_tcp({"127.0.0.1", server->port()}, Deadline::after_ms(5000));
  ASSERT_TRUE(stalled.ok());
  ASSERT_TRUE(
      net::write_all(stalled->get(), "KLNA\x01\x02", 6, Deadline::after_ms(1000), "w").ok());

  // Others are served while the two hold their half-open handshakes.
  expect_serving(server->port(), "while-silent");
  EXPECT_LT(watch.elapsed_ms(), options.handshake_timeout_ms) << "served before the drop";

  for (net::Fd* fd : {&*silent, &*stalled}) {
    std::string hello(kAuthServerHelloBytes, '\0');
    ASSERT_TRUE(
        net::read_exact(fd->get(), hello.data(), hello.size(), Deadline::after_ms(5000), "h").ok());
    EXPECT_TRUE(closed_by_server(fd->get(), options.handshake_timeout_ms + kPromptMs));
  }
  EXPECT_GE(watch.elapsed_ms(), options.handshake_timeout_ms - 50);
  expect_serving(server->port(), "after-drop");
}

TEST_F(StoreServerTest, StopFailsPendingWaitsPromptly) {
  std::unique_ptr<StoreServer> server = start_server();
  Result<std::unique_ptr<Store>> a = connect(server->port());
  Result<std::unique_ptr<Store>> b = connect(server->port());
  ASSERT_TRUE(a.ok() && b.ok());
  Status get_status;
  Status wait_status;
  double stopped_at_ms = 0;
  double get_done_ms = 0;
  const Stopwatch watch;
  std::thread t1([&] {
    get_status = (*a)->get("never", kLongMs).status();
    get_done_ms = watch.elapsed_ms();
  });
  std::thread t2([&] { wait_status = (*b)->wait({"never", "either"}, kLongMs); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  stopped_at_ms = watch.elapsed_ms();
  server->stop();
  t1.join();
  t2.join();
  EXPECT_TRUE(get_status.is_unavailable()) << get_status.to_string();
  EXPECT_TRUE(wait_status.is_unavailable()) << wait_status.to_string();
  EXPECT_TRUE(contains(get_status.message(), "127.0.0.1:" + std::to_string(server->port())))
      << get_status.message();
  EXPECT_LT(get_done_ms - stopped_at_ms, kPromptMs);
  // The connection is gone for good, and later calls say so at once.
  const Status later = (*a)->set("k", "v");
  EXPECT_TRUE(later.is_unavailable()) << later.to_string();
  EXPECT_TRUE(contains(later.message(), "connection lost")) << later.message();
  server->stop();  // idempotent
}

TEST_F(StoreServerTest, StartValidatesItsOptionsAndNamesTheAddress) {
  StoreServerOptions no_token;
  EXPECT_TRUE(StoreServer::start(no_token, Logger()).status().is_invalid_argument());
  std::unique_ptr<StoreServer> first = start_server();
  StoreServerOptions same_port;
  same_port.token = std::string(kToken);
  same_port.port = first->port();
  const Status s = StoreServer::start(same_port, Logger()).status();
  EXPECT_TRUE(s.is_io_error()) << s.to_string();
  EXPECT_TRUE(contains(s.message(), "127.0.0.1")) << s.message();
  EXPECT_TRUE(contains(s.message(), std::to_string(first->port()))) << s.message();
}

TEST_F(StoreServerTest, AClientThatCannotReachTheServerIsUnavailable) {
  int port = 0;
  {
    // A port that was free a moment ago and has nobody listening now.
    Result<net::Fd> probe = net::listen_tcp("127.0.0.1", 0, 0, 1, &port);
    ASSERT_TRUE(probe.ok());
  }
  StoreClientOptions options;
  options.address = "127.0.0.1:" + std::to_string(port);
  options.token = std::string(kToken);
  options.connect_timeout_ms = 200;
  const Status s = connect_tcp_store(options).status();
  EXPECT_TRUE(s.is_unavailable()) << s.to_string();
  options.token.clear();
  EXPECT_TRUE(connect_tcp_store(options).status().is_invalid_argument());
}

TEST_F(StoreServerTest, ServerLimitsAreEnforced) {
  StoreServerOptions options;
  options.keys_max = 2;
  options.clients_max = 2;
  std::unique_ptr<StoreServer> server = start_server(options);
  Result<std::unique_ptr<Store>> a = connect(server->port());
  Result<std::unique_ptr<Store>> b = connect(server->port());
  ASSERT_TRUE(a.ok() && b.ok());
  // A third connection is closed at once rather than left to hang.
  const Stopwatch watch;
  Result<std::unique_ptr<Store>> c = connect(server->port());
  EXPECT_TRUE(c.status().is_aborted()) << c.status().to_string();
  EXPECT_LT(watch.elapsed_ms(), kPromptMs);

  ASSERT_TRUE((*a)->set("k1", "v").ok());
  ASSERT_TRUE((*b)->set("k2", "v").ok());
  ASSERT_TRUE((*a)->set("k1", "replaced").ok()) << "replacing a key adds none";
  const Status s = (*a)->set("k3", "v");
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  EXPECT_TRUE(contains(s.message(), "keys_max")) << s.message();
  EXPECT_TRUE((*a)->remove("k1").value());
  EXPECT_TRUE((*a)->set("k3", "v").ok()) << "room again after a remove";
}

// The rendezvous a job does at start-up: every rank publishes its key and waits for all.
TEST_F(StoreServerTest, ManyRanksRendezvousAtOnce) {
  constexpr int kRanks = 32;
  std::unique_ptr<StoreServer> server = start_server();
  std::vector<std::string> keys;
  for (int r = 0; r < kRanks; ++r)
    keys.push_back("job/9/rank/" + std::to_string(r));
  std::atomic<int> ok{0};
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      Result<std::unique_ptr<Store>> c = connect(server->port());
      ASSERT_TRUE(c.ok()) << c.status().to_string();
      ASSERT_TRUE((*c)->set(keys[r], "addr-" + std::to_string(r)).ok());
      const Status s = (*c)->wait(keys, kLongMs);
      ASSERT_TRUE(s.ok()) << s.to_string();
      EXPECT_EQ((*c)->get(keys[(r + 1) % kRanks], 0).value(),
                "addr-" + std::to_string((r + 1) % kRanks));
      ok.fetch_add(1);
    });
  }
  for (std::thread& t : ranks)
    t.join();
  EXPECT_EQ(ok.load(), kRanks);
}

}  // namespace
}  // namespace kiln::comm
