// Health figures against thresholds: each named with its threshold and value; an unknown figure
// is not a healthy one.
#include <kiln/preflight/health.h>

#include <gtest/gtest.h>

#include <kiln/preflight/facts.h>

namespace kiln::preflight {
namespace {

nlohmann::json facts(int64_t shm, int64_t memory, int64_t nofile) {
  return {{"schema", "kiln.facts/1"},
          {"memory", {{"available_bytes", memory}}},
          {"kernel_params", {{"shm_free_bytes", shm}, {"open_files_soft", nofile}}},
          {"load", {{"cpus_online", 2}, {"loadavg_1m", 0.5}}}};
}

TEST(HealthTest, FiguresPastTheirThresholdsAreNamedWithBoth) {
  HealthThresholds t;
  EXPECT_TRUE(check_health("n1", facts(1LL << 30, 4LL << 30, 65536), t).empty());
  std::vector<Finding> f = check_health("n2", facts(1 << 20, 4LL << 30, 1024), t);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].node, "n2");
  EXPECT_EQ(f[0].check, "health");
  EXPECT_EQ(f[0].path, "kernel_params.shm_free_bytes");
  EXPECT_EQ(f[0].expected, ">= 268435456");
  EXPECT_EQ(f[0].found, "1048576");
  EXPECT_EQ(f[0].against, "threshold");
  EXPECT_EQ(f[1].path, "kernel_params.open_files_soft");
  EXPECT_EQ(f[1].found, "1024");
  // Exactly at the threshold passes.
  EXPECT_TRUE(
      check_health("n1",
                   facts(t.shm_free_bytes_min, t.memory_available_bytes_min, t.open_files_min), t)
          .empty());
}

TEST(HealthTest, AnUnknownFigureAndAClockOffFail) {
  nlohmann::json f = facts(1LL << 30, 4LL << 30, 65536);
  f["memory"]["available_bytes"] = nullptr;
  std::vector<Finding> out = check_health("n1", f, {}, -1500);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].path, "memory.available_bytes");
  EXPECT_EQ(out[0].found, "unknown");
  EXPECT_EQ(out[1].path, "clock_offset_ms");
  EXPECT_EQ(out[1].found, "-1500");
  EXPECT_TRUE(check_health("n1", facts(1LL << 30, 4LL << 30, 65536), {}, 999).empty());
  EXPECT_EQ(check_health("n1", nlohmann::json::array(), {}).size(), 3u);
}

TEST(HealthTest, OthersLoadFullDisksAndAGpuThatDoesNotAnswerAreNamed) {
  nlohmann::json f = facts(1LL << 30, 4LL << 30, 65536);
  HealthThresholds t;
  f["load"]["loadavg_1m"] = 8.5;  // 4.25 per CPU on 2
  f["disks"] = {{{"path", "/ckpt"}, {"free_bytes", 1 << 20}, {"total_bytes", 1LL << 40}},
                {{"path", "/data"}, {"free_bytes", 2LL << 30}, {"total_bytes", 1LL << 40}},
                {{"path", "/gone"}, {"free_bytes", nullptr}, {"total_bytes", nullptr}}};
  f["gpu"] = {{"devices",
               {{{"index", 0}, {"memory_bytes", 85899345920LL}},
                {{"index", 1}, {"memory_bytes", nullptr}}}}};
  std::vector<Finding> out = check_health("n1", f, t);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].path, "load.loadavg_1m");
  EXPECT_EQ(out[0].expected, "<= 4 per CPU");
  EXPECT_EQ(out[0].found, "8.50 on 2 CPUs");
  EXPECT_EQ(out[1].path, "disks./ckpt.free_bytes");
  EXPECT_EQ(out[1].expected, ">= 1073741824");
  EXPECT_EQ(out[1].found, "1048576");
  EXPECT_EQ(out[2].path, "disks./gone.free_bytes");
  EXPECT_EQ(out[2].found, "unknown (not a readable directory)");
  EXPECT_EQ(out[3].path, "gpu.devices.1");
  // Exactly at the load threshold passes; 0 turns the check off.
  f["load"]["loadavg_1m"] = 8.0;
  EXPECT_EQ(check_health("n1", f, t).size(), 3u);
  f["load"]["loadavg_1m"] = 100.0;
  t.load_per_cpu_max = 0;
  EXPECT_EQ(check_health("n1", f, t).size(), 3u);
}

TEST(HealthTest, ANodeWithFewerGpusThanMostOfItsModelIsNamed) {
  std::vector<Finding> out = check_gpu_counts({{"a", {"H100", 8}},
                                               {"b", {"H100", 8}},
                                               {"c", {"H100", 7}},
                                               {"d", {"A10", 4}},
                                               {"e", {"A10", 4}}});
  // The 4-GPU machines of another model are not held to the 8-GPU ones.
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].node, "c");
  EXPECT_EQ(out[0].path, "gpu.count");
  EXPECT_EQ(out[0].expected, ">= 8 H100");
  EXPECT_EQ(out[0].found, "7");
  EXPECT_EQ(out[0].against, "majority");
  EXPECT_TRUE(check_gpu_counts({}).empty());
  EXPECT_TRUE(check_gpu_counts({{"a", {"H100", 8}}, {"b", {"H100", 8}}}).empty());
}

TEST(HealthTest, ADriverWithoutDevicesAndOlderFactsWithoutLoad) {
  nlohmann::json f = facts(1LL << 30, 4LL << 30, 65536);
  f["gpu"] = {{"driver_version", "550.54.14"}, {"devices", nullptr}};
  std::vector<Finding> out = check_health("n1", f, {});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].path, "gpu.devices");
  EXPECT_EQ(out[0].found, "unknown (CUDA did not initialize)");
  f["gpu"]["devices"] = nlohmann::json::array();
  out = check_health("n1", f, {});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].found, "none");
  // No driver, no GPU: nothing to check.
  f["gpu"] = {{"driver_version", nullptr}, {"devices", nullptr}};
  EXPECT_TRUE(check_health("n1", f, {}).empty());
  // An agent of an older build sends no load section: not checked rather than "unknown".
  f.erase("load");
  EXPECT_TRUE(check_health("n1", f, {}).empty());
}

TEST(HealthTest, ThisMachinesFactsHaveEveryFigure) {
  // Whatever their values, the figures are there: no "unknown".
  HealthThresholds none{0, 0, 0};
  none.load_per_cpu_max = 1e9;
  none.disk_free_bytes_min = 0;
  for (const Finding& f : check_health("here", collect_node_facts({"/tmp"}), none))
    ADD_FAILURE() << f.path << ": " << f.found;
}

}  // namespace
}  // namespace kiln::preflight
