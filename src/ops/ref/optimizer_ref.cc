// Reference AdamW and global gradient norm (see include/kiln/ops/optimizer.h), in double.
// AdamW reads every state element as f32, updates it in double and rounds the new param, m and v
// to f32 once each.
#include <cmath>

#include "ops/ref/ref.h"

namespace kiln::ops::ref {

Status adamw_update(const AdamWParams& p) {
  float* param = p.params.f32_ptr();
  const float* grad = p.grads.f32_ptr();
  float* m = p.m.f32_ptr();
  float* v = p.v.f32_ptr();
  const double beta1 = p.beta1;
  const double beta2 = p.beta2;
  const double step = static_cast<double>(p.step);
  const double bias_correction1 = 1.0 - std::pow(beta1, step);
  const double bias_correction2 = 1.0 - std::pow(beta2, step);
  for (int64_t i = 0; i < p.params.numel(); ++i) {
    const double g = static_cast<double>(grad[i]) * p.grad_scale;
    const double m_new = beta1 * m[i] + (1.0 - beta1) * g;
    const double v_new = beta2 * v[i] + (1.0 - beta2) * g * g;
    const double m_hat = m_new / bias_correction1;
    const double v_hat = v_new / bias_correction2;
    const double old = param[i];
    const double update =
        static_cast<double>(p.lr) *
        (m_hat / (std::sqrt(v_hat) + static_cast<double>(p.eps)) + p.weight_decay * old);
    param[i] = static_cast<float>(old - update);
    m[i] = static_cast<float>(m_new);
    v[i] = static_cast<float>(v_new);
  }
  return Status();
}

Result<double> global_grad_norm(const std::vector<TensorView>& grads) {
  double sum_sq = 0;
  for (const TensorView& g : grads) {
    const float* data = g.f32_ptr();
    for (int64_t i = 0; i < g.numel(); ++i)
      sum_sq += static_cast<double>(data[i]) * data[i];
  }
  return std::sqrt(sum_sq);
}

}  // namespace kiln::ops::ref
