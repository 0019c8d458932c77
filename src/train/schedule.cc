// See schedule.h.
#include "train/schedule.h"

#include <kiln/base/check.h>

#include <cmath>
#include <numbers>

namespace kiln::train {

double learning_rate(const LrSchedule& s, int step) {
  KILN_CHECK(step >= 1 && s.max_steps >= 1) << "step " << step << ", max_steps " << s.max_steps;
  if (step <= s.warmup_steps) {
    return s.lr * static_cast<double>(step) / static_cast<double>(s.warmup_steps);
  }
  // Steps past max_steps (and past a warmup that outlasted the run) stay at min_lr.
  if (step >= s.max_steps) return s.min_lr;
  const double r = static_cast<double>(step - s.warmup_steps) /
                   static_cast<double>(s.max_steps - s.warmup_steps);
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * r));
  return s.min_lr + coeff * (s.lr - s.min_lr);
}

}  // namespace kiln::train
