// read_cpu_topology over fake sysfs trees: SMT siblings grouped into cores, NUMA nodes, CPUs the
// process may not use left out, missing files guessed.
#include <kiln/base/cpu_topology.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "base/testing/temp_path.h"

namespace kiln {
namespace {

void write(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << text << "\n";
}

// A fake /sys/devices/system: cpu i has core id core[i], package package[i]; node n lists
// nodes[n].
std::string fake_sysfs(const std::vector<int>& core, const std::vector<int>& package,
                       const std::vector<std::string>& nodes) {
  const std::filesystem::path root = kiln::testing::unique_temp_dir("sysfs");
  for (size_t i = 0; i < core.size(); ++i) {
    const auto dir = root / "cpu" / ("cpu" + std::to_string(i)) / "topology";
    write(dir / "core_id", std::to_string(core[i]));
    write(dir / "physical_package_id", std::to_string(package[i]));
  }
  for (size_t n = 0; n < nodes.size(); ++n) {
    write(root / "node" / ("node" + std::to_string(n)) / "cpulist", nodes[n]);
  }
  write(root / "node" / "possible", "0-1");  // not a node directory: ignored
  return root.string();
}

TEST(CpuTopologyTest, GroupsSmtSiblingsIntoCoresOrderedByNode) {
  // Two sockets, one node each, 2 cores of 2 threads per socket; Linux numbers the second
  // threads after all first ones (cpu 4 is cpu 0's sibling).
  const std::string root =
      fake_sysfs({0, 1, 0, 1, 0, 1, 0, 1}, {0, 0, 1, 1, 0, 0, 1, 1}, {"0-1,4-5", "2-3,6-7"});
  const CpuTopology t = read_cpu_topology(root, CpuSet({0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_FALSE(t.guessed);
  ASSERT_EQ(t.cores.size(), 4u);
  EXPECT_EQ(t.cores[0].cpus.to_string(), "0,4");
  EXPECT_EQ(t.cores[1].cpus.to_string(), "1,5");
  EXPECT_EQ(t.cores[2].cpus.to_string(), "2,6");
  EXPECT_EQ(t.cores[3].cpus.to_string(), "3,7");
  EXPECT_EQ(t.cores[0].node, 0);
  EXPECT_EQ(t.cores[2].node, 1);
  EXPECT_EQ(t.node_count(), 2);
  EXPECT_EQ(t.cpu_count(), 8);
  EXPECT_EQ(t.describe(), "4 cores (8 CPUs 0-7) on 2 NUMA nodes");
}

TEST(CpuTopologyTest, LeavesOutTheCpusTheProcessMayNotUse) {
  const std::string root = fake_sysfs({0, 1, 0, 1}, {0, 0, 0, 0}, {"0-3"});
  const CpuTopology t = read_cpu_topology(root, CpuSet({1, 2, 3}));
  ASSERT_EQ(t.cores.size(), 2u);
  EXPECT_EQ(t.cores[0].cpus.to_string(), "1,3");  // core 1: cpus 1 and 3
  EXPECT_EQ(t.cores[1].cpus.to_string(), "2");    // core 0, without cpu 0
  EXPECT_EQ(t.all_cpus().to_string(), "1-3");
}

TEST(CpuTopologyTest, MissingFilesMakeEachCpuItsOwnCoreAndSaySo) {
  const std::string root = kiln::testing::unique_temp_dir("nosysfs");
  const CpuTopology t = read_cpu_topology(root, CpuSet({0, 1, 2}));
  EXPECT_TRUE(t.guessed);
  ASSERT_EQ(t.cores.size(), 3u);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(t.cores[static_cast<size_t>(i)].cpus, CpuSet({i}));
  EXPECT_NE(t.describe().find("topology guessed"), std::string::npos);
}

TEST(CpuTopologyTest, ThisMachineHasEveryCpuThisThreadMayUse) {
  Result<CpuTopology> t = this_machine_topology();
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  Result<CpuSet> mine = CpuSet::of_this_thread();
  ASSERT_TRUE(mine.ok());
  EXPECT_EQ(t->all_cpus(), *mine);
  EXPECT_GE(t->node_count(), 1);
}

}  // namespace
}  // namespace kiln
