// See tuning.h.
#include "comm/tuning.h"

#include <algorithm>
#include <cmath>

namespace kiln::comm {

LinkCost shm_link_cost() {
  return {0.3, 1.0 / 10'000, 1.0 / 10'000};
}
LinkCost tcp_link_cost() {
  return {20.0, 1.0 / 2'500, 1.0 / 10'000};
}

LinkCost shm_link_cost_from(double handoff_us, double copy_gbps, double reduce_gbps) {
  LinkCost c = shm_link_cost();
  // GB/s is bytes per ns, so 1 / (GB/s * 1000) is us per byte.
  if (handoff_us > 0) c.alpha_us = handoff_us;
  if (copy_gbps > 0) c.beta_us_per_byte = 1.0 / (copy_gbps * 1000.0);
  if (reduce_gbps > 0) c.gamma_us_per_byte = 3.0 / (reduce_gbps * 1000.0);
  return c;
}

LinkCost slowest_link_cost(const std::vector<LinkCost>& costs) {
  LinkCost out = costs.front();
  for (const LinkCost& c : costs) {
    out.alpha_us = std::max(out.alpha_us, c.alpha_us);
    out.beta_us_per_byte = std::max(out.beta_us_per_byte, c.beta_us_per_byte);
    out.gamma_us_per_byte = std::max(out.gamma_us_per_byte, c.gamma_us_per_byte);
  }
  return out;
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

size_t stream_output_bytes_min(double reduce_gbps, double reduce_stream_gbps, uint64_t l2_bytes) {
  if (reduce_gbps <= 0 || reduce_stream_gbps < kStreamOutGain * reduce_gbps || l2_bytes == 0) {
    return SIZE_MAX;
  }
  return static_cast<size_t>(kStreamOutL2Multiple * l2_bytes);
}

size_t ring_crossover_bytes(int n, const LinkCost& c) {
  for (size_t bytes = 1; bytes <= (size_t{1} << 30); bytes *= 2) {
    if (choose_allreduce(bytes, n, c) == Algorithm::kRing) return bytes;
  }
  return SIZE_MAX;
}

}  // namespace kiln::comm
