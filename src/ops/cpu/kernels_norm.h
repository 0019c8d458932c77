// The normalisation kernels (cpu/norm.inc: LayerNorm and RMSNorm, forward and backward), declared
// once per ISA namespace. Called only through KILN_OPS_DISPATCH from src/ops/norm.cc, which has
// validated every view: shapes agree, C >= 1, unit inner strides, row strides >= C.
//
// Rows are split into tasks by NormSplit, which depends only on the shape (never on the thread
// count), so the backward's parameter gradients, summed per task and then over tasks in task
// order, are bit-identical for any number of threads.
#ifndef KILN_OPS_CPU_KERNELS_NORM_H_
#define KILN_OPS_CPU_KERNELS_NORM_H_

#include <cstdint>

#include <kiln/base/status.h>
#include <kiln/ops/context.h>
#include <kiln/ops/norm.h>

namespace kiln::ops::cpu {

// Task t covers rows [t * rows_per_task, min(N, (t + 1) * rows_per_task)). A backward's task t
// accumulates its parameter-gradient partials in partials + t * (k * C) (k = 2 for LayerNorm:
// dweight then dbias; 1 for RMSNorm), which the caller owns; forwards pass partials = nullptr.
struct NormSplit {
  int64_t rows_per_task = 1;
  int64_t tasks = 0;
  float* partials = nullptr;
};

}  // namespace kiln::ops::cpu

#define KILN_OPS_NORM_KERNELS(ns)                                                                 \
  namespace kiln::ops::cpu::ns {                                                                  \
  Status layernorm_forward(const LayerNormParams& p, const Context& ctx, const NormSplit& split); \
  Status layernorm_backward(const LayerNormBackwardParams& p, const Context& ctx,                 \
                            const NormSplit& split);                                              \
  Status rmsnorm_forward(const RmsNormParams& p, const Context& ctx, const NormSplit& split);     \
  Status rmsnorm_backward(const RmsNormBackwardParams& p, const Context& ctx,                     \
                          const NormSplit& split);                                                \
  }

KILN_OPS_NORM_KERNELS(scalar)
KILN_OPS_NORM_KERNELS(avx2)
KILN_OPS_NORM_KERNELS(avx512)

#undef KILN_OPS_NORM_KERNELS

#endif  // KILN_OPS_CPU_KERNELS_NORM_H_
