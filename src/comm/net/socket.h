// TCP plumbing shared by the rendezvous store and the TCP transport: an owning descriptor,
// listening on a port range, connecting with retries and backoff, and exact reads and writes
// bounded by a deadline. IPv4 and IPv6; names are resolved with getaddrinfo.
//
// Every function that can block takes a Deadline. Errors name the address and what was being
// done ("connect 10.0.0.2:29500: Connection refused (retried 7 times over 3012 ms)").
#ifndef KILN_COMM_NET_SOCKET_H_
#define KILN_COMM_NET_SOCKET_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <kiln/base/clock.h>
#include <kiln/base/result.h>
#include <kiln/base/status.h>

namespace kiln::comm::net {

// Owns a file descriptor; closes it on destruction. Move-only.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = other.release();
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset();

 private:
  int fd_ = -1;
};

struct HostPort {
  std::string host;
  int port = 0;
  std::string to_string() const;  // "host:port", "[::1]:port" for IPv6 literals
};

// Parses "host:port" or "[ipv6]:port". kInvalidArgument names the text.
Result<HostPort> parse_host_port(std::string_view text);

// Listens on `bind_address` at the first port in [port_lo, port_hi] that is free; 0..0 asks the
// kernel for any free port. SO_REUSEADDR only (never SO_REUSEPORT: two processes must not share a
// port). Returns the socket; `*bound_port` receives the port.
Result<Fd> listen_tcp(const std::string& bind_address, int port_lo, int port_hi, int backlog,
                      int* bound_port);

// Accepts one connection, waiting until `deadline`. `*peer` (if not null) receives "host:port".
Result<Fd> accept_tcp(int listen_fd, Deadline deadline, std::string* peer);

// Connects to `address`, retrying refused or unreachable attempts with exponential backoff
// (10 ms doubling up to 1 s) until `deadline`. The returned socket is blocking, with TCP_NODELAY.
// kUnavailable names the address, the last error and how many attempts were made.
Result<Fd> connect_tcp(const HostPort& address, Deadline deadline);

Status set_nonblocking(int fd, bool nonblocking);
// TCP_NODELAY on; socket buffers as large as the kernel allows up to `buffer_bytes` (0: leave).
Status set_stream_options(int fd, int buffer_bytes);

// Writes all `bytes`, waiting with poll() as needed, until `deadline`. `what` names the transfer in
// errors. kTimeout, or kUnavailable when the peer closed or reset the connection.
Status write_all(int fd, const void* data, size_t bytes, Deadline deadline, std::string_view what);

// Reads exactly `bytes`. kUnavailable with "closed by peer" on EOF, kTimeout at the deadline.
Status read_exact(int fd, void* data, size_t bytes, Deadline deadline, std::string_view what);

// The local host's name (gethostname), or "localhost" if it cannot be read.
std::string local_hostname();

}  // namespace kiln::comm::net

#endif  // KILN_COMM_NET_SOCKET_H_
