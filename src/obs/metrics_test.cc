#include <kiln/base/build_info.h>
#include <kiln/base/clock.h>
#include <kiln/obs/metrics.h>

#include <gtest/gtest.h>

#include <sstream>
#include <string>

namespace kiln::obs {
namespace {

// The value of the first sample line that starts with `series` (name plus labels, as exposed).
double sample_value(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return -1;
}

bool contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

TEST(MetricsTest, EveryRegistryExportsBuildInfoAndProcessMetrics) {
  MetricsRegistry registry;
  const std::string text = registry.expose_text();
  const BuildInfo& build = build_info();
  EXPECT_TRUE(contains(text, "# TYPE kiln_build_info gauge")) << text;
  EXPECT_TRUE(contains(text, "commit=\"" + std::string(build.git_commit) + "\"")) << text;
  EXPECT_TRUE(contains(text, "version=\"" + std::string(build.version) + "\"")) << text;
  EXPECT_GT(sample_value(text, "process_resident_memory_bytes"), 1e6);
  EXPECT_GE(sample_value(text, "process_open_fds"), 3);
  EXPECT_GT(sample_value(text, "process_max_fds"), 0);
  EXPECT_GE(sample_value(text, "process_threads"), 1);
  EXPECT_TRUE(contains(text, "# TYPE process_cpu_seconds_total counter"));
  const double start = sample_value(text, "process_start_time_seconds");
  const double now = static_cast<double>(wall_now_ns()) * 1e-9;
  EXPECT_LE(start, now + 1);      // started in the past
  EXPECT_GT(start, now - 86400);  // and not before the test run (a day of slack for clock skew)
}

TEST(MetricsTest, GroupSeriesAppearWithTheirValues) {
  MetricsRegistry registry;
  MetricGroup group(&registry);
  group.add_counter("kiln_test_requests_total", "Requests.", {{"path", "/x"}}).Increment(3);
  group.add_gauge("kiln_test_queue_depth", "Queue depth.").Set(7);
  auto& hist = group.add_histogram("kiln_test_latency_seconds", "Latency.",
                                   exponential_buckets(0.001, 10, 3));
  hist.Observe(0.005);
  hist.Observe(5);
  const std::string text = registry.expose_text();
  EXPECT_EQ(sample_value(text, "kiln_test_requests_total{path=\"/x\"}"), 3);
  EXPECT_EQ(sample_value(text, "kiln_test_queue_depth"), 7);
  EXPECT_EQ(sample_value(text, "kiln_test_latency_seconds_bucket{le=\"0.001\"}"), 0);
  EXPECT_EQ(sample_value(text, "kiln_test_latency_seconds_bucket{le=\"0.01\"}"), 1);
  EXPECT_EQ(sample_value(text, "kiln_test_latency_seconds_bucket{le=\"+Inf\"}"), 2);
  EXPECT_EQ(sample_value(text, "kiln_test_latency_seconds_count"), 2);
  EXPECT_DOUBLE_EQ(sample_value(text, "kiln_test_latency_seconds_sum"), 5.005);
}

TEST(MetricsTest, DestroyingAGroupRemovesItsSeriesAndANewOneCanReaddThem) {
  MetricsRegistry registry;
  {
    MetricGroup group(&registry);
    group.add_gauge("kiln_test_world_size", "World size.", {{"comm", "0"}}).Set(4);
    EXPECT_EQ(sample_value(registry.expose_text(), "kiln_test_world_size{comm=\"0\"}"), 4);
  }
  EXPECT_EQ(sample_value(registry.expose_text(), "kiln_test_world_size{comm=\"0\"}"), -1);
  MetricGroup rebuilt(&registry);
  rebuilt.add_gauge("kiln_test_world_size", "World size.", {{"comm", "0"}}).Set(3);
  EXPECT_EQ(sample_value(registry.expose_text(), "kiln_test_world_size{comm=\"0\"}"), 3);
}

TEST(MetricsTest, GroupWithoutRegistryStillWorks) {
  MetricGroup group(nullptr);
  auto& c = group.add_counter("kiln_test_unexported_total", "Not exported.");
  c.Increment();
  EXPECT_EQ(c.Value(), 1);
}

TEST(MetricsTest, exponential_buckets) {
  EXPECT_EQ(exponential_buckets(1, 2, 4), (std::vector<double>{1, 2, 4, 8}));
}

TEST(MetricsDeathTest, TwoOwnersOfOneSeriesIsAProgrammerError) {
  MetricsRegistry registry;
  MetricGroup a(&registry);
  a.add_gauge("kiln_test_dup", "Dup.", {{"rank", "0"}});
  MetricGroup b(&registry);
  EXPECT_DEATH(b.add_gauge("kiln_test_dup", "Dup.", {{"rank", "0"}}), "two owners");
}

TEST(MetricsDeathTest, InvalidNamesAreProgrammerErrors) {
  MetricGroup group(nullptr);
  EXPECT_DEATH(group.add_gauge("kiln-bad-name", "Bad."), "metric family 'kiln-bad-name'");
}

}  // namespace
}  // namespace kiln::obs
