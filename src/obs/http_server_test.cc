#include <kiln/obs/http_server.h>
#include <kiln/obs/metrics_endpoint.h>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <stdexcept>

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

TEST(HttpServerTest, AThrowingHandlerAnswers500AndTheServerLives) {
  HttpServer server(HttpServerOptions{});
  server.get("/boom", [](const HttpRequest&) -> HttpResponse { throw std::runtime_error("x"); });
  server.get("/ok", [](const HttpRequest&) { return HttpResponse{200, "text/plain", "ok"}; });
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
