// See include/kiln/ops/blas.h.
#include <kiln/ops/blas.h>

#include <cblas.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace kiln::ops {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

CpuIsa openblas_core_isa(std::string_view core) {
  const std::string name = lower(core);
  // OpenBLAS's x86-64 cores (driver/others/dynamic.c). Sandy Bridge and the Bulldozer family
  // have AVX but no AVX2 or no FMA3 that Kiln's avx2 level needs, so they count as scalar here.
  for (const char* avx512 : {"skylakex", "cooperlake", "sapphirerapids"}) {
    if (name == avx512) return CpuIsa::kAvx512;
  }
  for (const char* avx2 : {"haswell", "zen"}) {
    if (name == avx2) return CpuIsa::kAvx2;
  }
  return CpuIsa::kScalar;
}

std::string openblas_core_for(const CpuFeatures& cpu) {
  switch (cpu.best_isa()) {
    case CpuIsa::kAvx512: return cpu.avx512bf16 ? "Cooperlake" : "SkylakeX";
    case CpuIsa::kAvx2: return "Haswell";
    case CpuIsa::kScalar: return "";
  }
  return "";
}

std::optional<std::string> openblas_coretype_to_force(const BlasInfo& info,
                                                      const CpuFeatures& cpu) {
  if (!info.coretype_env.empty() || !info.fallback()) return std::nullopt;
  std::string core = openblas_core_for(cpu);
  if (core.empty() || openblas_core_isa(core) <= info.core_isa) return std::nullopt;
  return core;
}

BlasInfo blas_info() {
  BlasInfo info;
  info.library = "OpenBLAS";
  const char* config = openblas_get_config();
  info.config = config != nullptr ? config : "";
  // Trailing spaces are part of some builds' config string.
  while (!info.config.empty() && info.config.back() == ' ')
    info.config.pop_back();
  const char* core = openblas_get_corename();
  info.core = core != nullptr ? core : "";
  info.core_isa = openblas_core_isa(info.core);
  info.cpu_isa = detect_cpu_features().best_isa();
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  info.coretype_env = env != nullptr ? env : "";
  return info;
}

}  // namespace kiln::ops
