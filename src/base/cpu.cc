// Run-time CPU feature detection. See include/kiln/base/cpu.h.
//
// __builtin_cpu_supports consults cpuid and, for AVX and AVX-512, whether the OS enabled the
// register state in XCR0, so a feature it reports is safe to use.
#include <kiln/base/cpu.h>

#include <array>

namespace kiln {
namespace {
constexpr std::array<std::string_view, 3> kIsaNames = {"scalar", "avx2", "avx512"};
}  // namespace

std::string_view cpu_isa_name(CpuIsa isa) {
  return kIsaNames[static_cast<int>(isa)];
}

Result<CpuIsa> parse_cpu_isa(std::string_view name) {
  for (size_t i = 0; i < kIsaNames.size(); ++i) {
    if (kIsaNames[i] == name) return static_cast<CpuIsa>(i);
  }
  return Status::invalid_argument("unknown ISA '" + std::string(name) +
                                  "' (expected scalar, avx2 or avx512)");
}

CpuIsa CpuFeatures::best_isa() const {
  if (avx512f && avx512bw && avx512dq && avx512vl && avx2 && fma) return CpuIsa::kAvx512;
  if (avx2 && fma) return CpuIsa::kAvx2;
  return CpuIsa::kScalar;
}

std::vector<std::string> CpuFeatures::flag_names() const {
  const std::pair<bool, const char*> flags[] = {
      {sse42, "sse4.2"},
      {avx, "avx"},
      {avx2, "avx2"},
      {fma, "fma"},
      {f16c, "f16c"},
      {avx512f, "avx512f"},
      {avx512bw, "avx512bw"},
      {avx512dq, "avx512dq"},
      {avx512vl, "avx512vl"},
      {avx512vnni, "avx512vnni"},
      {avx512bf16, "avx512bf16"},
      {avx512vbmi, "avx512vbmi"},
      {avx512ifma, "avx512ifma"},
      {amx_tile, "amx-tile"},
  };
  std::vector<std::string> names;
  for (const auto& [present, name] : flags) {
    if (present) names.emplace_back(name);
  }
  return names;
}

CpuFeatures detect_cpu_features() {
  __builtin_cpu_init();
  CpuFeatures f;
  f.sse42 = __builtin_cpu_supports("sse4.2");
  f.avx = __builtin_cpu_supports("avx");
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.f16c = __builtin_cpu_supports("f16c");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512vnni = __builtin_cpu_supports("avx512vnni");
  f.avx512bf16 = __builtin_cpu_supports("avx512bf16");
  f.avx512vbmi = __builtin_cpu_supports("avx512vbmi");
  f.avx512ifma = __builtin_cpu_supports("avx512ifma");
  f.amx_tile = __builtin_cpu_supports("amx-tile");
  return f;
}

}  // namespace kiln
