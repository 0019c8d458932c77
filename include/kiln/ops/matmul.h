// Matmul: the linear layers of a transformer, through a GEMM library, with the bias folded in.
//
//   forward:  y = x @ w^T + bias              x (M, K), w (N, K), bias (N) or absent, y (M, N)
//   backward: dx (=|+=) dy @ w                dy (M, N) -> dx (M, K)
//             dw += dy^T @ x                   -> dw (N, K)
//             dbias += sum over rows of dy     -> dbias (N)
//
// w is stored (out_features, in_features) as in PyTorch's nn.Linear and llm.c. Every view must
// have a unit stride in its last dimension; leading strides may be larger (a slice of a wider
// buffer).
//
// Precision: the inputs x, w (and dy) are all f32 or all bf16; the outputs y, dx, dw, the bias
// and dbias are always f32. f32 inputs go through the Context's library (OpenBLAS or oneDNN's
// sgemm); bf16 inputs through oneDNN's bf16 matmul (AMX tiles or AVX512-BF16 dot products where
// the CPU has them; kNotSupported on a CPU without AVX-512). A bf16 product is computed exactly
// and summed in f32, so a bf16 matmul is the f32 matmul of the bf16-rounded inputs up to the
// order of the sums (mixed precision as PyTorch's autocast, with an f32 output). dbias sums a
// bf16 dy in f32. Absent dx, dw or dbias are skipped. Parameter gradients (dw, dbias)
// accumulate, so gradient accumulation needs no extra buffer; dx is overwritten unless
// accumulate_dx is set.
#ifndef KILN_OPS_MATMUL_H_
#define KILN_OPS_MATMUL_H_

#include <string>

#include <kiln/base/status.h>
#include <kiln/ops/context.h>
#include <kiln/ops/tensor.h>

namespace kiln::ops {

struct MatmulParams {
  TensorView x;     // (M, K)
  TensorView w;     // (N, K)
  TensorView bias;  // (N) or absent
  TensorView y;     // (M, N)
};
Status matmul_forward(const MatmulParams& p, const Context& ctx);

struct MatmulBackwardParams {
  TensorView dy;     // (M, N)
  TensorView x;      // (M, K)
  TensorView w;      // (N, K)
  TensorView dx;     // (M, K) or absent
  TensorView dw;     // (N, K) or absent; accumulated
  TensorView dbias;  // (N) or absent; accumulated
  bool accumulate_dx = false;
};
Status matmul_backward(const MatmulBackwardParams& p, const Context& ctx);

// OK iff matmuls with bf16 inputs run on this CPU; else kNotSupported saying why.
Status bf16_matmul_available();
// The kernel they run ("brg:avx512_core_amx_bf16", oneDNN's name), or "" when not available.
std::string bf16_matmul_kernel();

}  // namespace kiln::ops

#endif  // KILN_OPS_MATMUL_H_
