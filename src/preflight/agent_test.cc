#include <kiln/preflight/agent.h>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <thread>

#include "base/testing/temp_path.h"

namespace kiln::preflight {
namespace {

std::string write_config(const std::string& text) {
  const std::string path = kiln::testing::unique_temp_path("agent.yaml");
  std::ofstream(path) << text;
  return path;
}

TEST(AgentConfigTest, OverridesOnlyWhatTheFileSays) {
  AgentOptions options;
  options.http.bind_address = "127.0.0.2";
  const std::string path = write_config("metrics:\n  port: 9400\nlabels: {rack: r1}\n");
  ASSERT_TRUE(load_agent_config(path, &options).ok());
  EXPECT_EQ(options.http.port, 9400);
  EXPECT_EQ(options.http.bind_address, "127.0.0.2");
  EXPECT_EQ(options.heartbeat_interval_ms, 1000);
  EXPECT_EQ(options.labels.at("rack"), "r1");
  std::remove(path.c_str());
}

TEST(AgentConfigTest, BadConfigsNameLineAndKey) {
  AgentOptions options;
  std::string path = write_config("metrics:\n  prot: 9400\n");
  Status s = load_agent_config(path, &options);
  EXPECT_NE(s.message().find(path + ":2:3: key 'metrics.prot': unknown key; did you mean 'port'?"),
            std::string::npos)
      << s.message();
  path = write_config("heartbeat_interval_ms: fast\n");
  s = load_agent_config(path, &options);
  EXPECT_EQ(s.message(),
            path + ":1:24: key 'heartbeat_interval_ms': expected an integer, got 'fast'");
  path = write_config("labels:\n  rack-id: r1\n");
  s = load_agent_config(path, &options);
  EXPECT_NE(s.message().find(path + ":2:3: key 'labels.rack-id': not a valid Prometheus label"),
            std::string::npos)
      << s.message();
  std::remove(path.c_str());
}

TEST(AgentConfigTest, EveryBadLabelIsReportedAtOnce) {
  // Issue 10: only the first bad label was reported, so fixing a file took one run per label.
  AgentOptions options;
  const std::string path = write_config("labels:\n  rack-id: r1\n  zone: z\n  __gpu: a\n");
  const Status s = load_agent_config(path, &options);
  EXPECT_NE(s.message().find(path + ":2:3: key 'labels.rack-id': not a valid Prometheus label"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find(path + ":4:3: key 'labels.__gpu': not a valid Prometheus label"),
            std::string::npos)
      << s.message();
  std::remove(path.c_str());
}

TEST(NodeAgentTest, ServesMetricsFactsAndHealth) {
  obs::MetricsRegistry registry;
  AgentOptions options;
  options.labels = {{"rack", "r1"}, {"switch", "s3"}};
  options.heartbeat_interval_ms = 10;
  Result<std::unique_ptr<NodeAgent>> agent = NodeAgent::start(options, &registry, Logger());
  ASSERT_TRUE(agent.ok()) << agent.status().to_string();
  httplib::Client client("127.0.0.1", (*agent)->metrics_port());
  client.set_read_timeout(std::chrono::seconds(5));

  auto res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_NE(res->body.find("kiln_agent_info{rack=\"r1\",switch=\"s3\"} 1"), std::string::npos)
      << res->body;
  EXPECT_NE(res->body.find("\nkiln_node_cpus "), std::string::npos);
  EXPECT_NE(res->body.find("\nkiln_node_memory_available_bytes "), std::string::npos);
  EXPECT_NE(res->body.find("\nkiln_agent_heartbeats_total 1"), std::string::npos);

  res = client.Get("/facts");
  ASSERT_TRUE(res);
  EXPECT_EQ(nlohmann::json::parse(res->body)["schema"], "kiln.facts/1");

  (*agent)->heartbeat();
  res = client.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  // Far more than kStalledHeartbeats intervals of 10 ms without a heartbeat.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  res = client.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  EXPECT_NE(res->body.find("agent loop stalled"), std::string::npos);
  (*agent)->stop();
}

}  // namespace
}  // namespace kiln::preflight
