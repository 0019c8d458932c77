// Declarations of Kiln's own kernels for matmul (the GEMMs are OpenBLAS's) and attention, one set
// per ISA namespace (cpu::scalar, cpu::avx2, cpu::avx512); definitions in cpu/matmul.inc and
// cpu/attention.inc.
#ifndef KILN_OPS_CPU_KERNELS_LINEAR_H_
#define KILN_OPS_CPU_KERNELS_LINEAR_H_

#include <kiln/base/status.h>
#include <kiln/ops/attention.h>
#include <kiln/ops/context.h>
#include <kiln/ops/matmul.h>

#define KILN_OPS_LINEAR_KERNELS(ns)                                                     \
  namespace kiln::ops::cpu::ns {                                                        \
  /* dbias[c] += sum over rows of dy[r, c]. */                                          \
  Status column_sums_accumulate(const TensorView& dy, const TensorView& dbias,          \
                                const Context& ctx);                                    \
  Status attention_forward(const AttentionParams& p, const Context& ctx);               \
  Status attention_backward(const AttentionBackwardParams& p, const Context& ctx);      \
  /* q, k, v (and dout) in bf16, products through oneDNN (cpu/attention.inc). */        \
  Status attention_forward_bf16(const AttentionParams& p, const Context& ctx);          \
  Status attention_backward_bf16(const AttentionBackwardParams& p, const Context& ctx); \
  }

KILN_OPS_LINEAR_KERNELS(scalar)
KILN_OPS_LINEAR_KERNELS(avx2)
KILN_OPS_LINEAR_KERNELS(avx512)

#endif  // KILN_OPS_CPU_KERNELS_LINEAR_H_
