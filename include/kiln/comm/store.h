// Rendezvous store: the small key-value service ranks use to find each other.
//
// Ranks publish their addresses and labels under job-scoped keys, wait for everyone else's, and
// agree on small facts (generation numbers, abort reasons). The store is not on the data path of
// any collective, so it favours simplicity over throughput: one request, one response.
//
// Implementations:
//   - TcpStoreClient: talks to a StoreServer over TCP; the connection proves it holds the job
//     token (mutual HMAC-SHA256 challenge, the token never crosses the wire).
//   - StoreServer: the TCP server, runnable standalone (`kiln store --port P`) or embedded (the
//     coordinator and `kiln comm-bench` host one in-process).
//   - MemoryStore: in-process, for tests that run ranks as threads.
//
// Every call that can block takes a timeout; calls that do not name one use the store's default.
// All implementations are thread-safe.
#ifndef KILN_COMM_STORE_H_
#define KILN_COMM_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/base/log.h>
#include <kiln/base/result.h>
#include <kiln/base/status.h>

namespace kiln::comm {

// Limits on what a store holds; a request beyond them is kInvalidArgument naming the limit.
inline constexpr size_t kStoreKeyBytesMax = 1024;          // keys are short paths
inline constexpr size_t kStoreValueBytesMax = 1 << 20;     // rendezvous values are small
inline constexpr size_t kStoreWaitKeysMax = 4096;          // one wait covers a world at most
inline constexpr int64_t kStoreDefaultTimeoutMs = 60'000;  // bootstrap of a large job is slow

class Store {
 public:
  virtual ~Store() = default;

  // Sets `key` to `value`, replacing any previous value, and wakes waiters on `key`.
  virtual Status set(std::string_view key, std::string_view value) = 0;

  // The value of `key`, waiting up to `timeout_ms` for it to be set. kTimeout names the key.
  virtual Result<std::string> get(std::string_view key, int64_t timeout_ms) = 0;

  // Waits until every key in `keys` is set. kTimeout names the keys still missing.
  virtual Status wait(const std::vector<std::string>& keys, int64_t timeout_ms) = 0;

  // Atomically adds `delta` to the integer stored at `key` (absent counts as 0) and returns the
  // new value. kInvalidArgument if the current value is not a decimal integer.
  virtual Result<int64_t> add(std::string_view key, int64_t delta) = 0;

  // Atomically: if the value of `key` equals `expected` (an empty `expected` matches an absent
  // key), set it to `desired`. Returns the value after the call: `desired` on success, the
  // current value (empty if absent) on failure.
  virtual Result<std::string> compare_and_set(std::string_view key, std::string_view expected,
                                              std::string_view desired) = 0;

  // Removes `key`. Returns true if it existed.
  virtual Result<bool> remove(std::string_view key) = 0;
};

// An in-process store. Thread-safe.
std::unique_ptr<Store> make_memory_store();

struct StoreClientOptions {
  std::string address;                  // "host:port"
  std::string token;                    // the job token; required
  int64_t connect_timeout_ms = 30'000;  // includes retries with backoff while the server starts
  int64_t request_timeout_ms = kStoreDefaultTimeoutMs;  // for calls without their own timeout
};

// Connects (retrying with backoff until connect_timeout_ms) and authenticates.
// kUnavailable when the server cannot be reached in time; kAborted naming the server when the
// handshake fails (wrong token).
Result<std::unique_ptr<Store>> connect_tcp_store(const StoreClientOptions& options);

struct StoreServerOptions {
  std::string bind_address = "127.0.0.1";
  int port = 0;       // 0 picks a free port
  std::string token;  // required; clients must prove they hold it
  size_t clients_max = 4096;
  size_t keys_max = 1 << 20;
  // Keys and values together. A 4096-rank job publishes a few MiB of addresses and labels; 1 GiB
  // leaves room for hundreds of such jobs and bounds what a runaway client can make us hold.
  size_t bytes_max = size_t{1} << 30;
  int64_t handshake_timeout_ms = 10'000;  // a client that does not finish the handshake is dropped
};

// The TCP store server. Serves on a background thread from start() until stop() or destruction.
class StoreServer {
 public:
  // Binds and starts serving. kIoError names the address when binding fails; kInvalidArgument
  // when the token is empty.
  static Result<std::unique_ptr<StoreServer>> start(const StoreServerOptions& options, Logger log);
  virtual ~StoreServer() = default;
  virtual int port() const = 0;
  // Stops serving and closes every connection; pending waits fail on the clients. Idempotent.
  virtual void stop() = 0;
};

}  // namespace kiln::comm

#endif  // KILN_COMM_STORE_H_
