// Reference GELU (tanh approximation) and residual add (see include/kiln/ops/elementwise.h).
// Views are contiguous, so elements are addressed flat. Each element is read before it is
// written, which keeps the documented in-place uses (y aliasing x, a or b; dx aliasing dy)
// correct.
//
//   gelu(x)  = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
#include <cmath>
#include <numbers>

#include "ops/ref/ref.h"

namespace kiln::ops::ref {
namespace {

// GPT-2's constants: sqrt(2/pi) and the cubic coefficient of the tanh approximation.
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;
static_assert(kSqrt2OverPi * kSqrt2OverPi * std::numbers::pi > 1.9999999 &&
              kSqrt2OverPi * kSqrt2OverPi * std::numbers::pi < 2.0000001);

double gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x)));
}

double gelu_derivative(double x) {
  const double t = std::tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
  return 0.5 * (1.0 + t) +
         0.5 * x * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3.0 * kGeluCubic * x * x);
}

}  // namespace

Status gelu_forward(const GeluParams& p) {
  if (p.y.dtype != DType::kF32) {  // ref.h: the references' outputs are f32
    return Status::invalid_argument(
        "ref::gelu_forward: y must be f32 (a bf16 y is the "
        "kernel's f32 y rounded)");
  }
  const float* x = p.x.f32_ptr();
  float* y = p.y.f32_ptr();
  for (int64_t i = 0; i < p.x.numel(); ++i)
    y[i] = static_cast<float>(gelu(x[i]));
  return Status();
}

Status gelu_backward(const GeluBackwardParams& p) {
  if (p.dx.dtype != DType::kF32) {  // ref.h: the references' outputs are f32
    return Status::invalid_argument(
        "ref::gelu_backward: dx must be f32 (a bf16 dx is the "
        "kernel's f32 dx rounded)");
  }
  const float* x = p.x.f32_ptr();
  const float* dy = p.dy.f32_ptr();
  float* dx = p.dx.f32_ptr();
  for (int64_t i = 0; i < p.x.numel(); ++i) {
    const double grad = static_cast<double>(dy[i]) * gelu_derivative(x[i]);
    dx[i] = static_cast<float>(p.accumulate_dx ? dx[i] + grad : grad);
  }
  return Status();
}

Status residual_forward(const ResidualParams& p) {
  const float* a = p.a.f32_ptr();
  const float* b = p.b.f32_ptr();
  float* y = p.y.f32_ptr();
  for (int64_t i = 0; i < p.a.numel(); ++i)
    y[i] = static_cast<float>(static_cast<double>(a[i]) + b[i]);
  return Status();
}

Status residual_backward(const ResidualBackwardParams& p) {
  const float* dy = p.dy.f32_ptr();
  float* da = p.da.f32_ptr();
  float* db = p.db.f32_ptr();
  for (int64_t i = 0; i < p.dy.numel(); ++i) {
    da[i] = static_cast<float>(static_cast<double>(da[i]) + dy[i]);
    db[i] = static_cast<float>(static_cast<double>(db[i]) + dy[i]);
  }
  return Status();
}

}  // namespace kiln::ops::ref
