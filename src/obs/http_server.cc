// HttpServer: an epoll loop that owns every connection, and a fixed pool of workers that run
// cpp-httplib's request processing on complete requests only. See include/kiln/obs/http_server.h.
//
// Why not httplib's own loop: it gives each connection a worker for its whole life, and its read
// timeout restarts with every byte. Four idle keep-alive connections held all four workers for
// 5 s each (20 idle ones starved /healthz for 25 s), and a client sending one byte every 2 s held
// a worker for ever.
//
// Here one thread (the loop) accepts, reads and writes, all non-blocking:
//   accept ── kReading: bytes into `in` until frame_request (http_framing.h) says complete
//          ── kProcessing: the framed bytes go to a worker, the socket leaves the epoll set
//          ── worker: httplib::Server::process_request over a MemoryStream (reads the framed
//             bytes, writes into a string), then the completion goes back to the loop
//          ── kWriting: `out` to the socket ── kReading again (keep-alive) or close.
// Every state has a deadline: idle_timeout_ms waiting for a request, request_timeout_ms from its
// first byte to its last (the slow-loris bound), write_timeout_ms for the answer to be taken.
// At most connections_max connections are open; one more is answered 503 and closed. Memory is
// bounded by connections_max * (header_bytes_max + body_bytes_max) plus the answers.
//
// Handlers run on the workers. A handler that throws answers 500 instead of taking the process
// down (httplib's exception handler), and the exception never leaves this file.
#include <kiln/base/check.h>
#include <kiln/base/clock.h>
#include <kiln/obs/http_server.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <vector>

#include "obs/http_framing.h"

namespace kiln::obs {
namespace {

// The request line and headers of one request; cpp-httplib limits each line to 8 KiB
// (CPPHTTPLIB_HEADER_MAX_LENGTH) and Prometheus or curl send well under 1 KiB in all.
constexpr size_t kHeaderBytesMax = 16 * 1024;
// Bytes read per recv(): a whole head usually fits.
constexpr size_t kReadChunkBytes = 16 * 1024;
// The listen backlog: a fleet of agents reconnecting at once must not see refused connections
// (httplib's default is 5). The kernel caps it at net.core.somaxconn.
constexpr int kListenBacklog = 1024;
// The loop wakes at least this often to expire deadlines; deadlines are seconds, so 50 ms is
// precise enough and costs nothing.
constexpr int kLoopTickMs = 50;
// After accept() fails for lack of file descriptors, stop accepting for this long instead of
// spinning on a listen socket that stays readable.
constexpr int64_t kAcceptPauseMs = 100;
// Requests served on one connection before it closes: bounds how long one client keeps a
// connection slot by staying busy.
constexpr int kKeepAliveRequestsMax = 100;

int64_t now_ms() {
  return monotonic_now_ns() / 1'000'000;
}

std::string errno_text(int err) {
  return std::strerror(err);
}

void address_of(const sockaddr_storage& addr, std::string& ip, int& port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
    port = ntohs(a->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    port = ntohs(a->sin6_port);
  } else {
    port = 0;
  }
  ip = buf;
}

// A framed request in, the whole answer out: what cpp-httplib's request processing sees instead
// of a socket, so that a worker never waits on a client.
class MemoryStream final : public httplib::Stream {
 public:
  MemoryStream(std::string request, const std::string& peer_ip, int peer_port,
               const std::string& local_ip, int local_port, int fd)
      : request_(std::move(request)),
        peer_ip_(peer_ip),
        peer_port_(peer_port),
        local_ip_(local_ip),
        local_port_(local_port),
        fd_(fd) {}

  bool is_readable() const override { return offset_ < request_.size(); }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, request_.size() - offset_);
    std::memcpy(ptr, request_.data() + offset_, n);
    offset_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    out_.append(ptr, size);
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = peer_ip_;
    port = peer_port_;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = local_ip_;
    port = local_port_;
  }
  // httplib reads no socket through this; it is the connection's, for its logs.
  socket_t socket() const override { return fd_; }

  std::string take_output() { return std::move(out_); }

 private:
  std::string request_;
  size_t offset_ = 0;
  std::string out_;
  std::string peer_ip_;
  int peer_port_;
  std::string local_ip_;
  int local_port_;
  int fd_;
};

// httplib's routing and request processing without its sockets: process_request is protected.
class Processor final : public httplib::Server {
 public:
  // Returns whether the connection may serve another request.
  bool process(MemoryStream& stream, bool close_connection) {
    bool connection_closed = false;
    const bool ok = process_request(stream, close_connection, connection_closed, nullptr);
    return ok && !connection_closed && !close_connection;
  }
};

// Reads and drops what the socket holds now, up to one body limit's worth, without waiting.
void discard_pending(int fd) {
  constexpr size_t kDiscardBytesMax = 1 << 20;
  char buf[kReadChunkBytes];
  size_t total = 0;
  while (total < kDiscardBytesMax) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n <= 0) return;
    total += static_cast<size_t>(n);
  }
}

std::string canned(int status, std::string_view reason) {
  return "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason) +
         "\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
}

enum class ConnState { kReading, kProcessing, kWriting };

struct SslFree {
  void operator()(SSL* ssl) const { SSL_free(ssl); }
};

std::string ssl_error_text() {
  const unsigned long e = ERR_get_error();
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return e == 0 ? std::string("unknown error") : std::string(buf);
}

struct Connection {
  int fd = -1;
  // TLS connections only: the session, and whether its handshake is done. The loop feeds it
  // the socket's readiness; plaintext goes to `in` and comes from `out` as for plain ones.
  std::unique_ptr<SSL, SslFree> ssl;
  bool handshaken = false;
  std::string peer_ip;
  int peer_port = 0;
  std::string local_ip;
  int local_port = 0;
  ConnState state = ConnState::kReading;
  std::string in;  // bytes read and not yet handed to a worker
  std::string out;
  size_t out_offset = 0;
  bool close_after_write = false;
  bool request_started = false;  // `in` holds part of a request: request_timeout_ms runs
  int64_t deadline_ms = 0;
  int requests = 0;
};

struct Job {
  int fd;
  std::string request;
  bool close_connection;
  std::string peer_ip;
  int peer_port;
  std::string local_ip;
  int local_port;
};

struct Completion {
  int fd;
  std::string out;
  bool keep_alive;
};

}  // namespace

struct HttpServer::Impl {
  HttpServerOptions options;
  SSL_CTX* tls = nullptr;  // owned; set when the options name a certificate
  Processor processor;
  int port = -1;
  bool started = false;

  int listen_fd = -1;
  int epoll_fd = -1;
  int wake_fd = -1;  // eventfd: completions ready, or stop
  std::thread loop_thread;
  std::vector<std::thread> workers;

  // Loop-thread state.
  std::unordered_map<int, Connection> connections;
  bool accepting = true;
  int64_t accept_resume_ms = 0;

  std::mutex mu;
  std::condition_variable jobs_cv;
  std::deque<Job> jobs;                 // under mu; at most one per connection
  std::vector<Completion> completions;  // under mu
  bool stopping = false;                // under mu

  Status bind_and_listen();
  void loop();
  void worker();
  void wake();

  void accept_all();
  void on_readable(Connection& c);
  void on_tls_readable(Connection& c);
  Status load_tls();
  void on_writable(Connection& c);
  void frame_and_dispatch(Connection& c);
  void start_writing(Connection& c, std::string out, bool close_after);
  void close_connection(int fd);
  void watch(int fd, uint32_t events, bool add);
  void expire(int64_t now);
  void take_completions();
};

void HttpServer::Impl::wake() {
  const uint64_t one = 1;
  // A full eventfd counter (2^64 - 2 wake-ups pending) still wakes the loop; ignoring is safe.
  [[maybe_unused]] ssize_t n = ::write(wake_fd, &one, sizeof(one));
}

Status HttpServer::Impl::bind_and_listen() {
  const std::string where = options.bind_address + ":" + std::to_string(options.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(options.port);
  const int gai = getaddrinfo(options.bind_address.c_str(), service.c_str(), &hints, &found);
  if (gai != 0) {
    return Status::io_error("http server: cannot resolve bind address " + where + ": " +
                            gai_strerror(gai));
  }
  int last_errno = 0;
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    const int fd =
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_errno = errno;
      continue;
    }
    // SO_REUSEADDR only (restart while in TIME_WAIT); SO_REUSEPORT would let a second process
    // bind the same port and silently take half the scrapes.
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, kListenBacklog) != 0) {
      last_errno = errno;
      ::close(fd);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
    std::string ip;
    address_of(bound, ip, port);
    listen_fd = fd;
    break;
  }
  freeaddrinfo(found);
  if (listen_fd < 0) {
    return Status::io_error("http server: cannot bind " + where + ": " + errno_text(last_errno));
  }
  return Status();
}

void HttpServer::Impl::watch(int fd, uint32_t events, bool add) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  const int rc = epoll_ctl(epoll_fd, add ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &ev);
  KILN_CHECK_EQ(rc, 0) << "epoll_ctl fd=" << fd << ": " << errno_text(errno);
}

void HttpServer::Impl::close_connection(int fd) {
  auto it = connections.find(fd);
  if (it == connections.end()) return;
  // A socket in kProcessing is not in the epoll set; close() removes the others.
  ::close(fd);
  connections.erase(it);
}

void HttpServer::Impl::accept_all() {
  while (true) {
    sockaddr_storage peer{};
    socklen_t len = sizeof(peer);
    const int fd =
        accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
        accepting = false;
        accept_resume_ms = now_ms() + kAcceptPauseMs;
      }
      return;  // EAGAIN, or a connection that died in the backlog
    }
    if (connections.size() >= static_cast<size_t>(options.connections_max)) {
      // Best effort on a fresh socket, whose send buffer is empty (a TLS client would not
      // understand a plaintext answer: it is just closed).
      if (tls == nullptr) {
        const std::string busy = canned(503, "Service Unavailable");
        [[maybe_unused]] ssize_t n = ::send(fd, busy.data(), busy.size(), MSG_NOSIGNAL);
      }
      ::close(fd);
      continue;
    }
    Connection c;
    c.fd = fd;
    if (tls != nullptr) {
      c.ssl.reset(SSL_new(tls));
      if (!c.ssl || SSL_set_fd(c.ssl.get(), fd) != 1) {
        ::close(fd);
        continue;
      }
      SSL_set_accept_state(c.ssl.get());
    }
    address_of(peer, c.peer_ip, c.peer_port);
    sockaddr_storage local{};
    socklen_t local_len = sizeof(local);
    getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len);
    address_of(local, c.local_ip, c.local_port);
    // A TLS handshake is part of the first request: it must finish within the request timeout.
    c.request_started = c.ssl != nullptr;
    c.deadline_ms = now_ms() + (c.ssl ? options.request_timeout_ms : options.idle_timeout_ms);
    connections.emplace(fd, std::move(c));
    watch(fd, EPOLLIN | EPOLLRDHUP, /*add=*/true);
  }
}

void HttpServer::Impl::on_tls_readable(Connection& c) {
  if (!c.handshaken) {
    ERR_clear_error();
    const int rc = SSL_do_handshake(c.ssl.get());
    if (rc != 1) {
      const int e = SSL_get_error(c.ssl.get(), rc);
      if (e == SSL_ERROR_WANT_READ) {
        watch(c.fd, EPOLLIN | EPOLLRDHUP, /*add=*/false);
        return;
      }
      if (e == SSL_ERROR_WANT_WRITE) {
        watch(c.fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP, /*add=*/false);
        return;
      }
      close_connection(c.fd);  // not TLS, a bad certificate, a reset: nothing to answer
      return;
    }
    c.handshaken = true;
    c.request_started = false;
    c.deadline_ms = now_ms() + options.idle_timeout_ms;
    watch(c.fd, EPOLLIN | EPOLLRDHUP, /*add=*/false);
  }
  const size_t cap = kHeaderBytesMax + options.body_bytes_max;
  char buf[kReadChunkBytes];
  bool got = false;
  while (c.in.size() < cap) {
    const size_t want = std::min(sizeof(buf), cap - c.in.size());
    ERR_clear_error();
    const int n = SSL_read(c.ssl.get(), buf, static_cast<int>(want));
    if (n > 0) {
      c.in.append(buf, static_cast<size_t>(n));
      got = true;
      continue;
    }
    const int e = SSL_get_error(c.ssl.get(), n);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) break;
    close_connection(c.fd);  // closed by the peer (or broken): a partial request goes with it
    return;
  }
  if (!got) return;
  if (!c.request_started) {
    c.request_started = true;
    c.deadline_ms = now_ms() + options.request_timeout_ms;
  }
  frame_and_dispatch(c);
}

void HttpServer::Impl::on_readable(Connection& c) {
  if (c.ssl) {
    on_tls_readable(c);
    return;
  }
  // Never hold more than one request's worth: the head limit plus the body limit.
  const size_t cap = kHeaderBytesMax + options.body_bytes_max;
  char buf[kReadChunkBytes];
  const size_t want = std::min(sizeof(buf), cap > c.in.size() ? cap - c.in.size() : 0);
  if (want == 0) return;
  const ssize_t n = ::recv(c.fd, buf, want, 0);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
    close_connection(c.fd);
    return;
  }
  if (n == 0) {  // the peer closed; a partial request is dropped with it
    close_connection(c.fd);
    return;
  }
  if (!c.request_started) {
    c.request_started = true;
    c.deadline_ms = now_ms() + options.request_timeout_ms;
  }
  c.in.append(buf, static_cast<size_t>(n));
  frame_and_dispatch(c);
}

void HttpServer::Impl::frame_and_dispatch(Connection& c) {
  const Frame frame = frame_request(c.in, kHeaderBytesMax, options.body_bytes_max);
  switch (frame.kind) {
    case FrameKind::kIncomplete: return;
    case FrameKind::kHeadTooLarge:
      start_writing(c, canned(431, "Request Header Fields Too Large"), /*close_after=*/true);
      return;
    case FrameKind::kBadLength:
      start_writing(c, canned(400, "Bad Request"), /*close_after=*/true);
      return;
    case FrameKind::kLengthRequired:
      start_writing(c, canned(411, "Length Required"), /*close_after=*/true);
      return;
    case FrameKind::kComplete: break;
  }
  const size_t bytes = frame.head_bytes + frame.body_bytes;
  Job job;
  job.fd = c.fd;
  job.request = c.in.substr(0, bytes);
  c.in.erase(0, bytes);
  ++c.requests;
  // A body left unread makes the rest of the stream meaningless: answer, then close.
  job.close_connection = frame.body_too_large || c.requests >= kKeepAliveRequestsMax;
  job.peer_ip = c.peer_ip;
  job.peer_port = c.peer_port;
  job.local_ip = c.local_ip;
  job.local_port = c.local_port;
  c.state = ConnState::kProcessing;
  epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.fd, nullptr);
  {
    std::lock_guard lock(mu);
    jobs.push_back(std::move(job));
  }
  jobs_cv.notify_one();
}

void HttpServer::Impl::start_writing(Connection& c, std::string out, bool close_after) {
  const bool was_watched = c.state != ConnState::kProcessing;
  c.state = ConnState::kWriting;
  c.out = std::move(out);
  c.out_offset = 0;
  c.close_after_write = close_after;
  c.deadline_ms = now_ms() + options.write_timeout_ms;
  // No EPOLLRDHUP here: a client that half-closed after its request still reads the answer, and
  // the level-triggered event would spin the loop until the write completes.
  watch(c.fd, EPOLLOUT, /*add=*/!was_watched);
  on_writable(c);
}

void HttpServer::Impl::on_writable(Connection& c) {
  while (c.ssl && c.out_offset < c.out.size()) {
    ERR_clear_error();
    const size_t left = c.out.size() - c.out_offset;
    const int n = SSL_write(c.ssl.get(), c.out.data() + c.out_offset,
                            static_cast<int>(std::min<size_t>(left, 1 << 30)));
    if (n > 0) {
      c.out_offset += static_cast<size_t>(n);
      continue;
    }
    const int e = SSL_get_error(c.ssl.get(), n);
    if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) return;
    close_connection(c.fd);
    return;
  }
  while (c.out_offset < c.out.size()) {
    const ssize_t n =
        ::send(c.fd, c.out.data() + c.out_offset, c.out.size() - c.out_offset, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      close_connection(c.fd);
      return;
    }
    c.out_offset += static_cast<size_t>(n);
  }
  if (c.close_after_write && c.ssl) {
    SSL_shutdown(c.ssl.get());  // best effort: the close_notify, without waiting for the peer's
    close_connection(c.fd);
    return;
  }
  if (c.close_after_write) {
    // Closing with unread bytes (a body over the limit) makes the kernel send RST, which can
    // destroy the answer before the client reads it: end our side, drop what is pending, close.
    ::shutdown(c.fd, SHUT_WR);
    discard_pending(c.fd);
    close_connection(c.fd);
    return;
  }
  c.out.clear();
  c.state = ConnState::kReading;
  c.request_started = !c.in.empty();
  c.deadline_ms =
      now_ms() + (c.request_started ? options.request_timeout_ms : options.idle_timeout_ms);
  watch(c.fd, EPOLLIN | EPOLLRDHUP, /*add=*/false);
  // A pipelined request may already be here in full, or (TLS) decrypted inside the session,
  // where no socket event will announce it.
  if (c.ssl && SSL_pending(c.ssl.get()) > 0) {
    on_tls_readable(c);
  } else if (c.request_started) {
    frame_and_dispatch(c);
  }
}

void HttpServer::Impl::take_completions() {
  std::vector<Completion> done;
  {
    std::lock_guard lock(mu);
    done.swap(completions);
  }
  for (Completion& d : done) {
    auto it = connections.find(d.fd);
    if (it == connections.end()) continue;
    start_writing(it->second, std::move(d.out), !d.keep_alive);
  }
}

void HttpServer::Impl::expire(int64_t now) {
  std::vector<int> late;
  for (auto& [fd, c] : connections) {
    if (c.state != ConnState::kProcessing && now >= c.deadline_ms) late.push_back(fd);
  }
  for (int fd : late) {
    Connection& c = connections.at(fd);
    if (c.state == ConnState::kReading && c.request_started && !c.ssl) {
      // A request that did not arrive in time; a best-effort answer on an idle socket.
      const std::string timeout = canned(408, "Request Timeout");
      [[maybe_unused]] ssize_t n = ::send(fd, timeout.data(), timeout.size(), MSG_NOSIGNAL);
    }
    close_connection(fd);
  }
  if (!accepting && now >= accept_resume_ms) {
    accepting = true;
    watch(listen_fd, EPOLLIN, /*add=*/true);
  }
}

void HttpServer::Impl::loop() {
  constexpr int kEventsMax = 64;
  epoll_event events[kEventsMax];
  while (true) {
    {
      std::lock_guard lock(mu);
      if (stopping) break;
    }
    const int n = epoll_wait(epoll_fd, events, kEventsMax, kLoopTickMs);
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == listen_fd) {
        accept_all();
        continue;
      }
      if (fd == wake_fd) {
        uint64_t count = 0;
        [[maybe_unused]] ssize_t r = ::read(wake_fd, &count, sizeof(count));
        take_completions();
        continue;
      }
      auto it = connections.find(fd);
      if (it == connections.end()) continue;
      Connection& c = it->second;
      const uint32_t ev = events[i].events;
      // A TLS handshake may wait for the socket to take its bytes (EPOLLOUT while reading).
      const uint32_t readable =
          EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR | (c.ssl && !c.handshaken ? EPOLLOUT : 0u);
      if (c.state == ConnState::kReading && (ev & readable)) {
        on_readable(c);
      } else if (c.state == ConnState::kWriting && (ev & (EPOLLOUT | EPOLLHUP | EPOLLERR))) {
        if (ev & (EPOLLHUP | EPOLLERR)) {
          close_connection(fd);
        } else {
          on_writable(c);
        }
      }
    }
    expire(now_ms());
  }
}

void HttpServer::Impl::worker() {
  while (true) {
    Job job;
    {
      std::unique_lock lock(mu);
      jobs_cv.wait(lock, [&] { return stopping || !jobs.empty(); });
      if (stopping) return;
      job = std::move(jobs.front());
      jobs.pop_front();
    }
    prefer_gzip(&job.request);
    MemoryStream stream(std::move(job.request), job.peer_ip, job.peer_port, job.local_ip,
                        job.local_port, job.fd);
    const bool keep_alive = processor.process(stream, job.close_connection);
    {
      std::lock_guard lock(mu);
      completions.push_back(Completion{job.fd, stream.take_output(), keep_alive});
    }
    wake();
  }
}

namespace {

httplib::Server::Handler adapt(HttpHandler handler, std::vector<std::string> param_names = {}) {
  return [handler = std::move(handler), names = std::move(param_names)](const httplib::Request& req,
                                                                        httplib::Response& res) {
    HttpRequest request;
    request.method = req.method;
    request.path = req.path;
    for (const auto& [key, value] : req.params)
      request.params.emplace(key, value);
    // matches[0] is the whole path; the route's regex has one group per {name}, in order.
    for (size_t i = 0; i < names.size() && i + 1 < req.matches.size(); ++i)
      request.path_params[names[i]] = req.matches[i + 1].str();
    for (const auto& [key, value] : req.headers) {
      std::string name = key;
      for (char& ch : name)
        ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      request.headers.emplace(std::move(name), value);
    }
    request.body = req.body;
    request.remote_addr = req.remote_addr;
    HttpResponse response = handler(request);
    res.status = response.status;
    for (const auto& [key, value] : response.headers)
      res.set_header(key.c_str(), value);
    res.set_content(response.body, response.content_type.c_str());
  };
}

// "/v1/jobs/{id}/events" -> "/v1/jobs/([^/]+)/events" and {"id"}. Literal characters are escaped,
// so a '.' in a pattern matches only a '.'.
std::string route_regex(const std::string& pattern, std::vector<std::string>* names) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char ch = pattern[i];
    if (ch == '{') {
      const size_t close = pattern.find('}', i);
      KILN_CHECK(close != std::string::npos && close > i + 1) << "bad route pattern " << pattern;
      names->push_back(pattern.substr(i + 1, close - i - 1));
      out += "([^/]+)";
      i = close;
      continue;
    }
    if (std::strchr(".^$|()[]*+?\\", ch) != nullptr) out += '\\';
    out += ch;
  }
  return out;
}

}  // namespace

HttpServer::HttpServer(HttpServerOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  HttpServerOptions& o = impl_->options;
  o.threads = std::max(o.threads, 1);
  o.connections_max = std::max(o.connections_max, 1);
  impl_->processor.set_payload_max_length(o.body_bytes_max);
  impl_->processor.set_keep_alive_timeout(std::max(o.idle_timeout_ms / 1000, 1));
  impl_->processor.set_keep_alive_max_count(kKeepAliveRequestsMax);
  impl_->processor.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        res.status = 500;
        res.set_content("internal error\n", "text/plain; charset=utf-8");
      });
}

HttpServer::~HttpServer() {
  stop();
}

void HttpServer::get(const std::string& path, HttpHandler handler) {
  KILN_CHECK(!impl_->started) << "register routes before start(): " << path;
  impl_->processor.Get(path, adapt(std::move(handler)));
}

void HttpServer::post(const std::string& path, HttpHandler handler) {
  KILN_CHECK(!impl_->started) << "register routes before start(): " << path;
  impl_->processor.Post(path, adapt(std::move(handler)));
}

void HttpServer::route(const std::string& method, const std::string& pattern, HttpHandler handler) {
  KILN_CHECK(!impl_->started) << "register routes before start(): " << pattern;
  std::vector<std::string> names;
  const std::string regex = route_regex(pattern, &names);
  httplib::Server::Handler adapted = adapt(std::move(handler), std::move(names));
  if (method == "GET") {
    impl_->processor.Get(regex, std::move(adapted));
  } else if (method == "POST") {
    impl_->processor.Post(regex, std::move(adapted));
  } else if (method == "PUT") {
    impl_->processor.Put(regex, std::move(adapted));
  } else if (method == "DELETE") {
    impl_->processor.Delete(regex, std::move(adapted));
  } else {
    KILN_CHECK(false) << "unsupported method " << method << " for route " << pattern;
  }
}

std::string HttpRequest::header(const std::string& name) const {
  auto it = headers.find(name);
  return it == headers.end() ? std::string() : it->second;
}

std::string HttpRequest::param(const std::string& name) const {
  auto it = params.find(name);
  return it == params.end() ? std::string() : it->second;
}

Status HttpServer::Impl::load_tls() {
  const std::string& cert = options.tls_cert_path;
  const std::string& key = options.tls_key_path;
  if (cert.empty() && key.empty()) return Status();
  if (cert.empty() || key.empty()) {
    return Status::invalid_argument("http server: TLS needs both a certificate and its key");
  }
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) return Status::io_error("http server: SSL_CTX_new: " + ssl_error_text());
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  // Writes resume from the same buffer after WANT_WRITE, and a partial write is progress.
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  ERR_clear_error();
  Status s;
  if (SSL_CTX_use_certificate_chain_file(ctx, cert.c_str()) != 1) {
    s = Status::io_error("http server: TLS certificate " + cert + ": " + ssl_error_text());
  } else if (SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1) {
    s = Status::io_error("http server: TLS key " + key + ": " + ssl_error_text());
  } else if (SSL_CTX_check_private_key(ctx) != 1) {
    s = Status::invalid_argument("http server: TLS key " + key + " does not match certificate " +
                                 cert);
  }
  if (!s.ok()) {
    SSL_CTX_free(ctx);
    return s;
  }
  tls = ctx;
  return Status();
}

Status HttpServer::start() {
  KILN_CHECK(!impl_->started) << "HttpServer::Start called twice";
  Impl& s = *impl_;
  const std::string where = s.options.bind_address + ":" + std::to_string(s.options.port);
  Status tls = s.load_tls();
  if (!tls.ok()) return tls;
  Status bound = s.bind_and_listen();
  if (!bound.ok()) {
    if (s.tls != nullptr) SSL_CTX_free(s.tls);
    s.tls = nullptr;
    return bound;
  }
  s.epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  s.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s.epoll_fd < 0 || s.wake_fd < 0) {
    const std::string why = errno_text(errno);
    s.started = true;  // so that stop() releases what was made
    stop();
    return Status::io_error("http server on " + where + ": epoll/eventfd: " + why);
  }
  s.watch(s.listen_fd, EPOLLIN, /*add=*/true);
  s.watch(s.wake_fd, EPOLLIN, /*add=*/true);
  s.started = true;
  try {
    for (int t = 0; t < s.options.threads; ++t)
      s.workers.emplace_back([&s] { s.worker(); });
    s.loop_thread = std::thread([&s] { s.loop(); });
  } catch (const std::system_error& e) {
    stop();
    return Status::unavailable("http server on " + where + ": cannot start its threads (" +
                               std::to_string(s.options.threads) + " workers): " + e.what());
  }
  return Status();
}

int HttpServer::port() const {
  KILN_CHECK(impl_->started) << "HttpServer::port before a successful start()";
  return impl_->port;
}

void HttpServer::stop() {
  Impl& s = *impl_;
  if (!s.started) return;
  {
    std::lock_guard lock(s.mu);
    s.stopping = true;
  }
  s.jobs_cv.notify_all();
  if (s.wake_fd >= 0) s.wake();
  if (s.loop_thread.joinable()) s.loop_thread.join();
  for (std::thread& t : s.workers)
    t.join();
  s.workers.clear();
  for (auto& [fd, c] : s.connections)
    ::close(fd);
  s.connections.clear();
  for (int* fd : {&s.listen_fd, &s.epoll_fd, &s.wake_fd}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
  s.jobs.clear();
  s.completions.clear();
  if (s.tls != nullptr) SSL_CTX_free(s.tls);
  s.tls = nullptr;
  s.stopping = false;
  s.accepting = true;
  s.started = false;
}

}  // namespace kiln::obs
