// Normalisations over the last dimension of (N, C) rows.
//
// LayerNorm:  mean = sum(x)/C, rstd = 1/sqrt(sum((x-mean)^2)/C + eps)
//             y = (x - mean) * rstd * weight + bias          (saves mean and rstd per row)
// RMSNorm:    rstd = 1/sqrt(sum(x^2)/C + eps),  y = x * rstd * weight     (saves rstd)
//
// Backward: dx (=|+=) the input gradient (accumulate_dx: the residual stream's gradient already
// holds the other branch), dweight += ..., dbias += ... (parameter gradients accumulate).
// Rows may be strided (row stride >= C); C must be contiguous. All views f32, except that
// LayerNorm's y may be bf16.
#ifndef KILN_OPS_NORM_H_
#define KILN_OPS_NORM_H_

#include <kiln/base/status.h>
#include <kiln/ops/context.h>
#include <kiln/ops/tensor.h>

namespace kiln::ops {

struct LayerNormParams {
  TensorView x;       // (N, C)
  TensorView weight;  // (C)
  TensorView bias;    // (C)
  TensorView y;       // (N, C) out: f32 (may be x), or bf16 (each value the f32 result rounded
                      // to nearest even, as convert_f32_to_bf16 would; must not overlap x)
  TensorView mean;    // (N) out
  TensorView rstd;    // (N) out
  float eps = 1e-5f;
};
Status layernorm_forward(const LayerNormParams& p, const Context& ctx);

struct LayerNormBackwardParams {
  TensorView dy;       // (N, C)
  TensorView x;        // (N, C)
  TensorView weight;   // (C)
  TensorView mean;     // (N)
  TensorView rstd;     // (N)
  TensorView dx;       // (N, C) out
  TensorView dweight;  // (C) accumulated
  TensorView dbias;    // (C) accumulated
  bool accumulate_dx = false;
};
Status layernorm_backward(const LayerNormBackwardParams& p, const Context& ctx);

struct RmsNormParams {
  TensorView x;       // (N, C)
  TensorView weight;  // (C)
  TensorView y;       // (N, C) out
  TensorView rstd;    // (N) out
  float eps = 1e-5f;
};
Status rmsnorm_forward(const RmsNormParams& p, const Context& ctx);

struct RmsNormBackwardParams {
  TensorView dy;       // (N, C)
  TensorView x;        // (N, C)
  TensorView weight;   // (C)
  TensorView rstd;     // (N)
  TensorView dx;       // (N, C) out
  TensorView dweight;  // (C) accumulated
  bool accumulate_dx = false;
};
Status rmsnorm_backward(const RmsNormBackwardParams& p, const Context& ctx);

}  // namespace kiln::ops

#endif  // KILN_OPS_NORM_H_
