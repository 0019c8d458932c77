// StoreServer: the TCP rendezvous store, one thread, one poll() loop, no thread per client.
//
// Every socket is non-blocking. Each turn of the loop polls the wake-up eventfd, the listening
// socket and every connection, handles what is ready, then expires deadlines. A connection moves
// forward only:
//
//   kHandshake --(client proved the token)--> kServing --(malformed frame)--> kClosing
//        |                                        |                              |
//        +--(bad proof)--> kClosing               +--(peer gone)--> closed  <----+ (flushed or
//        +--(deadline, peer gone)--> closed                                        deadline)
//
// The handshake is ServerHandshake (comm/auth.h) fed from the connection's buffers, so a client
// that stalls mid-handshake costs one buffer of kAuthClientHelloBytes until its deadline, and
// never a blocked thread.
//
// A serving connection carries one request at a time: the loop reads a frame only when the
// connection has no response waiting to go out and no parked request. So its input buffer holds
// at most one frame (kStoreFrameBytesMax) and its output buffer at most one response. A GET or
// WAIT whose keys are missing is parked on the connection with a deadline; every SET, ADD or CAS
// answers the parked requests it completes, and the deadline answers the rest with kTimeout.
// While a request is parked the loop polls only for the peer hanging up.
//
// stop() wakes the loop through the eventfd; the loop answers parked requests with kUnavailable
// (best effort, without blocking), closes every socket and returns, and stop() joins it.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>

#include "comm/auth.h"
#include "comm/net/socket.h"
#include "comm/store/protocol.h"
#include "comm/store/table.h"

namespace kiln::comm {
namespace {

using store::MessageType;
using store::Request;
using store::Response;

// The kernel caps the backlog at net.core.somaxconn; asking for this many lets a whole job's
// ranks connect at once without SYN retries where the kernel allows it.
constexpr int kListenBacklogMax = 4096;
// Accepted per turn of the loop, so that a connection storm cannot starve served clients.
constexpr int kAcceptsPerTurnMax = 64;
// When accept() fails (EMFILE, ENOBUFS) the listening socket stays readable; pausing accepts
// this long keeps the loop from spinning on it.
constexpr int64_t kAcceptPauseMs = 100;
// Bytes read per recv() call; one frame may take several calls.
constexpr size_t kReadChunkBytes = 64 << 10;
// After a frame larger than this, the connection's input buffer is released rather than kept.
constexpr size_t kIdleBufferBytesMax = 64 << 10;
// A connection being closed after an error response gets this long to take the response.
constexpr int64_t kClosingFlushMs = 1000;
// Warnings go through a limiter: a misbehaving job can fail thousands of handshakes a second.
constexpr int64_t kLogIntervalMs = 1000;
constexpr int64_t kLogBurst = 10;

enum class Phase { kHandshake, kServing, kClosing };

// A GET or WAIT waiting for keys.
struct Parked {
  MessageType type = MessageType::kGet;
  std::string key;                          // GET
  std::vector<std::string> keys;            // WAIT, in the order asked
  std::unordered_set<std::string> missing;  // keys not yet set
  int64_t timeout_ms = 0;
  Deadline deadline = Deadline::never();
};

struct Connection {
  net::Fd fd;
  std::string peer;
  Phase phase = Phase::kHandshake;
  std::optional<ServerHandshake> handshake;  // set while kHandshake
  Deadline deadline = Deadline::never();     // of the handshake, or of the closing flush
  std::string in;                            // bytes of the handshake or frame being read
  std::string out;                           // bytes to send
  size_t out_sent = 0;
  std::optional<Parked> parked;
  bool dead = false;  // to be removed at the end of this turn

  bool has_output() const { return out_sent < out.size(); }
};

class StoreServerImpl final : public StoreServer {
 public:
  StoreServerImpl(const StoreServerOptions& options, Logger log, net::Fd listener, int port,
                  net::Fd wake)
      : options_(options),
        log_(std::move(log)),
        listener_(std::move(listener)),
        port_(port),
        wake_(std::move(wake)),
        address_(net::HostPort{options.bind_address, port}.to_string()),
        table_({options.keys_max, options.bytes_max}),
        limiter_(kLogIntervalMs, kLogBurst),
        scratch_(kReadChunkBytes, '\0') {}

  ~StoreServerImpl() override { stop(); }

  void start_thread() {
    thread_ = std::thread([this] { run(); });
  }

  int port() const override { return port_; }

  void stop() override {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (!thread_.joinable()) return;
    stopping_.store(true);
    const uint64_t one = 1;
    // The eventfd counter cannot overflow from one write; a failure leaves the loop to notice
    // stopping_ at its next poll timeout.
    [[maybe_unused]] const ssize_t n = ::write(wake_.get(), &one, sizeof(one));
    thread_.join();
  }

 private:
  void run();
  void build_poll_set(std::vector<pollfd>* fds) const;
  int64_t poll_timeout_ms() const;
  void accept_ready();
  void handle(Connection& c, short revents);
  void read_handshake(Connection& c);
  void read_frames(Connection& c);
  void execute(Connection& c, Request req);
  void park(Connection& c, Request req);
  void wake_parked(std::string_view key);
  static Status timeout_status(const Parked& p);
  void expire_deadlines();
  void respond(Connection& c, const Response& resp);
  void flush(Connection& c);
  void close_after_flush(Connection& c);
  void drop(Connection& c, std::string_view why);
  void shut_down();
  void warn(std::string_view msg, const Connection& c, std::string_view why);

  const StoreServerOptions options_;
  const Logger log_;
  net::Fd listener_;
  const int port_;
  net::Fd wake_;  // eventfd; stop() writes it
  const std::string address_;
  store::Table table_;  // only the loop thread touches it
  LogRateLimiter limiter_;
  std::string scratch_;  // recv buffer of kReadChunkBytes, reused
  std::vector<std::unique_ptr<Connection>> conns_;
  Deadline accept_paused_until_ = Deadline::after_ms(0);

  std::mutex stop_mu_;  // serialises stop()
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

void StoreServerImpl::warn(std::string_view msg, const Connection& c, std::string_view why) {
  int64_t suppressed = 0;
  if (limiter_.allow(&suppressed)) {
    log_.warn(msg, {{"peer", c.peer}, {"why", why}, {"suppressed", suppressed}});
  }
}

void StoreServerImpl::run() {
  std::vector<pollfd> fds;
  while (!stopping_.load()) {
    build_poll_set(&fds);
    const int rc = ::poll(fds.data(), fds.size(), static_cast<int>(poll_timeout_ms()));
    if (rc < 0 && errno != EINTR) {
      log_.error("store poll failed; stopping", {{"error", std::strerror(errno)}});
      break;
    }
    if (rc > 0) {
      if (fds[0].revents != 0) break;  // stop()
      if (fds[1].revents != 0) accept_ready();
      // conns_ may have grown in accept_ready(); fds[i + 2] belongs to conns_[i] for the ones
      // that were polled.
      for (size_t i = 0; i + 2 < fds.size(); ++i) {
        if (fds[i + 2].revents != 0 && !conns_[i]->dead) handle(*conns_[i], fds[i + 2].revents);
      }
    }
    expire_deadlines();
    std::erase_if(conns_, [](const std::unique_ptr<Connection>& c) { return c->dead; });
  }
  shut_down();
}

void StoreServerImpl::build_poll_set(std::vector<pollfd>* fds) const {
  fds->clear();
  fds->push_back({wake_.get(), POLLIN, 0});
  fds->push_back({accept_paused_until_.expired() ? listener_.get() : -1, POLLIN, 0});
  for (const std::unique_ptr<Connection>& c : conns_) {
    short events = 0;
    if (c->has_output()) {
      events = POLLOUT;
    } else if (c->phase == Phase::kClosing) {
      events = POLLRDHUP;
    } else if (c->parked) {
      events = POLLRDHUP;  // only to notice the peer leaving; the next request waits
    } else {
      events = POLLIN;
    }
    fds->push_back({c->fd.get(), static_cast<short>(events | POLLRDHUP), 0});
  }
}

int64_t StoreServerImpl::poll_timeout_ms() const {
  // Deadlines are re-checked every turn; the cap also bounds how late a paused accept resumes.
  int64_t timeout = 1000;
  if (!accept_paused_until_.expired()) {
    timeout = std::min(timeout, accept_paused_until_.remaining_ms());
  }
  for (const std::unique_ptr<Connection>& c : conns_) {
    if (!c->deadline.infinite()) timeout = std::min(timeout, c->deadline.remaining_ms());
    if (c->parked) timeout = std::min(timeout, c->parked->deadline.remaining_ms());
  }
  return std::max<int64_t>(timeout, 0);
}

void StoreServerImpl::accept_ready() {
  for (int i = 0; i < kAcceptsPerTurnMax; ++i) {
    std::string peer;
    Result<net::Fd> fd = net::accept_tcp(listener_.get(), Deadline::after_ms(0), &peer);
    if (!fd.ok()) {
      if (!fd.status().is_timeout()) {
        int64_t suppressed = 0;
        if (limiter_.allow(&suppressed)) {
          log_.warn("store accept failed; pausing accepts",
                    {{"error", fd.status().message()}, {"pause_ms", kAcceptPauseMs}});
        }
        accept_paused_until_ = Deadline::after_ms(kAcceptPauseMs);
      }
      return;
    }
    auto c = std::make_unique<Connection>();
    c->fd = std::move(*fd);
    c->peer = peer;
    if (conns_.size() >= options_.clients_max) {
      warn("store refused a connection", *c,
           "the server holds " + std::to_string(conns_.size()) + " connections (clients_max)");
      continue;  // closing it tells the client at once
    }
    Status s = net::set_nonblocking(c->fd.get(), true);
    if (s.ok()) s = net::set_stream_options(c->fd.get(), 0);
    if (s.ok()) {
      Result<ServerHandshake> hs =
          ServerHandshake::start(options_.token, kAuthPurposeStore, c->peer);
      if (hs.ok()) c->handshake.emplace(std::move(*hs));
      s = hs.status();
    }
    if (!s.ok()) {
      warn("store dropped a connection", *c, s.to_string());
      continue;
    }
    c->deadline = Deadline::after_ms(options_.handshake_timeout_ms);
    c->out = c->handshake->hello();
    log_.debug("store connection", {{"peer", c->peer}});
    flush(*c);
    conns_.push_back(std::move(c));
  }
}

void StoreServerImpl::handle(Connection& c, short revents) {
  if ((revents & (POLLERR | POLLNVAL)) != 0) return drop(c, "socket error");
  if ((revents & POLLOUT) != 0) flush(c);
  if (c.dead) return;
  if ((revents & POLLIN) != 0 && !c.has_output()) {
    if (c.phase == Phase::kHandshake) read_handshake(c);
    if (c.phase == Phase::kServing && !c.parked) read_frames(c);
    if (c.dead) return;
  }
  // The peer hung up, and nothing is left to read: whatever it waited for, it is gone.
  if ((revents & (POLLHUP | POLLRDHUP)) != 0 && (revents & POLLIN) == 0) {
    drop(c, "closed by peer");
  }
}

void StoreServerImpl::read_handshake(Connection& c) {
  const size_t want = kAuthClientHelloBytes - c.in.size();
  const ssize_t n = ::recv(c.fd.get(), scratch_.data(), want, MSG_DONTWAIT);
  if (n == 0) return drop(c, "closed during the handshake");
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
    return drop(c, std::strerror(errno));
  }
  c.in.append(scratch_.data(), static_cast<size_t>(n));
  if (c.in.size() < kAuthClientHelloBytes) return;
  std::string verdict;
  const Status s = c.handshake->verify_client_hello(c.in, &verdict);
  c.in.clear();
  c.handshake.reset();
  c.out = std::move(verdict);
  c.out_sent = 0;
  if (!s.ok()) {
    warn("store rejected a client", c, s.message());
    close_after_flush(c);
    return;
  }
  c.phase = Phase::kServing;
  c.deadline = Deadline::never();
  log_.debug("store client authenticated", {{"peer", c.peer}});
  flush(c);
}

// Reads until one whole frame is in, the socket runs dry, or the peer goes away.
void StoreServerImpl::read_frames(Connection& c) {
  while (true) {
    size_t want = store::kFrameLengthBytes;
    if (c.in.size() >= store::kFrameLengthBytes) {
      Result<size_t> body =
          store::decode_frame_length(std::string_view(c.in).substr(0, store::kFrameLengthBytes));
      if (!body.ok()) {
        warn("store received a malformed frame", c, body.status().message());
        respond(c, store::error_response(body.status()));
        return close_after_flush(c);
      }
      want = store::kFrameLengthBytes + *body;
    }
    if (c.in.size() == want && want > store::kFrameLengthBytes) break;
    const size_t chunk = std::min(want - c.in.size(), scratch_.size());
    const ssize_t n = ::recv(c.fd.get(), scratch_.data(), chunk, MSG_DONTWAIT);
    if (n == 0) return drop(c, "closed by peer");
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      return drop(c, std::strerror(errno));
    }
    c.in.append(scratch_.data(), static_cast<size_t>(n));
  }
  Result<Request> req = store::decode_request(c.in);
  if (c.in.capacity() > kIdleBufferBytesMax) {
    std::string().swap(c.in);
  } else {
    c.in.clear();
  }
  if (!req.ok()) {
    warn("store received a malformed frame", c, req.status().message());
    respond(c, store::error_response(req.status()));
    return close_after_flush(c);
  }
  execute(c, std::move(*req));
}

void StoreServerImpl::execute(Connection& c, Request req) {
  Response resp;
  Status s;
  switch (req.type) {
    case MessageType::kSet:
      s = table_.set(req.key, req.value);
      if (s.ok()) wake_parked(req.key);
      break;
    case MessageType::kGet:
    case MessageType::kWait: return park(c, std::move(req));
    case MessageType::kAdd: {
      Result<int64_t> sum = table_.add(req.key, req.delta);
      s = sum.status();
      if (sum.ok()) {
        resp.number = *sum;
        wake_parked(req.key);
      }
      break;
    }
    case MessageType::kCompareAndSet: {
      Result<std::string> after = table_.compare_and_set(req.key, req.expected, req.value);
      s = after.status();
      if (after.ok()) {
        resp.value = std::move(*after);
        wake_parked(req.key);
      }
      break;
    }
    case MessageType::kDelete: resp.number = table_.remove(req.key) ? 1 : 0; break;
    case MessageType::kResponse: s = Status::invalid_argument("a response is not a request");
  }
  respond(c, s.ok() ? resp : store::error_response(s));
}

// Answers a GET or WAIT at once when it can, else parks it until its keys appear or it expires.
void StoreServerImpl::park(Connection& c, Request req) {
  Parked p;
  p.type = req.type;
  p.timeout_ms = req.timeout_ms;
  if (req.type == MessageType::kGet) {
    if (const std::string* value = table_.find(req.key)) {
      Response resp;
      resp.value = *value;
      return respond(c, resp);
    }
    p.missing.insert(req.key);
    p.key = std::move(req.key);
  } else {
    for (std::string& key : table_.missing(req.keys))
      p.missing.insert(std::move(key));
    if (p.missing.empty()) return respond(c, Response{});
    p.keys = std::move(req.keys);
  }
  if (p.timeout_ms == 0) return respond(c, store::error_response(timeout_status(p)));
  p.deadline = Deadline::after_ms(p.timeout_ms);
  c.parked = std::move(p);
}

Status StoreServerImpl::timeout_status(const Parked& p) {
  if (p.type == MessageType::kGet) return store::get_timeout_status(p.key, p.timeout_ms);
  std::vector<std::string> missing;
  for (const std::string& key : p.keys) {
    if (p.missing.count(key) != 0) missing.push_back(key);
  }
  return store::wait_timeout_status(missing, p.keys.size(), p.timeout_ms);
}

void StoreServerImpl::wake_parked(std::string_view key) {
  const std::string k(key);
  for (const std::unique_ptr<Connection>& c : conns_) {
    if (c->dead || !c->parked || c->parked->missing.erase(k) == 0) continue;
    if (!c->parked->missing.empty()) continue;
    Response resp;
    if (c->parked->type == MessageType::kGet) resp.value = *table_.find(c->parked->key);
    c->parked.reset();
    respond(*c, resp);
  }
}

void StoreServerImpl::expire_deadlines() {
  for (const std::unique_ptr<Connection>& c : conns_) {
    if (c->dead) continue;
    if (c->parked && c->parked->deadline.expired()) {
      const Status s = timeout_status(*c->parked);
      c->parked.reset();
      respond(*c, store::error_response(s));
      continue;
    }
    if (c->deadline.expired()) {
      if (c->phase == Phase::kHandshake) {
        warn("store dropped a client", *c,
             "no handshake within " + std::to_string(options_.handshake_timeout_ms) + " ms");
      }
      drop(*c, "deadline");
    }
  }
}

void StoreServerImpl::respond(Connection& c, const Response& resp) {
  KILN_CHECK(!c.has_output()) << "one response at a time per connection: " << c.peer;
  c.out = store::encode_response(resp);
  c.out_sent = 0;
  flush(c);
}

void StoreServerImpl::flush(Connection& c) {
  while (c.has_output()) {
    const ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_sent, c.out.size() - c.out_sent,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.out_sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    return drop(c, n < 0 ? std::strerror(errno) : "send returned 0");
  }
  if (c.out.capacity() > kIdleBufferBytesMax) {
    std::string().swap(c.out);
  } else {
    c.out.clear();
  }
  c.out_sent = 0;
  if (c.phase == Phase::kClosing) drop(c, "closed after an error");
}

void StoreServerImpl::close_after_flush(Connection& c) {
  c.phase = Phase::kClosing;
  c.parked.reset();
  c.deadline = Deadline::after_ms(kClosingFlushMs);
  flush(c);
}

void StoreServerImpl::drop(Connection& c, std::string_view why) {
  if (c.dead) return;
  log_.debug("store connection closed", {{"peer", c.peer}, {"why", why}});
  c.dead = true;
  c.parked.reset();
  c.fd.reset();
}

void StoreServerImpl::shut_down() {
  Response stopping =
      store::error_response(Status::unavailable("store server " + address_ + " is stopping"));
  for (const std::unique_ptr<Connection>& c : conns_) {
    if (c->dead || !c->parked || c->has_output()) continue;
    // One non-blocking attempt: a waiting client learns why at once instead of seeing EOF.
    c->parked.reset();
    respond(*c, stopping);
  }
  conns_.clear();
  listener_.reset();
  log_.info("store stopped", {{"port", port_}});
}

}  // namespace

Result<std::unique_ptr<StoreServer>> StoreServer::start(const StoreServerOptions& options,
                                                        Logger log) {
  if (options.token.empty()) {
    return Status::invalid_argument("store server: the job token is empty");
  }
  if (options.clients_max == 0 || options.keys_max == 0 || options.handshake_timeout_ms <= 0) {
    return Status::invalid_argument(
        "store server: clients_max, keys_max and handshake_timeout_ms must be positive");
  }
  int port = 0;
  const int backlog = static_cast<int>(
      std::min<size_t>(options.clients_max, static_cast<size_t>(kListenBacklogMax)));
  Result<net::Fd> listener =
      net::listen_tcp(options.bind_address, options.port, options.port, backlog, &port);
  if (!listener.ok()) return listener.status().with_context("store server");
  KILN_RETURN_IF_ERROR(net::set_nonblocking(listener->get(), true));
  net::Fd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) {
    return Status::io_error(std::string("store server: eventfd: ") + std::strerror(errno));
  }
  auto server =
      std::make_unique<StoreServerImpl>(options, log, std::move(*listener), port, std::move(wake));
  server->start_thread();
  log.info("store serving", {{"bind", options.bind_address}, {"port", port}});
  return std::unique_ptr<StoreServer>(std::move(server));
}

}  // namespace kiln::comm
