// Which BLAS kiln_ops' GEMMs run on, and whether it runs the best kernels this CPU has.
//
// OpenBLAS (Debian's DYNAMIC_ARCH build) picks its kernel set ("core") from a table of CPU
// models when it loads. A model newer than the table gets a generic fallback: Debian 12's
// OpenBLAS 0.3.21 runs its Prescott (SSE3) kernels on an Intel Xeon of family 6 model 207 with
// AVX-512, sgemm at a sixth of the machine's speed, and says nothing. The fix is the core to
// force (OPENBLAS_CORETYPE, read only when the library loads): one whose kernels use the best
// ISA the CPU has, chosen from the ISA flags rather than the model. The `kiln` binary applies it
// when it starts (src/cli/main.cc); `kiln facts` reports it.
#ifndef KILN_OPS_BLAS_H_
#define KILN_OPS_BLAS_H_

#include <optional>
#include <string>
#include <string_view>

#include <kiln/base/cpu.h>

namespace kiln::ops {

struct BlasInfo {
  std::string library;  // "OpenBLAS"
  std::string config;   // the library's own build summary ("OpenBLAS 0.3.21 DYNAMIC_ARCH ...")
  std::string core;     // the kernel set it runs ("SkylakeX", "Prescott", ...)
  CpuIsa core_isa = CpuIsa::kScalar;  // the widest ISA those kernels use, in Kiln's levels
  CpuIsa cpu_isa = CpuIsa::kScalar;   // the best this CPU has
  std::string coretype_env;           // OPENBLAS_CORETYPE as this process found it; empty: unset
  // The kernels use less than the CPU has: a fallback, unless someone chose it on purpose
  // (coretype_env set).
  bool fallback() const { return core_isa < cpu_isa; }
};

// What the loaded BLAS reports about itself, and this CPU.
BlasInfo blas_info();

// The widest ISA an OpenBLAS core's sgemm kernels use (case-insensitive; unknown names are
// taken as scalar, the baseline every x86-64 kernel set reaches).
CpuIsa openblas_core_isa(std::string_view core);

// The OpenBLAS core whose kernels use the best ISA `cpu` has: Cooperlake (AVX-512 with BF16),
// SkylakeX (AVX-512), Haswell (AVX2 with FMA; also what OpenBLAS's Zen core runs), or empty for
// a CPU with neither (nothing better to force).
std::string openblas_core_for(const CpuFeatures& cpu);

// The core to force, if any: when OPENBLAS_CORETYPE is unset and `info` is a fallback, the core
// openblas_core_for(cpu) names.
std::optional<std::string> openblas_coretype_to_force(const BlasInfo& info, const CpuFeatures& cpu);

}  // namespace kiln::ops

#endif  // KILN_OPS_BLAS_H_
