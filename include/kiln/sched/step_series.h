// A job's step metrics as the coordinator keeps them: what its curves (the page, `GET
// /v1/jobs/{id}/steps`) are drawn from.
//
// Path: the trainer writes one progress line per step to its node agent (rank_process.h); the
// agent keeps each rank's last kRecentStepsMax steps and sends rank 0's with every report; the
// coordinator takes the steps it has not seen, buffers them and writes them to SQLite in one
// transaction every few seconds (a coordinator crash loses at most that much of a curve, never a
// job's state).
//
// Bounded: a job keeps at most kStepPointsPerJobMax points over all its attempts. Past that, the
// oldest are thinned (thin_steps below): each attempt's steps are cut into buckets of a power of
// two steps, the smallest that leaves at most half the bound, and one point per bucket stays.
// So a long job's curve keeps its shape at a coarser grain while its newest steps stay dense.
#ifndef KILN_SCHED_STEP_SERIES_H_
#define KILN_SCHED_STEP_SERIES_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace kiln::sched {

// The steps an agent remembers per rank and sends in one report (rank 0's only).
inline constexpr size_t kRecentStepsMax = 32;
// The points a job keeps, all attempts together (about 100 bytes each in SQLite).
inline constexpr size_t kStepPointsPerJobMax = 4096;

inline constexpr double kNoValue = std::numeric_limits<double>::quiet_NaN();

// One optimizer step as its rank reported it. NaN: absent (val_loss off validation steps) or
// not finite (a diverged loss).
struct StepSample {
  int64_t step = 0;
  int64_t age_ms = 0;  // how long before the report it came (the agent's clock)
  double step_ms = 0;
  double loss = kNoValue;
  double val_loss = kNoValue;
  double lr = kNoValue;
  double tokens_per_s = kNoValue;
  double mfu = kNoValue;
  double comm_exposed_ms = kNoValue;
  double ckpt_stall_ms = kNoValue;
};

// A stored point: a sample of one attempt, stamped with the coordinator's wall clock.
struct StepPoint {
  std::string job_id;
  int attempt = 0;
  int64_t wall_ns = 0;
  StepSample sample;  // its age_ms is unused once stamped
};

// Which of `points` (one job's, any order) to keep so that at most `max_points` remain: each
// attempt's steps in buckets of a power-of-two width, the smallest width that fits, one point
// per bucket (one with a validation loss if the bucket has one, else its first step), and each
// attempt's newest point always. Returns the indexes to keep, ascending. Every point is kept
// when they fit. REQUIRES: max_points >= 2 x the number of attempts (each keeps its newest).
std::vector<size_t> thin_steps(const std::vector<StepPoint>& points, size_t max_points);

}  // namespace kiln::sched

#endif  // KILN_SCHED_STEP_SERIES_H_
