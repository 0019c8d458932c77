// HttpServer: the one HTTP stack of Kiln (cpp-httplib underneath), for /metrics, /healthz and
// later the coordinator's API. Handlers are plain functions from request to response; the
// library's types stay private to src/obs/.
//
// Limits: one event loop reads and writes every connection, and a fixed pool of workers runs the
// handlers on complete requests only, so an idle or slow client holds a buffer, never a worker.
// Every connection has deadlines (idle, whole request, whole answer), request heads and bodies
// have maximum sizes, and at most connections_max connections are open (one more gets 503).
// Request bodies need Content-Length (Transfer-Encoding is answered 411).
#ifndef KILN_OBS_HTTP_SERVER_H_
#define KILN_OBS_HTTP_SERVER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <kiln/base/status.h>

namespace kiln::obs {

struct HttpRequest {
  std::string method;
  std::string path;
  std::multimap<std::string, std::string> params;  // decoded query parameters
  // The values of a route's {name} segments ("/v1/jobs/{id}" matched by "/v1/jobs/j-1": id=j-1).
  std::map<std::string, std::string> path_params;
  // Header names in lower case; a repeated header keeps its first value. Bounded by the head size
  // limit of the framing.
  std::map<std::string, std::string> headers;
  std::string body;
  std::string remote_addr;

  // The header's value, or "" when absent. `name` in lower case.
  std::string header(const std::string& name) const;
  // The query parameter's first value, or "" when absent.
  std::string param(const std::string& name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  // Extra headers (Location, WWW-Authenticate, Retry-After); never Content-Type or -Length.
  std::vector<std::pair<std::string, std::string>> headers;
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

struct HttpServerOptions {
  // Loopback by default: exposing a port to the network is a deliberate choice
  // (`--metrics-bind 0.0.0.0` for a Prometheus on another host).
  std::string bind_address = "127.0.0.1";
  // 0 picks a free port; port() says which.
  int port = 0;
  // A connection with no request under way closes after this (keep-alive idle time).
  int idle_timeout_ms = 5000;
  // A request must arrive whole within this of its first byte, however slowly its bytes come
  // (a client sending one byte a second never holds a connection longer); answered 408.
  // Prometheus' scrape timeout is 10 s.
  int request_timeout_ms = 10000;
  // The client must take the whole answer within this.
  int write_timeout_ms = 5000;
  // Requests with a larger body are refused with 413.
  size_t body_bytes_max = 1 << 20;
  // Worker threads running handlers; they never wait on a client, so a metrics endpoint needs
  // few.
  int threads = 4;
  // Open connections at most; one more is answered 503 and closed. An idle connection costs a
  // file descriptor and its buffer, no thread: a coordinator facing thousands of agents raises
  // it (and the process's RLIMIT_NOFILE).
  int connections_max = 512;
  // TLS: with both set every connection speaks TLS (1.2 or later, OpenSSL), handshaken inside
  // the same event loop, so a client that stalls its handshake holds a buffer, never a thread;
  // the handshake must finish within request_timeout_ms. PEM files; start() names the file it
  // cannot use.
  std::string tls_cert_path;  // the certificate chain
  std::string tls_key_path;   // its private key
};

class HttpServer {
 public:
  explicit HttpServer(HttpServerOptions options);
  ~HttpServer();  // stops the server
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Routes; register them before start(). `path` is matched exactly.
  void get(const std::string& path, HttpHandler handler);
  void post(const std::string& path, HttpHandler handler);
  // A route whose pattern may hold {name} segments, each matching one non-empty path segment
  // (no '/'), handed to the handler in HttpRequest::path_params: "/v1/jobs/{id}/events".
  // `method` is GET, POST, PUT or DELETE. Other characters of the pattern match literally.
  void route(const std::string& method, const std::string& pattern, HttpHandler handler);

  // Binds and starts serving on a background thread; returns once the socket is bound and
  // accepting. kIoError names the address and port when binding fails (port in use, say), or
  // the TLS file that cannot be loaded.
  Status start();

  // The bound port. REQUIRES: start() succeeded.
  int port() const;

  // Stops accepting, finishes requests in flight and joins the threads. Idempotent.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::obs

#endif  // KILN_OBS_HTTP_SERVER_H_
