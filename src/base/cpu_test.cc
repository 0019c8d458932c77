#include <kiln/base/cpu.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace kiln {
namespace {

// The kernel's view of the CPU flags (/proc/cpuinfo), an independent reference for cpuid.
std::set<std::string> proc_cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0) {
      std::istringstream words(line.substr(line.find(':') + 1));
      std::set<std::string> flags;
      std::string w;
      while (words >> w)
        flags.insert(w);
      return flags;
    }
  }
  return {};
}

TEST(CpuTest, AgreesWithProcCpuinfo) {
  const std::set<std::string> flags = proc_cpu_flags();
  if (flags.empty()) GTEST_SKIP() << "/proc/cpuinfo has no flags line on this machine";
  const CpuFeatures f = detect_cpu_features();
  EXPECT_EQ(f.avx2, flags.count("avx2") == 1);
  EXPECT_EQ(f.fma, flags.count("fma") == 1);
  EXPECT_EQ(f.avx512f, flags.count("avx512f") == 1);
  EXPECT_EQ(f.avx512bw, flags.count("avx512bw") == 1);
  EXPECT_EQ(f.avx512vl, flags.count("avx512vl") == 1);
}

TEST(CpuTest, BestIsaNeedsEveryRequirement) {
  CpuFeatures f;
  EXPECT_EQ(f.best_isa(), CpuIsa::kScalar);
  f.avx2 = true;
  EXPECT_EQ(f.best_isa(), CpuIsa::kScalar);  // AVX2 without FMA is not enough
  f.fma = true;
  EXPECT_EQ(f.best_isa(), CpuIsa::kAvx2);
  f.avx512f = f.avx512bw = f.avx512dq = true;
  EXPECT_EQ(f.best_isa(), CpuIsa::kAvx2);  // still missing VL
  f.avx512vl = true;
  EXPECT_EQ(f.best_isa(), CpuIsa::kAvx512);
}

TEST(CpuTest, FlagNamesListWhatIsPresent) {
  CpuFeatures f;
  f.avx2 = true;
  f.avx512vnni = true;
  EXPECT_EQ(f.flag_names(), (std::vector<std::string>{"avx2", "avx512vnni"}));
}

TEST(CpuTest, IsaNamesRoundTrip) {
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    EXPECT_EQ(*parse_cpu_isa(cpu_isa_name(isa)), isa);
  }
  EXPECT_TRUE(parse_cpu_isa("sse9").status().is_invalid_argument());
}

}  // namespace
}  // namespace kiln
