// The BLAS core check: which OpenBLAS cores count as which ISA, which core a CPU should run,
// and when the binary forces one. The loaded library's own report is checked against the CPU.
#include <kiln/ops/blas.h>

#include <gtest/gtest.h>

namespace kiln::ops {
namespace {

CpuFeatures avx512(bool bf16) {
  CpuFeatures f;
  f.sse42 = f.avx = f.avx2 = f.fma = f.f16c = true;
  f.avx512f = f.avx512bw = f.avx512dq = f.avx512vl = true;
  f.avx512bf16 = bf16;
  return f;
}

CpuFeatures avx2_only() {
  CpuFeatures f;
  f.sse42 = f.avx = f.avx2 = f.fma = f.f16c = true;
  return f;
}

BlasInfo running(const std::string& core, CpuIsa cpu, const std::string& env = "") {
  BlasInfo info;
  info.core = core;
  info.core_isa = openblas_core_isa(core);
  info.cpu_isa = cpu;
  info.coretype_env = env;
  return info;
}

TEST(BlasTest, CoreNamesMapToTheIsaTheirKernelsUse) {
  EXPECT_EQ(openblas_core_isa("Prescott"), CpuIsa::kScalar);
  EXPECT_EQ(openblas_core_isa("Nehalem"), CpuIsa::kScalar);
  EXPECT_EQ(openblas_core_isa("Sandybridge"), CpuIsa::kScalar);  // AVX without FMA
  EXPECT_EQ(openblas_core_isa("Haswell"), CpuIsa::kAvx2);
  EXPECT_EQ(openblas_core_isa("zen"), CpuIsa::kAvx2);
  EXPECT_EQ(openblas_core_isa("SkylakeX"), CpuIsa::kAvx512);
  EXPECT_EQ(openblas_core_isa("COOPERLAKE"), CpuIsa::kAvx512);
  EXPECT_EQ(openblas_core_isa("SapphireRapids"), CpuIsa::kAvx512);
  EXPECT_EQ(openblas_core_isa("a core from the future"), CpuIsa::kScalar);
}

TEST(BlasTest, TheCoreForACpuComesFromItsIsaFlags) {
  EXPECT_EQ(openblas_core_for(avx512(true)), "Cooperlake");
  EXPECT_EQ(openblas_core_for(avx512(false)), "SkylakeX");
  EXPECT_EQ(openblas_core_for(avx2_only()), "Haswell");
  EXPECT_EQ(openblas_core_for(CpuFeatures()), "");
}

TEST(BlasTest, AFallbackIsForcedToTheCpusCoreUnlessTheUserChoseOne) {
  // The Intel Xeon (family 6, model 207) that Debian 12's OpenBLAS does not know.
  EXPECT_EQ(openblas_coretype_to_force(running("Prescott", CpuIsa::kAvx512), avx512(true)),
            "Cooperlake");
  EXPECT_EQ(openblas_coretype_to_force(running("Haswell", CpuIsa::kAvx512), avx512(false)),
            "SkylakeX");
  EXPECT_EQ(openblas_coretype_to_force(running("Prescott", CpuIsa::kAvx2), avx2_only()), "Haswell");
  // Already the best: nothing to do.
  EXPECT_EQ(openblas_coretype_to_force(running("Cooperlake", CpuIsa::kAvx512), avx512(true)),
            std::nullopt);
  EXPECT_EQ(openblas_coretype_to_force(running("SkylakeX", CpuIsa::kAvx512), avx512(true)),
            std::nullopt);
  // The user's OPENBLAS_CORETYPE wins, even a worse one.
  EXPECT_EQ(
      openblas_coretype_to_force(running("Prescott", CpuIsa::kAvx512, "Prescott"), avx512(true)),
      std::nullopt);
  // A CPU with nothing better than the baseline.
  EXPECT_EQ(openblas_coretype_to_force(running("Prescott", CpuIsa::kScalar), CpuFeatures()),
            std::nullopt);
}

TEST(BlasTest, TheLoadedLibraryReportsItsCoreAndThisCpu) {
  const BlasInfo info = blas_info();
  EXPECT_EQ(info.library, "OpenBLAS");
  EXPECT_NE(info.config.find("OpenBLAS"), std::string::npos) << info.config;
  EXPECT_FALSE(info.core.empty());
  // Two independent reports of the library agree: its build summary names the core it loaded
  // (DYNAMIC_ARCH builds append it). Which core that is, and whether kiln forces another, is
  // checked against OpenBLAS itself, through ctypes, in tests/cli/cli_test.py.
  EXPECT_NE(info.config.find(info.core), std::string::npos)
      << "config '" << info.config << "' does not name core '" << info.core << "'";
}

}  // namespace
}  // namespace kiln::ops
