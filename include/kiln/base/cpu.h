// What the CPU this process runs on can do, detected at run time.
//
// One Kiln binary runs on any x86-64: kernels are compiled for several ISA levels and the best
// one the CPU (and the OS, which must save the wider registers) supports is chosen at run time.
#ifndef KILN_BASE_CPU_H_
#define KILN_BASE_CPU_H_

#include <string>
#include <string_view>
#include <vector>

#include <kiln/base/result.h>

namespace kiln {

// The ISA levels Kiln's kernels are built for, in increasing order of capability.
enum class CpuIsa : int {
  kScalar = 0,  // plain x86-64 (SSE2)
  kAvx2 = 1,    // AVX2 + FMA (Haswell and later, Zen)
  kAvx512 = 2,  // AVX-512 F, BW, DQ, VL (Skylake-SP and later, Zen 4)
};

std::string_view cpu_isa_name(CpuIsa isa);  // "scalar", "avx2", "avx512"
// Accepts the names cpu_isa_name returns.
Result<CpuIsa> parse_cpu_isa(std::string_view name);

struct CpuFeatures {
  bool sse42 = false;
  bool avx = false;
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512dq = false;
  bool avx512vl = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;
  bool avx512vbmi = false;
  bool avx512ifma = false;
  bool amx_tile = false;

  // The best level whose every requirement is present.
  CpuIsa best_isa() const;
  // The names of the flags that are present ("avx2", "fma", ...), in a fixed order.
  std::vector<std::string> flag_names() const;
};

// Detects the running CPU's features (cpuid and XCR0, through the compiler's cpu-support
// builtins). Cheap; thread-safe.
CpuFeatures detect_cpu_features();

}  // namespace kiln

#endif  // KILN_BASE_CPU_H_
