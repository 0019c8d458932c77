// The point-wise and row-streaming kernels (cpu/pointwise.inc: GELU, residual, embedding,
// softmax cross-entropy, AdamW, sums of squares, bf16 conversion), declared once per ISA
// namespace. Called only through KILN_OPS_DISPATCH from src/ops/{elementwise,embedding,
// cross_entropy,optimizer,convert}.cc, which have validated every view (shapes, dtypes, strides)
// and every token and target id, so the kernels cannot fail and always return OK.
//
// Every kernel's result is independent of the thread count: work is split by element, row or
// channel range, and wherever values are summed across a split, the split depends only on the
// shape and the partial sums are combined in a fixed order.
#ifndef KILN_OPS_CPU_KERNELS_POINTWISE_H_
#define KILN_OPS_CPU_KERNELS_POINTWISE_H_

#include <cstdint>

#include <kiln/base/status.h>
#include <kiln/ops/context.h>
#include <kiln/ops/cross_entropy.h>
#include <kiln/ops/elementwise.h>
#include <kiln/ops/embedding.h>
#include <kiln/ops/optimizer.h>
#include <kiln/ops/tensor.h>

namespace kiln::ops::cpu {

// A run of floats whose squares sum_squares adds up (a slice of one gradient buffer).
struct SquareSumChunk {
  const float* data = nullptr;
  int64_t count = 0;
};

}  // namespace kiln::ops::cpu

#define KILN_OPS_POINTWISE_KERNELS(ns)                                                          \
  namespace kiln::ops::cpu::ns {                                                                \
  Status gelu_forward(const GeluParams& p, const Context& ctx);                                 \
  Status gelu_backward(const GeluBackwardParams& p, const Context& ctx);                        \
  Status residual_forward(const ResidualParams& p, const Context& ctx);                         \
  Status residual_backward(const ResidualBackwardParams& p, const Context& ctx);                \
  /* REQUIRES: every token id in [0, V). */                                                     \
  Status embedding_forward(const EmbeddingParams& p, const Context& ctx);                       \
  Status embedding_backward(const EmbeddingBackwardParams& p, const Context& ctx);              \
  /* vocab: the resolved vocabulary, in [1, Vp]. REQUIRES: every target in [0, vocab). */       \
  Status cross_entropy_forward(const CrossEntropyParams& p, int64_t vocab, const Context& ctx); \
  Status cross_entropy_backward(const CrossEntropyBackwardParams& p, int64_t vocab,             \
                                const Context& ctx);                                            \
  Status adamw_update(const AdamWParams& p, const Context& ctx);                                \
  /* sums[i] = sum of squares of chunks[i], accumulated in double. */                           \
  Status sum_squares(const SquareSumChunk* chunks, int64_t count, double* sums,                 \
                     const Context& ctx);                                                       \
  Status convert_f32_to_bf16(const TensorView& src, const TensorView& dst, const Context& ctx); \
  Status convert_bf16_to_f32(const TensorView& src, const TensorView& dst, const Context& ctx); \
  }

KILN_OPS_POINTWISE_KERNELS(scalar)
KILN_OPS_POINTWISE_KERNELS(avx2)
KILN_OPS_POINTWISE_KERNELS(avx512)

#undef KILN_OPS_POINTWISE_KERNELS

#endif  // KILN_OPS_CPU_KERNELS_POINTWISE_H_
