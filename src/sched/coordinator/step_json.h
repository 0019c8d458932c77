// JSON forms of step metrics: the compact samples an agent report carries, and the columns
// `GET /v1/jobs/{id}/steps` answers with (api.h). Private to src/sched/.
#ifndef KILN_SCHED_COORDINATOR_STEP_JSON_H_
#define KILN_SCHED_COORDINATOR_STEP_JSON_H_

#include <cstdint>
#include <string>
#include <vector>

#include <kiln/base/result.h>
#include <kiln/sched/step_series.h>

#include <nlohmann/json.hpp>

namespace kiln::sched {

// [[step, age_ms, step_ms, loss, val_loss, lr, tokens_per_s, mfu, comm_exposed_ms,
//   ckpt_stall_ms], ...]: one array per sample, a NaN as null (JSON has none).
nlohmann::json step_samples_json(const std::vector<StepSample>& samples);
// The inverse, for the samples of an agent's report. Never fails: a report is the node's whole
// state, and a program that writes a wrong progress line must not get its node's reports
// refused. So an entry of the wrong shape, with a negative or unsafe step (past 2^53), or with
// a value that is not a finite number or null, is left out; only the last kRecentStepsMax are
// taken; an age is clamped to [0, kSampleAgeMaxMs].
std::vector<StepSample> step_samples_from_json(const nlohmann::json& j);
inline constexpr int64_t kSampleAgeMaxMs = 24LL * 3600 * 1000;
inline constexpr int64_t kSampleStepMax = int64_t{1} << 53;

// {"job", "count", "columns": {"attempt": [...], "step": [...], "wall_ms": [...],
//  "loss", "val_loss", "lr", "tokens_per_s", "mfu", "step_ms", "compute_ms",
//  "comm_exposed_ms", "ckpt_stall_ms"}}: every column as long as `count`, by attempt and step,
// null for no value. compute_ms is step_ms less comm_exposed_ms.
nlohmann::json step_columns_json(const std::string& job_id, const std::vector<StepPoint>& points);

}  // namespace kiln::sched

#endif  // KILN_SCHED_COORDINATOR_STEP_JSON_H_
