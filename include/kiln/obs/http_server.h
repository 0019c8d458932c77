// HttpServer: the one HTTP stack of Kiln (cpp-httplib underneath), for /metrics, /healthz and
// later the coordinator's API. Handlers are plain functions from request to response; the
// library's types stay private to src/obs/.
//
// Limits: every connection has read and write timeouts, request bodies have a maximum size, and
// a fixed pool of worker threads serves requests (a slow client holds one worker, never more).
#ifndef KILN_OBS_HTTP_SERVER_H_
#define KILN_OBS_HTTP_SERVER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

#include <kiln/base/status.h>

namespace kiln::obs {

struct HttpRequest {
  std::string method;
  std::string path;
  std::multimap<std::string, std::string> params;  // decoded query parameters
  std::string body;
  std::string remote_addr;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

struct HttpServerOptions {
  // Loopback by default: exposing a port to the network is a deliberate choice
  // (`--metrics-bind 0.0.0.0` for a Prometheus on another host).
  std::string bind_address = "127.0.0.1";
  // 0 picks a free port; port() says which.
  int port = 0;
  int read_timeout_ms = 5000;
  int write_timeout_ms = 5000;
  // Requests with a larger body are refused with 413.
  size_t body_bytes_max = 1 << 20;
  // Worker threads; a metrics endpoint needs few.
  int threads = 4;
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

  // Binds and starts serving on a background thread; returns once the socket is bound and
  // accepting. kIoError names the address and port when binding fails (port in use, say).
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
