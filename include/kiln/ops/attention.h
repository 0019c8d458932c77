// Fused scaled-dot-product attention (FlashAttention-2 style) on the CPU.
//
//   forward:  o = softmax(scale * q k^T [+ causal mask]) v, per batch and head
//             lse = log-sum-exp of each query's scaled (masked) scores
//   backward: dq, dk, dv from dout, recomputing the probabilities from lse
//
// The T x T score matrix is never materialised: keys are processed in tiles with an online
// softmax, so extra memory is O(T * D) per thread, linear in T. Work is spread over batch x
// heads and over query blocks (forward) or key blocks (backward).
//
// Layout: q, k, v, o, dout, dq, dk, dv are (B, T, H, D) with any strides but a unit stride in D,
// so the q, k and v thirds of a fused qkv projection ((B, T, 3, H, D) in memory) are used in
// place. lse is (B, H, T), contiguous. dq, dk, dv are overwritten and must not overlap any
// input. D is at most kAttentionHeadDimMax.
//
// Precision: q, k, v (and dout) are all f32 or all bf16; o, lse, dq, dk, dv are always f32. With
// bf16 inputs the products run, at AVX-512, on the CPU's bf16 units through oneDNN (AMX tiles, or
// AVX512-BF16 dot products), and below it widened to f32 for the Context's library (matmul.h),
// a block of 64 queries at a time, with the whole
// row of scores held in f32 (scratch of 64 x T floats a thread, still linear in T) and an exact
// f32 softmax; the probabilities and dS are rounded to bf16 for the products that take them, as
// FlashAttention's bf16 kernels do.
#ifndef KILN_OPS_ATTENTION_H_
#define KILN_OPS_ATTENTION_H_

#include <kiln/base/status.h>
#include <kiln/ops/context.h>
#include <kiln/ops/tensor.h>

namespace kiln::ops {

inline constexpr int kAttentionHeadDimMax = 256;

struct AttentionParams {
  TensorView q;    // (B, T, H, D)
  TensorView k;    // (B, T, H, D)
  TensorView v;    // (B, T, H, D)
  TensorView o;    // (B, T, H, D) out
  TensorView lse;  // (B, H, T) out, f32
  bool causal = true;
  float scale = 0;  // 0 means 1/sqrt(D)
};
Status attention_forward(const AttentionParams& p, const Context& ctx);

struct AttentionBackwardParams {
  TensorView q, k, v;     // as in the forward
  TensorView o;           // the forward's output
  TensorView lse;         // the forward's lse
  TensorView dout;        // (B, T, H, D)
  TensorView dq, dk, dv;  // (B, T, H, D) out, overwritten
  bool causal = true;
  float scale = 0;
};
Status attention_backward(const AttentionBackwardParams& p, const Context& ctx);

}  // namespace kiln::ops

#endif  // KILN_OPS_ATTENTION_H_
