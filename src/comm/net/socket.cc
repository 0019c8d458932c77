// See socket.h. All system calls retry on EINTR.
#include "comm/net/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <thread>

namespace kiln::comm::net {
namespace {

std::string errno_text(int err) {
  return std::strerror(err);
}

// poll() one descriptor for `events` until the deadline. Returns the revents, 0 on timeout.
Result<short> poll_one(int fd, short events, Deadline deadline) {
  while (true) {
    const int64_t left = deadline.remaining_ms();
    pollfd p{fd, events, 0};
    const int timeout =
        deadline.infinite() ? -1 : static_cast<int>(std::min<int64_t>(left, 1 << 30));
    const int rc = poll(&p, 1, timeout);
    if (rc > 0) return p.revents;
    if (rc == 0) return short{0};
    if (errno != EINTR) return Status::io_error("poll: " + errno_text(errno));
  }
}

// getaddrinfo for a TCP endpoint; `passive` for bind addresses.
Result<addrinfo*> resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* result = nullptr;
  const std::string service = std::to_string(port);
  const int rc =
      getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &result);
  if (rc != 0) {
    return Status::invalid_argument("resolve " + host + ":" + service + ": " + gai_strerror(rc));
  }
  return result;
}

std::string format_sockaddr(const sockaddr* sa) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    port = ntohs(in6->sin6_port);
    // Appended piece by piece: GCC 12 at -O3 reports a false -Wrestrict (GCC bug 105329) on
    // `"[" + std::string(host)`, the operator+ that prepends to a temporary.
    std::string out = "[";
    out.append(host).append("]:").append(std::to_string(port));
    return out;
  }
  return "?";
}

}  // namespace

void Fd::reset() {
  if (fd_ >= 0) {
    // close() must not be retried on EINTR on Linux: the descriptor is gone either way.
    ::close(fd_);
    fd_ = -1;
  }
}

std::string HostPort::to_string() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

Result<HostPort> parse_host_port(std::string_view text) {
  HostPort out;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return Status::invalid_argument("address '" + std::string(text) + "': expected [ipv6]:port");
    }
    out.host = std::string(text.substr(1, close - 1));
    port_text = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos || colon == 0) {
      return Status::invalid_argument("address '" + std::string(text) + "': expected host:port");
    }
    out.host = std::string(text.substr(0, colon));
    port_text = text.substr(colon + 1);
  }
  int port = -1;
  auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || ptr != port_text.data() + port_text.size() || port < 1 || port > 65535) {
    return Status::invalid_argument("address '" + std::string(text) + "': port must be 1..65535");
  }
  out.port = port;
  return out;
}

Result<Fd> listen_tcp(const std::string& bind_address, int port_lo, int port_hi, int backlog,
                      int* bound_port) {
  if (port_lo < 0 || port_hi > 65535 || port_lo > port_hi) {
    return Status::invalid_argument("port range " + std::to_string(port_lo) + "-" +
                                    std::to_string(port_hi) + " is not within 0-65535");
  }
  std::string last_error = "no address";
  for (int port = port_lo; port <= port_hi; ++port) {
    KILN_ASSIGN_OR_RETURN(addrinfo * list, resolve(bind_address, port, /*passive=*/true));
    for (addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
      Fd fd(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
      if (!fd.valid()) {
        last_error = "socket: " + errno_text(errno);
        continue;
      }
      int yes = 1;
      setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
      if (bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd.get(), backlog) != 0) {
        last_error = errno_text(errno);
        continue;
      }
      sockaddr_storage local{};
      socklen_t len = sizeof(local);
      getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len);
      *bound_port = local.ss_family == AF_INET6
                        ? ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port)
                        : ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port);
      freeaddrinfo(list);
      return fd;
    }
    freeaddrinfo(list);
  }
  return Status::io_error("listen on " + bind_address + " ports " + std::to_string(port_lo) + "-" +
                          std::to_string(port_hi) + ": " + last_error);
}

Result<Fd> accept_tcp(int listen_fd, Deadline deadline, std::string* peer) {
  while (true) {
    KILN_ASSIGN_OR_RETURN(short revents, poll_one(listen_fd, POLLIN, deadline));
    if (revents == 0) return Status::timeout("accept: no connection before the deadline");
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC);
    if (fd >= 0) {
      if (peer != nullptr) *peer = format_sockaddr(reinterpret_cast<sockaddr*>(&addr));
      return Fd(fd);
    }
    if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) {
      return Status::io_error("accept: " + errno_text(errno));
    }
  }
}

Result<Fd> connect_tcp(const HostPort& address, Deadline deadline) {
  int64_t backoff_ms = 10;
  constexpr int64_t kBackoffMaxMs = 1000;  // a peer that is slow to start is found within ~1 s
  int attempts = 0;
  std::string last_error;
  const Stopwatch watch;
  while (true) {
    ++attempts;
    Result<addrinfo*> list = resolve(address.host, address.port, /*passive=*/false);
    if (list.ok()) {
      for (addrinfo* ai = *list; ai != nullptr; ai = ai->ai_next) {
        Fd fd(
            socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
        if (!fd.valid()) {
          last_error = "socket: " + errno_text(errno);
          continue;
        }
        int rc = connect(fd.get(), ai->ai_addr, ai->ai_addrlen);
        if (rc != 0 && errno == EINPROGRESS) {
          Result<short> revents = poll_one(fd.get(), POLLOUT, deadline);
          int err = ETIMEDOUT;
          if (revents.ok() && *revents != 0) {
            socklen_t len = sizeof(err);
            getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
          }
          rc = err == 0 ? 0 : -1;
          errno = err;
        }
        if (rc == 0) {
          freeaddrinfo(*list);
          KILN_RETURN_IF_ERROR(set_nonblocking(fd.get(), false));
          KILN_RETURN_IF_ERROR(set_stream_options(fd.get(), 0));
          return fd;
        }
        last_error = errno_text(errno);
      }
      freeaddrinfo(*list);
    } else {
      last_error = list.status().message();
    }
    if (deadline.expired() || deadline.remaining_ms() < backoff_ms) {
      return Status::unavailable("connect " + address.to_string() + ": " + last_error + " (tried " +
                                 std::to_string(attempts) + " times over " +
                                 std::to_string(static_cast<int64_t>(watch.elapsed_ms())) + " ms)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
    backoff_ms = std::min(backoff_ms * 2, kBackoffMaxMs);
  }
}

Status set_nonblocking(int fd, bool nonblocking) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0) return Status::io_error("fcntl(F_GETFL): " + errno_text(errno));
  const int wanted = nonblocking ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (wanted != flags && fcntl(fd, F_SETFL, wanted) != 0) {
    return Status::io_error("fcntl(F_SETFL): " + errno_text(errno));
  }
  return Status();
}

Status set_stream_options(int fd, int buffer_bytes) {
  int yes = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes)) != 0) {
    return Status::io_error("setsockopt(TCP_NODELAY): " + errno_text(errno));
  }
  if (buffer_bytes > 0) {
    // Failure only means the kernel caps the size lower; not an error.
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer_bytes, sizeof(buffer_bytes));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof(buffer_bytes));
  }
  return Status();
}

Status write_all(int fd, const void* data, size_t bytes, Deadline deadline, std::string_view what) {
  const char* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = send(fd, p + done, bytes - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      KILN_ASSIGN_OR_RETURN(short revents, poll_one(fd, POLLOUT, deadline));
      if (revents == 0) {
        return Status::timeout(std::string(what) + ": write timed out after " +
                               std::to_string(done) + " of " + std::to_string(bytes) + " bytes");
      }
      continue;
    }
    return Status::unavailable(std::string(what) + ": write failed: " + errno_text(errno));
  }
  return Status();
}

Status read_exact(int fd, void* data, size_t bytes, Deadline deadline, std::string_view what) {
  char* p = static_cast<char*>(data);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = recv(fd, p + done, bytes - done, MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      return Status::unavailable(std::string(what) + ": connection closed by peer after " +
                                 std::to_string(done) + " of " + std::to_string(bytes) + " bytes");
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      KILN_ASSIGN_OR_RETURN(short revents, poll_one(fd, POLLIN, deadline));
      if (revents == 0) {
        return Status::timeout(std::string(what) + ": read timed out after " +
                               std::to_string(done) + " of " + std::to_string(bytes) + " bytes");
      }
      continue;
    }
    return Status::unavailable(std::string(what) + ": read failed: " + errno_text(errno));
  }
  return Status();
}

std::string local_hostname() {
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace kiln::comm::net
