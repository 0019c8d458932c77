#include <kiln/base/build_info.h>
#include <kiln/preflight/facts.h>
#include <kiln/preflight/stack.h>

#include <gtest/gtest.h>
#include <sys/utsname.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

namespace kiln::preflight {
namespace {

TEST(FactsTest, KernelAndCoresMatchIndependentSources) {
  const nlohmann::ordered_json facts = collect_node_facts();
  std::ifstream osrelease("/proc/sys/kernel/osrelease");
  std::string release;
  std::getline(osrelease, release);
  EXPECT_EQ(facts["kernel"]["release"], release);
  EXPECT_EQ(facts["cpu"]["logical_cores"], std::thread::hardware_concurrency());
  EXPECT_EQ(facts["kiln"]["git_commit"], std::string(build_info().git_commit));
}

TEST(FactsTest, LibraryVersionsComeFromTheLoadedObjects) {
  const nlohmann::ordered_json facts = collect_node_facts();
  const auto& shared = facts["shared_objects"];
  ASSERT_TRUE(shared.is_object());
  bool found_yaml = false;
  for (const auto& [soname, path] : shared.items()) {
    if (soname.rfind("libyaml-cpp.so", 0) == 0) {
      found_yaml = true;
      const std::string p = path.get<std::string>();
      ASSERT_FALSE(facts["libraries"]["yaml_cpp"].is_null());
      EXPECT_EQ(p.substr(p.size() - facts["libraries"]["yaml_cpp"].get<std::string>().size()),
                facts["libraries"]["yaml_cpp"].get<std::string>());
    }
  }
  EXPECT_TRUE(found_yaml) << "the test binary links yaml-cpp dynamically";
  EXPECT_NE(facts["libraries"]["openssl"].get<std::string>().find("OpenSSL"), std::string::npos);
}

TEST(FactsTest, GpuFieldsAreNullWithoutADriver) {
  if (std::ifstream("/proc/driver/nvidia/version")) GTEST_SKIP() << "this machine has a GPU";
  const nlohmann::ordered_json gpu = collect_node_facts()["gpu"];
  EXPECT_TRUE(gpu.contains("driver_version"));
  EXPECT_TRUE(gpu["driver_version"].is_null());
  EXPECT_TRUE(gpu.contains("cuda_runtime_version"));
  EXPECT_TRUE(gpu.contains("devices"));
}

// A node agent's first facts must equal those it gives later: the gate compares a freshly
// started agent with long-running ones. The child re-runs this test alone, so its first
// collection is the process's first (before the GPU probe has loaded anything).
TEST(FactsDeathTest, AFreshProcessGivesTheSameStackFirstAndLater) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const Stack first = stack_of(nlohmann::json::parse(collect_node_facts().dump()));
        const Stack second = stack_of(nlohmann::json::parse(collect_node_facts().dump()));
        for (const auto& [path, value] : second) {
          auto it = first.find(path);
          if (it == first.end() || it->second != value) {
            std::fprintf(stderr, "%s: first %s, then %s\n", path.c_str(),
                         it == first.end() ? "(absent)" : it->second.c_str(), value.c_str());
          }
        }
        std::_Exit(first == second ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace kiln::preflight
