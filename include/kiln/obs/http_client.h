// HttpClient: the one HTTP client of Kiln (cpp-httplib underneath, kept private to src/obs/), for
// the CLI and the node agents talking to the coordinator's API.
//
// Every call has a deadline: connecting within connect_timeout_ms, then every read and write
// within io_timeout_ms. A transport failure (refused, timed out, reset) is kUnavailable naming the
// server and the path; an answer with any HTTP status is a value (the caller decides what a 404
// means). Answers larger than answer_bytes_max are refused (kIoError) rather than held.
//
// Thread-safe: calls are serialized over one keep-alive connection.
#ifndef KILN_OBS_HTTP_CLIENT_H_
#define KILN_OBS_HTTP_CLIENT_H_

#include <cstddef>
#include <memory>
#include <string>

#include <kiln/base/result.h>
#include <kiln/obs/http_server.h>

namespace kiln::obs {

struct HttpClientOptions {
  // "http://host:port" or "https://host:port" (no path).
  std::string base_url;
  // Sent as "Authorization: Bearer <token>" when non-empty.
  std::string bearer_token;
  // https: the CA certificate (PEM) that signed the server's; empty: the system's trust store.
  std::string ca_cert_path;
  int connect_timeout_ms = 3000;
  int io_timeout_ms = 10000;
  size_t answer_bytes_max = size_t{64} << 20;
};

class HttpClient {
 public:
  // kInvalidArgument when base_url is not http(s)://host:port.
  static Result<std::unique_ptr<HttpClient>> create(HttpClientOptions options);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  Result<HttpResponse> get(const std::string& path_and_query);
  Result<HttpResponse> post(const std::string& path, const std::string& body,
                            const std::string& content_type = "application/json");
  Result<HttpResponse> del(const std::string& path);

  const std::string& base_url() const;

 private:
  struct Impl;
  explicit HttpClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::obs

#endif  // KILN_OBS_HTTP_CLIENT_H_
