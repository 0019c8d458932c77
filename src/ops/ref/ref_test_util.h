// Test support for the reference tests: seeded random inputs, central finite differences of a
// scalar loss, and the error measure of kiln_ops (max |got - want| / max(|want|, floor)).
#ifndef KILN_OPS_REF_REF_TEST_UTIL_H_
#define KILN_OPS_REF_REF_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <vector>

namespace kiln::ops::ref::testing {

// n values uniform in [lo, hi), the same for the same seed.
inline std::vector<float> uniform(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(n);
  for (float& x : out)
    x = dist(rng);
  return out;
}

// sum_i out[i] * weights[i] in double: the scalar loss whose gradient with respect to `out` is
// `weights`, so a backward fed dout = weights must return the gradient of this loss.
inline double weighted_sum(const std::vector<float>& out, const std::vector<float>& weights) {
  double sum = 0;
  for (size_t i = 0; i < out.size(); ++i)
    sum += static_cast<double>(out[i]) * weights[i];
  return sum;
}

// The step of the central differences. The forward rounds its outputs to f32, so the loss
// carries noise of about 2^-24 |out| for each output that changes, which a difference quotient
// amplifies by 1/(2h); the truncation error of a central difference is h^2 |f'''| / 6.
// Richardson extrapolation, (4 D(h/2) - D(h)) / 3, cancels the h^2 term, leaving h^4, so a
// large step (where the rounding noise is small) is also accurate. Measured on the reference
// tests (inputs of order one): h = 1e-2 without extrapolation is off by up to 1.6e-5 absolute,
// h = 5e-2 with it by up to 7e-6 (the rest is the noise), h = 1e-3 by 5e-5.
inline constexpr float kFiniteDifferenceStep = 5e-2f;

// The central difference (loss(x + h) - loss(x - h)) / step at element i, where the step is the
// difference of the two perturbed f32 values (x + h is rounded to f32), not 2h.
inline double central_difference(std::vector<float>& input, size_t i, float h,
                                 const std::function<double()>& loss) {
  const float saved = input[i];
  const float plus = saved + h;
  const float minus = saved - h;
  input[i] = plus;
  const double loss_plus = loss();
  input[i] = minus;
  const double loss_minus = loss();
  input[i] = saved;
  return (loss_plus - loss_minus) / (static_cast<double>(plus) - minus);
}

// d loss / d input[i] for every i, by Richardson-extrapolated central differences, perturbing
// the f32 input in place (and restoring it).
inline std::vector<double> numeric_gradient(std::vector<float>& input,
                                            const std::function<double()>& loss) {
  std::vector<double> grad(input.size());
  for (size_t i = 0; i < grad.size(); ++i) {
    const double coarse = central_difference(input, i, kFiniteDifferenceStep, loss);
    const double fine = central_difference(input, i, kFiniteDifferenceStep / 2, loss);
    grad[i] = (4.0 * fine - coarse) / 3.0;
  }
  return grad;
}

// The rows x cols elements of a row-major buffer whose rows are `row_stride` apart, packed.
template <typename T>
std::vector<T> gather_rows(const std::vector<T>& v, int64_t rows, int64_t cols,
                           int64_t row_stride) {
  std::vector<T> out;
  out.reserve(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c)
      out.push_back(v[static_cast<size_t>(r * row_stride + c)]);
  }
  return out;
}

// max over i of |got[i] - want[i]| / max(|want[i]|, floor); +inf when got is not finite.
template <typename Got, typename Want>
double max_rel_err(const std::vector<Got>& got, const std::vector<Want>& want, double floor) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = static_cast<double>(got[i]);
    const double w = static_cast<double>(want[i]);
    if (!std::isfinite(g)) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::fabs(g - w) / std::max(std::fabs(w), floor));
  }
  return worst;
}

}  // namespace kiln::ops::ref::testing

#endif  // KILN_OPS_REF_REF_TEST_UTIL_H_
