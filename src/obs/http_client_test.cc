#include <kiln/obs/http_client.h>
#include <kiln/obs/http_server.h>

#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <netinet/in.h>

namespace kiln::obs {
namespace {

HttpClientOptions options_for(const std::string& url, const std::string& token) {
  HttpClientOptions o;
  o.base_url = url;
  o.bearer_token = token;
  return o;
}

TEST(HttpClientTest, SendsTheTokenAndReturnsEveryStatusAsAValue) {
  HttpServer server(HttpServerOptions{});
  server.route("GET", "/v1/whoami", [](const HttpRequest& req) {
    HttpResponse r;
    r.status = req.header("authorization") == "Bearer t0k" ? 200 : 401;
    r.body = req.header("authorization");
    return r;
  });
  server.route("POST", "/v1/echo", [](const HttpRequest& req) {
    return HttpResponse{201, "application/json", req.body, {{"Location", "/v1/x"}}};
  });
  server.route("DELETE", "/v1/thing/{id}", [](const HttpRequest& req) {
    return HttpResponse{404, "text/plain", "no " + req.path_params.at("id"), {}};
  });
  ASSERT_TRUE(server.start().ok());
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port());

  Result<std::unique_ptr<HttpClient>> client = HttpClient::create(options_for(url, "t0k"));
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  Result<HttpResponse> r = (*client)->get("/v1/whoami");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "Bearer t0k");
  r = (*client)->post("/v1/echo", R"({"a":1})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 201);
  EXPECT_EQ(r->body, R"({"a":1})");
  EXPECT_EQ(r->content_type, "application/json");
  r = (*client)->del("/v1/thing/7");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(r->body, "no 7");

  Result<std::unique_ptr<HttpClient>> anonymous = HttpClient::create(options_for(url, ""));
  ASSERT_TRUE(anonymous.ok());
  r = (*anonymous)->get("/v1/whoami");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 401);
}

TEST(HttpClientTest, AServerThatIsNotThereIsUnavailableNamingIt) {
  // A port that was just free: bind, read the port, close.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(fd);
  const std::string url = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  HttpClientOptions options = options_for(url, "");
  options.connect_timeout_ms = 500;
  Result<std::unique_ptr<HttpClient>> client = HttpClient::create(options);
  ASSERT_TRUE(client.ok());
  Result<HttpResponse> r = (*client)->get("/v1/jobs");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find(url + "/v1/jobs"), std::string::npos)
      << r.status().to_string();
}

TEST(HttpClientTest, BadAddressesAreRefusedNamingThem) {
  for (const char* bad : {"127.0.0.1:80", "ftp://h:1", "http://h", "http://h:x", "http://h:1/p"}) {
    Result<std::unique_ptr<HttpClient>> client = HttpClient::create(options_for(bad, ""));
    ASSERT_FALSE(client.ok()) << bad;
    EXPECT_NE(client.status().message().find(bad), std::string::npos) << bad;
  }
}

}  // namespace
}  // namespace kiln::obs
