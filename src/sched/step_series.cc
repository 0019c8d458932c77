// Thinning a job's step points (kiln/sched/step_series.h).
#include <kiln/sched/step_series.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace kiln::sched {
namespace {

// The indexes kept at bucket width `width`: one per (attempt, step / width), preferring a
// validation point, plus each attempt's newest. `by_attempt` holds each attempt's indexes in
// step order.
std::vector<size_t> keep_at(const std::vector<StepPoint>& points,
                            const std::map<int, std::vector<size_t>>& by_attempt, int64_t width) {
  std::vector<size_t> keep;
  for (const auto& [attempt, order] : by_attempt) {
    size_t i = 0;
    while (i < order.size()) {
      const int64_t bucket = points[order[i]].sample.step / width;
      size_t chosen = order[i];
      size_t j = i;
      for (; j < order.size() && points[order[j]].sample.step / width == bucket; ++j) {
        if (std::isnan(points[chosen].sample.val_loss) &&
            !std::isnan(points[order[j]].sample.val_loss)) {
          chosen = order[j];
        }
      }
      keep.push_back(chosen);
      // The newest point carries where the attempt is now: a curve must end there.
      if (j == order.size() && chosen != order.back()) keep.push_back(order.back());
      i = j;
    }
  }
  std::sort(keep.begin(), keep.end());
  return keep;
}

}  // namespace

std::vector<size_t> thin_steps(const std::vector<StepPoint>& points, size_t max_points) {
  std::map<int, std::vector<size_t>> by_attempt;
  for (size_t i = 0; i < points.size(); ++i)
    by_attempt[points[i].attempt].push_back(i);
  for (auto& [attempt, order] : by_attempt) {
    std::sort(order.begin(), order.end(), [&points](size_t a, size_t b) {
      return points[a].sample.step < points[b].sample.step;
    });
  }
  if (points.size() <= max_points) {
    std::vector<size_t> all(points.size());
    for (size_t i = 0; i < all.size(); ++i)
      all[i] = i;
    return all;
  }
  // Width 2^62 puts every step of an attempt in one bucket: at most two points each, which the
  // precondition says fit.
  std::vector<size_t> keep;
  for (int64_t width = 2;; width *= 2) {
    keep = keep_at(points, by_attempt, width);
    if (keep.size() <= max_points || width >= (int64_t{1} << 62)) break;
  }
  return keep;
}

}  // namespace kiln::sched
