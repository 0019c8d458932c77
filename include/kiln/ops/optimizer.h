// AdamW (decoupled weight decay, bias correction) and global gradient-norm clipping.
//
// AdamW, for every element with g = grad * grad_scale (grad_scale applies clipping):
//   m = beta1 m + (1 - beta1) g
//   v = beta2 v + (1 - beta2) g^2
//   m_hat = m / (1 - beta1^step),  v_hat = v / (1 - beta2^step)
//   param -= lr (m_hat / (sqrt(v_hat) + eps) + weight_decay param)
// step counts from 1. params, grads, m, v: f32, contiguous, equal numel.
//
// Clipping: norm = sqrt(sum over every gradient buffer of g^2) (accumulated in double);
// grad_clip_scale(norm, max_norm) = max_norm / (norm + 1e-6) if norm > max_norm, else 1, which
// AdamW then applies as grad_scale without another pass over the gradients.
#ifndef KILN_OPS_OPTIMIZER_H_
#define KILN_OPS_OPTIMIZER_H_

#include <cstdint>
#include <vector>

#include <kiln/base/result.h>
#include <kiln/base/status.h>
#include <kiln/ops/context.h>
#include <kiln/ops/tensor.h>

namespace kiln::ops {

struct AdamWParams {
  TensorView params;  // updated in place
  TensorView grads;
  TensorView m;  // first moment, updated in place
  TensorView v;  // second moment, updated in place
  float lr = 3e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;         // >= 1
  float grad_scale = 1.0f;  // from grad_clip_scale
  // Optional (bf16, contiguous, params' numel): gets the updated params rounded to bf16 (nearest
  // even, as convert_f32_to_bf16), written as each chunk is updated: a bf16 model's weight copy
  // without a pass of its own. Last, so that positional initialisers of the fields above stay
  // right.
  TensorView params_bf16 = {};
};
Status adamw_update(const AdamWParams& p, const Context& ctx);

// sqrt of the sum of squares of every element of every view (f32, contiguous).
Result<double> global_grad_norm(const std::vector<TensorView>& grads, const Context& ctx);

// The factor that brings a gradient of L2 norm `norm` down to `max_norm` (1 if already below).
float grad_clip_scale(double norm, double max_norm);

}  // namespace kiln::ops

#endif  // KILN_OPS_OPTIMIZER_H_
