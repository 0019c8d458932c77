// Reference LayerNorm and RMSNorm (see include/kiln/ops/norm.h), row by row in double.
//
// With xhat the normalised row and g = dy * weight, the input gradients are
//   LayerNorm: dx = rstd (g - mean(g) - xhat mean(g xhat)),   xhat = (x - mean) rstd
//   RMSNorm:   dx = rstd (g - xhat mean(g xhat)),              xhat = x rstd
// which are exact (eps enters only through rstd). The backward uses the mean and rstd it is
// given, as the kernels do: it does not know eps.
#include <cmath>
#include <vector>

#include "ops/ref/ref.h"

namespace kiln::ops::ref {

Status layernorm_forward(const LayerNormParams& p) {
  if (p.y.dtype != DType::kF32) {  // ref.h: the references' outputs are f32
    return Status::invalid_argument(
        "ref::layernorm_forward: y must be f32 (a bf16 y is the "
        "kernel's f32 y rounded)");
  }
  const int64_t N = p.x.size(0);
  const int64_t C = p.x.size(1);
  for (int64_t n = 0; n < N; ++n) {
    double sum = 0;
    for (int64_t c = 0; c < C; ++c)
      sum += at(p.x, n, c);
    const double mean = sum / static_cast<double>(C);
    double sum_sq = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double centred = at(p.x, n, c) - mean;
      sum_sq += centred * centred;
    }
    const double rstd = 1.0 / std::sqrt(sum_sq / static_cast<double>(C) + p.eps);
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = (at(p.x, n, c) - mean) * rstd;
      at(p.y, n, c) = static_cast<float>(xhat * at(p.weight, c) + at(p.bias, c));
    }
    at(p.mean, n) = static_cast<float>(mean);
    at(p.rstd, n) = static_cast<float>(rstd);
  }
  return Status();
}

Status layernorm_backward(const LayerNormBackwardParams& p) {
  const int64_t N = p.x.size(0);
  const int64_t C = p.x.size(1);
  std::vector<double> dweight(static_cast<size_t>(C));
  std::vector<double> dbias(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    dweight[static_cast<size_t>(c)] = at(p.dweight, c);
    dbias[static_cast<size_t>(c)] = at(p.dbias, c);
  }
  for (int64_t n = 0; n < N; ++n) {
    const double mean = at(p.mean, n);
    const double rstd = at(p.rstd, n);
    double g_mean = 0;
    double g_xhat_mean = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = (at(p.x, n, c) - mean) * rstd;
      const double g = static_cast<double>(at(p.dy, n, c)) * at(p.weight, c);
      g_mean += g;
      g_xhat_mean += g * xhat;
    }
    g_mean /= static_cast<double>(C);
    g_xhat_mean /= static_cast<double>(C);
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = (at(p.x, n, c) - mean) * rstd;
      const double dy = at(p.dy, n, c);
      const double g = dy * at(p.weight, c);
      const double dx = rstd * (g - g_mean - xhat * g_xhat_mean);
      float& out = at(p.dx, n, c);
      out = static_cast<float>(p.accumulate_dx ? out + dx : dx);
      dweight[static_cast<size_t>(c)] += dy * xhat;
      dbias[static_cast<size_t>(c)] += dy;
    }
  }
  for (int64_t c = 0; c < C; ++c) {
    at(p.dweight, c) = static_cast<float>(dweight[static_cast<size_t>(c)]);
    at(p.dbias, c) = static_cast<float>(dbias[static_cast<size_t>(c)]);
  }
  return Status();
}

Status rmsnorm_forward(const RmsNormParams& p) {
  const int64_t N = p.x.size(0);
  const int64_t C = p.x.size(1);
  for (int64_t n = 0; n < N; ++n) {
    double sum_sq = 0;
    for (int64_t c = 0; c < C; ++c)
      sum_sq += static_cast<double>(at(p.x, n, c)) * at(p.x, n, c);
    const double rstd = 1.0 / std::sqrt(sum_sq / static_cast<double>(C) + p.eps);
    for (int64_t c = 0; c < C; ++c)
      at(p.y, n, c) = static_cast<float>(at(p.x, n, c) * rstd * at(p.weight, c));
    at(p.rstd, n) = static_cast<float>(rstd);
  }
  return Status();
}

Status rmsnorm_backward(const RmsNormBackwardParams& p) {
  const int64_t N = p.x.size(0);
  const int64_t C = p.x.size(1);
  std::vector<double> dweight(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c)
    dweight[static_cast<size_t>(c)] = at(p.dweight, c);
  for (int64_t n = 0; n < N; ++n) {
    const double rstd = at(p.rstd, n);
    double g_xhat_mean = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = at(p.x, n, c) * rstd;
      g_xhat_mean += static_cast<double>(at(p.dy, n, c)) * at(p.weight, c) * xhat;
    }
    g_xhat_mean /= static_cast<double>(C);
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = at(p.x, n, c) * rstd;
      const double dy = at(p.dy, n, c);
      const double dx = rstd * (dy * at(p.weight, c) - xhat * g_xhat_mean);
      float& out = at(p.dx, n, c);
      out = static_cast<float>(p.accumulate_dx ? out + dx : dx);
      dweight[static_cast<size_t>(c)] += dy * xhat;
    }
  }
  for (int64_t c = 0; c < C; ++c)
    at(p.dweight, c) = static_cast<float>(dweight[static_cast<size_t>(c)]);
  return Status();
}

}  // namespace kiln::ops::ref
