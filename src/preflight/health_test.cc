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
          {"kernel_params", {{"shm_free_bytes", shm}, {"open_files_soft", nofile}}}};
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

TEST(HealthTest, ThisMachinesFactsHaveEveryFigure) {
  // Whatever their values, the figures are there: no "unknown".
  for (const Finding& f : check_health("here", collect_node_facts(), HealthThresholds{0, 0, 0}))
    ADD_FAILURE() << f.path << ": " << f.found;
}

}  // namespace
}  // namespace kiln::preflight
