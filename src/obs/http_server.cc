// HttpServer over cpp-httplib. See include/kiln/obs/http_server.h.
//
// Handlers run on httplib's worker threads. A handler that throws answers 500 instead of taking
// the process down (httplib's exception handler), and the exception never leaves this file.
#include <kiln/base/check.h>
#include <kiln/base/clock.h>
#include <kiln/obs/http_server.h>

#include <httplib.h>

#include <thread>

namespace kiln::obs {

struct HttpServer::Impl {
  HttpServerOptions options;
  httplib::Server server;
  std::thread thread;
  int port = -1;
  bool started = false;
};

namespace {

httplib::Server::Handler adapt(HttpHandler handler) {
  return [handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
    HttpRequest request;
    request.method = req.method;
    request.path = req.path;
    for (const auto& [key, value] : req.params)
      request.params.emplace(key, value);
    request.body = req.body;
    request.remote_addr = req.remote_addr;
    HttpResponse response = handler(request);
    res.status = response.status;
    res.set_content(response.body, response.content_type.c_str());
  };
}

}  // namespace

HttpServer::HttpServer(HttpServerOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  const HttpServerOptions& o = impl_->options;
  impl_->server.set_read_timeout(std::chrono::milliseconds(o.read_timeout_ms));
  impl_->server.set_write_timeout(std::chrono::milliseconds(o.write_timeout_ms));
  impl_->server.set_payload_max_length(o.body_bytes_max);
  const int threads = o.threads < 1 ? 1 : o.threads;
  impl_->server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // httplib's default also sets SO_REUSEPORT, which would let a second process bind the same
  // port and silently take half the scrapes. Keep SO_REUSEADDR only (restart while in TIME_WAIT).
  impl_->server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  impl_->server.set_exception_handler(
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
  impl_->server.Get(path, adapt(std::move(handler)));
}

void HttpServer::post(const std::string& path, HttpHandler handler) {
  KILN_CHECK(!impl_->started) << "register routes before start(): " << path;
  impl_->server.Post(path, adapt(std::move(handler)));
}

Status HttpServer::start() {
  KILN_CHECK(!impl_->started) << "HttpServer::Start called twice";
  const HttpServerOptions& o = impl_->options;
  const std::string where = o.bind_address + ":" + std::to_string(o.port);
  if (o.port == 0) {
    impl_->port = impl_->server.bind_to_any_port(o.bind_address);
  } else {
    impl_->port = impl_->server.bind_to_port(o.bind_address, o.port) ? o.port : -1;
  }
  if (impl_->port < 0) {
    return Status::io_error("http server: cannot bind " + where +
                            " (address in use, not local, or not permitted)");
  }
  impl_->started = true;
  impl_->thread = std::thread([this] { impl_->server.listen_after_bind(); });
  // stop() only works once the accept loop runs; wait for it so that a stop() right after start()
  // cannot be lost. The loop starts within microseconds; 10 s means something is badly wrong.
  const Deadline deadline = Deadline::after_ms(10'000);
  while (!impl_->server.is_running()) {
    if (deadline.expired()) {
      return Status::io_error("http server on " + where + ": accept loop did not start in 10 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return Status();
}

int HttpServer::port() const {
  KILN_CHECK(impl_->started) << "HttpServer::port before a successful start()";
  return impl_->port;
}

void HttpServer::stop() {
  if (!impl_->started) return;
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->started = false;
}

}  // namespace kiln::obs
