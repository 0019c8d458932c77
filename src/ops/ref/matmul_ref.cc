// Reference matmul (see include/kiln/ops/matmul.h): y = x @ w^T + bias and its gradients, as
// triple loops accumulating in double. Leading strides are honoured; the last dimension of every
// view is read with its own stride too, so the reference works for any layout.
#include "ops/ref/ref.h"

namespace kiln::ops::ref {

Status matmul_forward(const MatmulParams& p) {
  const int64_t M = p.x.size(0);
  const int64_t K = p.x.size(1);
  const int64_t N = p.w.size(0);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double acc = p.bias.present() ? at(p.bias, n) : 0.0;
      for (int64_t k = 0; k < K; ++k)
        acc += static_cast<double>(at(p.x, m, k)) * at(p.w, n, k);
      at(p.y, m, n) = static_cast<float>(acc);
    }
  }
  return Status();
}

Status matmul_backward(const MatmulBackwardParams& p) {
  const int64_t M = p.x.size(0);
  const int64_t K = p.x.size(1);
  const int64_t N = p.w.size(0);
  if (p.dx.present()) {  // dx (M, K) (=|+=) dy @ w
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t k = 0; k < K; ++k) {
        double acc = p.accumulate_dx ? at(p.dx, m, k) : 0.0;
        for (int64_t n = 0; n < N; ++n)
          acc += static_cast<double>(at(p.dy, m, n)) * at(p.w, n, k);
        at(p.dx, m, k) = static_cast<float>(acc);
      }
    }
  }
  if (p.dw.present()) {  // dw (N, K) += dy^T @ x
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t k = 0; k < K; ++k) {
        double acc = at(p.dw, n, k);
        for (int64_t m = 0; m < M; ++m)
          acc += static_cast<double>(at(p.dy, m, n)) * at(p.x, m, k);
        at(p.dw, n, k) = static_cast<float>(acc);
      }
    }
  }
  if (p.dbias.present()) {  // dbias (N) += sum over rows of dy
    for (int64_t n = 0; n < N; ++n) {
      double acc = at(p.dbias, n);
      for (int64_t m = 0; m < M; ++m)
        acc += at(p.dy, m, n);
      at(p.dbias, n) = static_cast<float>(acc);
    }
  }
  return Status();
}

}  // namespace kiln::ops::ref
