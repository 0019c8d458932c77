// Matmul: the linear layers of a transformer, through OpenBLAS sgemm, with the bias folded in.
//
//   forward:  y = x @ w^T + bias              x (M, K), w (N, K), bias (N) or absent, y (M, N)
//   backward: dx (=|+=) dy @ w                dy (M, N) -> dx (M, K)
//             dw += dy^T @ x                   -> dw (N, K)
//             dbias += sum over rows of dy     -> dbias (N)
//
// w is stored (out_features, in_features) as in PyTorch's nn.Linear and llm.c. Every view must
// be f32 with a unit stride in its last dimension; leading strides may be larger (a slice of a
// wider buffer). Absent dx, dw or dbias are skipped. Parameter gradients (dw, dbias)
// accumulate, so gradient accumulation needs no extra buffer; dx is overwritten unless
// accumulate_dx is set.
#ifndef KILN_OPS_MATMUL_H_
#define KILN_OPS_MATMUL_H_

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

}  // namespace kiln::ops

#endif  // KILN_OPS_MATMUL_H_
