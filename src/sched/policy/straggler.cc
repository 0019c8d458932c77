// Robust z-scores of the ranks' compute times (kiln/sched/straggler.h).
#include <kiln/sched/straggler.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace kiln::sched {
namespace {

// The median of `v` (reordered). REQUIRES: !v.empty().
double median(std::vector<double> v) {
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double upper = v[mid];
  if (v.size() % 2 == 1) return upper;
  const double lower = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + upper) / 2;
}

}  // namespace

std::vector<double> straggler_z_scores(const std::vector<std::vector<double>>& windows) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> z(windows.size(), kNaN);
  std::vector<double> typical(windows.size(), kNaN);
  std::vector<double> known;
  for (size_t r = 0; r < windows.size(); ++r) {
    const std::vector<double>& w = windows[r];
    const size_t n = std::min(w.size(), kStragglerWindow);
    if (n < kStragglerMinSamples) continue;
    typical[r] = median(std::vector<double>(w.end() - static_cast<std::ptrdiff_t>(n), w.end()));
    known.push_back(typical[r]);
  }
  if (known.size() < kStragglerMinRanks) return z;
  const double m = median(known);
  std::vector<double> deviations;
  for (double t : known)
    deviations.push_back(std::abs(t - m));
  const double scale = std::max(1.4826 * median(deviations), kStragglerScaleFloor * m);
  if (!(scale > 0)) return z;  // every rank reports 0 ms: nothing to tell apart
  for (size_t r = 0; r < windows.size(); ++r) {
    if (!std::isnan(typical[r])) z[r] = (typical[r] - m) / scale;
  }
  return z;
}

}  // namespace kiln::sched
