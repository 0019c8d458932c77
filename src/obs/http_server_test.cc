#include <kiln/obs/http_client.h>
#include <kiln/obs/http_server.h>
#include <kiln/obs/metrics_endpoint.h>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <thread>
#include <vector>

namespace kiln::obs {
namespace {

httplib::Client client_for(int port) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(std::chrono::seconds(5));
  client.set_read_timeout(std::chrono::seconds(5));
  return client;
}

TEST(HttpServerTest, ServesRoutesOnAPickedPort) {
  HttpServer server(HttpServerOptions{});
  server.get("/hello", [](const HttpRequest& req) {
    HttpResponse r;
    r.body = "hi " + (req.params.count("name") ? req.params.find("name")->second : "?");
    return r;
  });
  server.post("/echo", [](const HttpRequest& req) {
    HttpResponse r;
    r.status = 201;
    r.body = req.body;
    return r;
  });
  ASSERT_TRUE(server.start().ok());
  ASSERT_GT(server.port(), 0);
  httplib::Client client = client_for(server.port());
  auto res = client.Get("/hello?name=kiln");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "hi kiln");
  res = client.Post("/echo", "payload", "text/plain");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 201);
  EXPECT_EQ(res->body, "payload");
  res = client.Get("/nowhere");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  server.stop();
  server.stop();  // idempotent
}

TEST(HttpServerTest, RoutesWithPathParametersHeadersAndMethods) {
  HttpServer server(HttpServerOptions{});
  server.route("GET", "/v1/jobs/{id}/events", [](const HttpRequest& req) {
    HttpResponse r;
    r.body =
        req.path_params.at("id") + " " + req.header("authorization") + " " + req.param("after");
    r.headers.emplace_back("X-Kiln-Seq", "7");
    return r;
  });
  server.route("DELETE", "/v1/nodes/{name}/cordon", [](const HttpRequest& req) {
    HttpResponse r;
    r.status = 204;
    r.body = "";
    (void)req;
    return r;
  });
  server.route("GET", "/v1/a.b", [](const HttpRequest&) { return HttpResponse{}; });
  ASSERT_TRUE(server.start().ok());
  httplib::Client client = client_for(server.port());
  auto res = client.Get("/v1/jobs/j-000001/events?after=3",
                        httplib::Headers{{"Authorization", "Bearer abc"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "j-000001 Bearer abc 3");
  EXPECT_EQ(res->get_header_value("X-Kiln-Seq"), "7");
  // A {name} matches one segment only; the rest of the pattern matches literally.
  res = client.Get("/v1/jobs/a/b/events");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  res = client.Get("/v1/aXb");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  res = client.Get("/v1/a.b");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  res = client.Delete("/v1/nodes/n1/cordon");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 204);
  res = client.Post("/v1/nodes/n1/cordon", "", "text/plain");
  ASSERT_TRUE(res);
  EXPECT_NE(res->status, 204);
}

// A self-signed certificate for 127.0.0.1 (P-256), made here so the test needs no tool: the
// PEM files of the certificate and its key in `dir`.
struct TestCert {
  std::string cert;
  std::string key;
};

TestCert make_test_cert(const std::filesystem::path& dir) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* x = X509_new();
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), -60);
  X509_gmtime_adj(X509_getm_notAfter(x), 3600);
  X509_set_pubkey(x, key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("127.0.0.1"), -1, -1, 0);
  X509_set_issuer_name(x, name);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, x, x, nullptr, nullptr, 0);
  for (const auto& [nid, value] : {std::pair{NID_subject_alt_name, "IP:127.0.0.1"},
                                   std::pair{NID_basic_constraints, "critical,CA:TRUE"}}) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
  }
  X509_sign(x, key, EVP_sha256());
  TestCert out{(dir / "cert.pem").string(), (dir / "key.pem").string()};
  FILE* f = std::fopen(out.cert.c_str(), "w");
  PEM_write_X509(f, x);
  std::fclose(f);
  f = std::fopen(out.key.c_str(), "w");
  PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(f);
  X509_free(x);
  EVP_PKEY_free(key);
  return out;
}

TEST(HttpServerTest, ServesTlsWithItsCertificateAndStalledHandshakesHoldNoOne) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kiln-tls-test-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const TestCert cert = make_test_cert(dir);
  HttpServerOptions options;
  options.tls_cert_path = cert.cert;
  options.tls_key_path = cert.key;
  options.request_timeout_ms = 1000;
  HttpServer server(options);
  server.route("POST", "/v1/echo/{x}", [](const HttpRequest& req) {
    return HttpResponse{200, "text/plain", req.path_params.at("x") + ":" + req.body, {}};
  });
  ASSERT_TRUE(server.start().ok());
  const std::string https = "https://127.0.0.1:" + std::to_string(server.port());

  // Clients that connect and never start their handshake: they hold a buffer, not a worker.
  std::vector<int> stalled;
  for (int i = 0; i < 20; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(server.port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    stalled.push_back(fd);
  }
  HttpClientOptions o;
  o.base_url = https;
  o.ca_cert_path = cert.cert;
  Result<std::unique_ptr<HttpClient>> client = HttpClient::create(o);
  ASSERT_TRUE(client.ok());
  for (int i = 0; i < 3; ++i) {  // keep-alive: the session carries several requests
    Result<HttpResponse> r = (*client)->post("/v1/echo/a", std::string(100000, 'z'), "text/plain");
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body.size(), 100002u);
  }
  // Plain HTTP to a TLS port gets no answer, and a client that trusts another CA refuses it.
  HttpClientOptions plain;
  plain.base_url = "http://127.0.0.1:" + std::to_string(server.port());
  plain.io_timeout_ms = 2000;
  Result<HttpResponse> r = (*HttpClient::create(plain))->post("/v1/echo/a", "x", "text/plain");
  EXPECT_FALSE(r.ok() && r->status == 200);
  const std::filesystem::path other = dir / "other";
  std::filesystem::create_directories(other);
  HttpClientOptions wrong = o;
  wrong.ca_cert_path = make_test_cert(other).cert;
  r = (*HttpClient::create(wrong))->post("/v1/echo/a", "x", "text/plain");
  EXPECT_FALSE(r.ok());
  for (int fd : stalled)
    close(fd);
  server.stop();
  std::filesystem::remove_all(dir);
}

TEST(HttpServerTest, TlsFilesThatCannotBeUsedAreNamed) {
  HttpServerOptions options;
  options.tls_cert_path = "/nonexistent/cert.pem";
  options.tls_key_path = "/nonexistent/key.pem";
  HttpServer server(options);
  Status s = server.start();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/nonexistent/cert.pem"), std::string::npos) << s.message();
  options.tls_key_path = "";
  HttpServer half(options);
  EXPECT_FALSE(half.start().ok());
}

TEST(HttpServerTest, AThrowingHandlerAnswers500AndTheServerLives) {
  HttpServer server(HttpServerOptions{});
  server.get("/boom", [](const HttpRequest&) -> HttpResponse { throw std::runtime_error("x"); });
  server.get("/ok", [](const HttpRequest&) { return HttpResponse{200, "text/plain", "ok", {}}; });
  ASSERT_TRUE(server.start().ok());
  httplib::Client client = client_for(server.port());
  auto res = client.Get("/boom");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 500);
  res = client.Get("/ok");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->body, "ok");
}

TEST(HttpServerTest, OversizedBodiesAreRefused) {
  HttpServerOptions options;
  options.body_bytes_max = 16;
  HttpServer server(options);
  std::atomic<int> calls{0};
  server.post("/in", [&](const HttpRequest&) {
    ++calls;
    return HttpResponse{};
  });
  ASSERT_TRUE(server.start().ok());
  httplib::Client client = client_for(server.port());
  auto res = client.Post("/in", std::string(1000, 'x'), "text/plain");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 413);
  EXPECT_EQ(calls.load(), 0);
}

// A raw TCP connection to 127.0.0.1:port; -1 on failure. Reads time out after 5 s.
int connect_raw(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Everything the server sends until it closes or 5 s pass.
std::string read_all(int fd) {
  std::string got;
  char buf[4096];
  while (true) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return got;
    got.append(buf, static_cast<size_t>(n));
  }
}

// Seconds one GET /healthz takes on a fresh connection; -1 when it fails (3 s client timeout).
double healthz_seconds(int port) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(std::chrono::seconds(3));
  client.set_read_timeout(std::chrono::seconds(3));
  const auto start = std::chrono::steady_clock::now();
  auto res = client.Get("/healthz");
  if (!res || res->status != 200) return -1;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void add_healthz(HttpServer& server) {
  server.get("/healthz", [](const HttpRequest&) {
    return HttpResponse{200, "text/plain", "ok", {}};
  });
}

// 20 connections that never send a byte held all 4 of httplib's workers for its 5 s keep-alive
// wait each: /healthz answered after 25 s.
TEST(HttpServerTest, IdleConnectionsDoNotStarveOthers) {
  HttpServer server(HttpServerOptions{});
  add_healthz(server);
  ASSERT_TRUE(server.start().ok());
  std::vector<int> idle;
  for (int i = 0; i < 20; ++i) {
    const int fd = connect_raw(server.port());
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  const double seconds = healthz_seconds(server.port());
  for (int fd : idle)
    close(fd);
  EXPECT_GE(seconds, 0) << "/healthz failed with 20 idle connections open";
  EXPECT_LT(seconds, 2.0);
}

// Four clients each sending one byte of a request every 200 ms held all four workers as long
// as they kept sending (httplib's read timeout restarts with every byte).
TEST(HttpServerTest, SlowClientsDoNotStarveOthers) {
  HttpServer server(HttpServerOptions{});
  add_healthz(server);
  ASSERT_TRUE(server.start().ok());
  const std::string request = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  std::atomic<bool> done{false};
  std::vector<std::thread> loris;
  for (int i = 0; i < 4; ++i) {
    loris.emplace_back([&, port = server.port()] {
      const int fd = connect_raw(port);
      if (fd < 0) return;
      // Bounded: at most 20 bytes (4 s), fewer once the measurement is over.
      for (size_t b = 0; b < 20 && !done.load(); ++b) {
        if (send(fd, request.data() + b, 1, MSG_NOSIGNAL) != 1) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
      close(fd);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const double seconds = healthz_seconds(server.port());
  done = true;
  for (std::thread& t : loris)
    t.join();
  EXPECT_GE(seconds, 0) << "/healthz failed with 4 slow clients open";
  EXPECT_LT(seconds, 2.0);
}

TEST(HttpServerTest, ARequestThatDoesNotArriveInTimeIsAnswered408) {
  HttpServerOptions options;
  options.request_timeout_ms = 200;
  HttpServer server(options);
  add_healthz(server);
  ASSERT_TRUE(server.start().ok());
  const int fd = connect_raw(server.port());
  ASSERT_GE(fd, 0);
  ASSERT_EQ(send(fd, "GET /hea", 8, MSG_NOSIGNAL), 8);
  const auto start = std::chrono::steady_clock::now();
  const std::string got = read_all(fd);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  close(fd);
  EXPECT_EQ(got.rfind("HTTP/1.1 408", 0), 0u) << got;
  EXPECT_LT(seconds, 2.0);
}

TEST(HttpServerTest, AnIdleConnectionIsClosedAfterTheIdleTimeout) {
  HttpServerOptions options;
  options.idle_timeout_ms = 200;
  HttpServer server(options);
  add_healthz(server);
  ASSERT_TRUE(server.start().ok());
  const int fd = connect_raw(server.port());
  ASSERT_GE(fd, 0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(read_all(fd), "");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.0);
  close(fd);
}

TEST(HttpServerTest, ConnectionsBeyondTheLimitAreAnswered503) {
  HttpServerOptions options;
  options.connections_max = 2;
  HttpServer server(options);
  add_healthz(server);
  ASSERT_TRUE(server.start().ok());
  const int a = connect_raw(server.port());
  const int b = connect_raw(server.port());
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  // Both accepted before the third arrives: one request on each proves it.
  for (int fd : {a, b}) {
    const std::string req = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    ASSERT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
    char buf[512];
    ASSERT_GT(recv(fd, buf, sizeof(buf), 0), 0);
  }
  const int c = connect_raw(server.port());
  ASSERT_GE(c, 0);
  const std::string got = read_all(c);
  EXPECT_EQ(got.rfind("HTTP/1.1 503", 0), 0u) << got;
  for (int fd : {a, b, c})
    close(fd);
}

TEST(HttpServerTest, PipelinedRequestsAreAnsweredInOrder) {
  HttpServer server(HttpServerOptions{});
  server.get("/a", [](const HttpRequest&) { return HttpResponse{200, "text/plain", "first", {}}; });
  server.get("/b", [](const HttpRequest&) {
    return HttpResponse{200, "text/plain", "second", {}};
  });
  ASSERT_TRUE(server.start().ok());
  const int fd = connect_raw(server.port());
  ASSERT_GE(fd, 0);
  const std::string reqs =
      "GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\nConnection: "
      "close\r\n\r\n";
  ASSERT_EQ(send(fd, reqs.data(), reqs.size(), MSG_NOSIGNAL), static_cast<ssize_t>(reqs.size()));
  const std::string got = read_all(fd);
  close(fd);
  const size_t first = got.find("first");
  const size_t second = got.find("second");
  ASSERT_NE(first, std::string::npos) << got;
  ASSERT_NE(second, std::string::npos) << got;
  EXPECT_LT(first, second);
}

TEST(HttpServerTest, ChunkedBodiesAreAnswered411) {
  HttpServer server(HttpServerOptions{});
  add_healthz(server);
  ASSERT_TRUE(server.start().ok());
  const int fd = connect_raw(server.port());
  ASSERT_GE(fd, 0);
  const std::string req = "POST /healthz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
  ASSERT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  const std::string got = read_all(fd);
  close(fd);
  EXPECT_EQ(got.rfind("HTTP/1.1 411", 0), 0u) << got;
}

TEST(HttpServerTest, BindingAPortInUseNamesTheAddress) {
  HttpServer first(HttpServerOptions{});
  ASSERT_TRUE(first.start().ok());
  HttpServerOptions options;
  options.port = first.port();
  HttpServer second(options);
  Status s = second.start();
  ASSERT_TRUE(s.is_io_error());
  EXPECT_NE(s.message().find("127.0.0.1:" + std::to_string(first.port())), std::string::npos)
      << s.message();
}

TEST(MetricsEndpointTest, ServesMetricsAndHealth) {
  MetricsRegistry registry;
  MetricGroup group(&registry);
  group.add_gauge("kiln_test_value", "A value.").Set(42);
  std::atomic<bool> healthy{true};
  HttpServer server(HttpServerOptions{});
  add_metrics_routes(&server, &registry, [&] {
    return healthy ? HealthReport{} : HealthReport{false, "disk full"};
  });
  ASSERT_TRUE(server.start().ok());
  httplib::Client client = client_for(server.port());
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), kPrometheusTextContentType);
  EXPECT_NE(res->body.find("\nkiln_test_value 42\n"), std::string::npos) << res->body;
  res = client.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(nlohmann::json::parse(res->body)["status"], "ok");
  healthy = false;
  res = client.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  auto body = nlohmann::json::parse(res->body);
  EXPECT_EQ(body["status"], "unhealthy");
  EXPECT_EQ(body["detail"], "disk full");
}

}  // namespace
}  // namespace kiln::obs
