// See tuning.h.
#include "comm/tuning.h"

#include <cmath>

namespace kiln::comm {

LinkCost shm_link_cost() {
  return {0.3, 1.0 / 10'000, 1.0 / 10'000};
}
LinkCost tcp_link_cost() {
  return {20.0, 1.0 / 2'500, 1.0 / 10'000};
}

double ring_allreduce_cost_us(size_t bytes, int n, const LinkCost& c) {
  if (n <= 1) return 0;
  const double b = static_cast<double>(bytes);
  const double steps = 2.0 * (n - 1);
  return steps * (c.alpha_us + b / n * c.beta_us_per_byte) + b * (n - 1) / n * c.gamma_us_per_byte;
}

double recursive_doubling_allreduce_cost_us(size_t bytes, int n, const LinkCost& c) {
  if (n <= 1) return 0;
  const double b = static_cast<double>(bytes);
  int rounds = 0;
  int p = 1;
  while (p * 2 <= n) {
    p *= 2;
    ++rounds;
  }
  const double fold_steps = p == n ? 0 : 2;
  return (rounds + fold_steps) * (c.alpha_us + b * c.beta_us_per_byte) +
         (rounds + (p == n ? 0 : 1)) * b * c.gamma_us_per_byte;
}

Algorithm choose_allreduce(size_t bytes, int n, const LinkCost& c) {
  return recursive_doubling_allreduce_cost_us(bytes, n, c) < ring_allreduce_cost_us(bytes, n, c)
             ? Algorithm::kRecursiveDoubling
             : Algorithm::kRing;
}

}  // namespace kiln::comm
