// The dispatch point of kiln_ops: one place where a Context becomes a kernel.
//
//   return KILN_OPS_DISPATCH(ctx, "layernorm_forward", layernorm_forward, p, ctx.pool);
//
// expands to a call of cpu::scalar::layernorm_forward, cpu::avx2::layernorm_forward or
// cpu::avx512::layernorm_forward, after checking that the backend is the CPU and that this CPU
// runs the requested ISA. Anything else is kNotSupported naming the op and the missing variant:
// there is no silent fallback. (A CUDA backend would add its case here.)
#ifndef KILN_OPS_DISPATCH_H_
#define KILN_OPS_DISPATCH_H_

#include <kiln/base/cpu.h>
#include <kiln/base/status.h>
#include <kiln/ops/context.h>

#include <cstdint>
#include <string>

namespace kiln::ops {

// OK iff the CPU backend can run `ctx.isa` here; else kNotSupported naming `op`.
Status check_cpu_dispatch(const Context& ctx, const char* op);

// kUnavailable: `op` could not allocate `bytes` of scratch. For kernels, which build no error
// text themselves (see src/ops/cpu/kernel_common.h: nothing inline with external linkage in a
// per-ISA object).
Status scratch_unavailable(const char* op, int64_t bytes);

}  // namespace kiln::ops

#define KILN_OPS_DISPATCH(ctx, op_name, kernel, ...)                                      \
  [&]() -> ::kiln::Status {                                                               \
    KILN_RETURN_IF_ERROR(::kiln::ops::check_cpu_dispatch((ctx), (op_name)));              \
    switch ((ctx).isa) {                                                                  \
      case ::kiln::CpuIsa::kScalar: return ::kiln::ops::cpu::scalar::kernel(__VA_ARGS__); \
      case ::kiln::CpuIsa::kAvx2: return ::kiln::ops::cpu::avx2::kernel(__VA_ARGS__);     \
      case ::kiln::CpuIsa::kAvx512: return ::kiln::ops::cpu::avx512::kernel(__VA_ARGS__); \
    }                                                                                     \
    return ::kiln::Status::not_supported(std::string(op_name) + ": unknown ISA");         \
  }()

#endif  // KILN_OPS_DISPATCH_H_
