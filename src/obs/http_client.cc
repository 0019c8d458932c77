#include <kiln/obs/http_client.h>

#include <httplib.h>

#include <chrono>
#include <mutex>
#include <utility>

namespace kiln::obs {

struct HttpClient::Impl {
  HttpClientOptions options;
  std::mutex mu;  // one request at a time over the keep-alive connection
  std::unique_ptr<httplib::Client> client;
  httplib::Headers headers;

  Result<HttpResponse> finish(const std::string& method, const std::string& path,
                              httplib::Result res) {
    if (!res) {
      return Status::unavailable(method + " " + options.base_url + path + ": " +
                                 httplib::to_string(res.error()));
    }
    if (res->body.size() > options.answer_bytes_max) {
      return Status::io_error(method + " " + options.base_url + path + ": answer of " +
                              std::to_string(res->body.size()) + " bytes is over the limit of " +
                              std::to_string(options.answer_bytes_max));
    }
    HttpResponse out;
    out.status = res->status;
    out.content_type = res->get_header_value("Content-Type");
    out.body = std::move(res->body);
    for (const auto& [key, value] : res->headers) {
      if (key != "Content-Type" && key != "Content-Length") out.headers.emplace_back(key, value);
    }
    return out;
  }
};

Result<std::unique_ptr<HttpClient>> HttpClient::create(HttpClientOptions options) {
  const std::string& url = options.base_url;
  const bool https = url.rfind("https://", 0) == 0;
  if (!https && url.rfind("http://", 0) != 0) {
    return Status::invalid_argument("server address '" + url +
                                    "': expected http://host:port or https://host:port");
  }
  const std::string rest = url.substr(https ? 8 : 7);
  const size_t colon = rest.rfind(':');
  if (rest.empty() || rest.find('/') != std::string::npos || colon == std::string::npos ||
      colon == 0 || colon + 1 == rest.size()) {
    return Status::invalid_argument("server address '" + url +
                                    "': expected http://host:port or https://host:port");
  }
  for (size_t i = colon + 1; i < rest.size(); ++i) {
    if (rest[i] < '0' || rest[i] > '9') {
      return Status::invalid_argument("server address '" + url + "': the port is not a number");
    }
  }
  auto impl = std::make_unique<Impl>();
  impl->client = std::make_unique<httplib::Client>(url);
  httplib::Client& c = *impl->client;
  const auto ms = [](int v) { return std::chrono::milliseconds(v); };
  c.set_connection_timeout(ms(options.connect_timeout_ms));
  c.set_read_timeout(ms(options.io_timeout_ms));
  c.set_write_timeout(ms(options.io_timeout_ms));
  c.set_keep_alive(true);
  if (https) {
    if (!options.ca_cert_path.empty()) c.set_ca_cert_path(options.ca_cert_path.c_str());
    c.enable_server_certificate_verification(true);
  }
  if (!options.bearer_token.empty()) {
    impl->headers.emplace("Authorization", "Bearer " + options.bearer_token);
  }
  impl->options = std::move(options);
  return std::unique_ptr<HttpClient>(new HttpClient(std::move(impl)));
}

HttpClient::HttpClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpClient::~HttpClient() = default;

const std::string& HttpClient::base_url() const {
  return impl_->options.base_url;
}

Result<HttpResponse> HttpClient::get(const std::string& path_and_query) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->finish("GET", path_and_query,
                       impl_->client->Get(path_and_query.c_str(), impl_->headers));
}

Result<HttpResponse> HttpClient::post(const std::string& path, const std::string& body,
                                      const std::string& content_type) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->finish(
      "POST", path, impl_->client->Post(path.c_str(), impl_->headers, body, content_type.c_str()));
}

Result<HttpResponse> HttpClient::del(const std::string& path) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->finish("DELETE", path, impl_->client->Delete(path.c_str(), impl_->headers));
}

}  // namespace kiln::obs
