// JSON forms of step metrics (step_json.h).
#include "sched/coordinator/step_json.h"

#include <algorithm>
#include <cmath>

namespace kiln::sched {
namespace {

using json = nlohmann::json;

constexpr size_t kSampleFields = 10;

json number_or_null(double v) {
  return std::isfinite(v) ? json(v) : json(nullptr);
}

}  // namespace

json step_samples_json(const std::vector<StepSample>& samples) {
  json out = json::array();
  for (const StepSample& s : samples) {
    out.push_back(
        json::array({s.step, s.age_ms, number_or_null(s.step_ms), number_or_null(s.loss),
                     number_or_null(s.val_loss), number_or_null(s.lr),
                     number_or_null(s.tokens_per_s), number_or_null(s.mfu),
                     number_or_null(s.comm_exposed_ms), number_or_null(s.ckpt_stall_ms)}));
  }
  return out;
}

std::vector<StepSample> step_samples_from_json(const json& j) {
  std::vector<StepSample> out;
  if (!j.is_array()) return out;
  const size_t first = j.size() > kRecentStepsMax ? j.size() - kRecentStepsMax : 0;
  for (size_t i = first; i < j.size(); ++i) {
    const json& e = j[i];
    if (!e.is_array() || e.size() != kSampleFields || !e[0].is_number_integer() ||
        !e[1].is_number_integer()) {
      continue;
    }
    double v[kSampleFields] = {};
    bool valid = true;
    for (size_t k = 2; k < kSampleFields && valid; ++k) {
      if (e[k].is_null()) {
        v[k] = kNoValue;
      } else if (e[k].is_number() && std::isfinite(e[k].get<double>())) {
        v[k] = e[k].get<double>();
      } else {
        valid = false;
      }
    }
    StepSample s;
    s.step = e[0].get<int64_t>();
    if (!valid || s.step < 0 || s.step > kSampleStepMax) continue;
    s.age_ms = std::clamp<int64_t>(e[1].get<int64_t>(), 0, kSampleAgeMaxMs);
    s.step_ms = v[2];
    s.loss = v[3];
    s.val_loss = v[4];
    s.lr = v[5];
    s.tokens_per_s = v[6];
    s.mfu = v[7];
    s.comm_exposed_ms = v[8];
    s.ckpt_stall_ms = v[9];
    out.push_back(s);
  }
  return out;
}

json step_columns_json(const std::string& job_id, const std::vector<StepPoint>& points) {
  json attempt = json::array(), step = json::array(), wall_ms = json::array();
  json loss = json::array(), val_loss = json::array(), lr = json::array();
  json tokens = json::array(), mfu = json::array(), step_ms = json::array();
  json compute = json::array(), comm = json::array(), ckpt = json::array();
  for (const StepPoint& p : points) {
    const StepSample& s = p.sample;
    attempt.push_back(p.attempt);
    step.push_back(s.step);
    wall_ms.push_back(p.wall_ns / 1'000'000);
    loss.push_back(number_or_null(s.loss));
    val_loss.push_back(number_or_null(s.val_loss));
    lr.push_back(number_or_null(s.lr));
    tokens.push_back(number_or_null(s.tokens_per_s));
    mfu.push_back(number_or_null(s.mfu));
    step_ms.push_back(number_or_null(s.step_ms));
    // A single process waits on no collective: its whole step is its own work.
    const double exposed = std::isnan(s.comm_exposed_ms) ? 0 : s.comm_exposed_ms;
    compute.push_back(number_or_null(std::max(0.0, s.step_ms - exposed)));
    comm.push_back(number_or_null(s.comm_exposed_ms));
    ckpt.push_back(number_or_null(s.ckpt_stall_ms));
  }
  return {{"job", job_id},
          {"count", points.size()},
          {"columns",
           {{"attempt", attempt},
            {"step", step},
            {"wall_ms", wall_ms},
            {"loss", loss},
            {"val_loss", val_loss},
            {"lr", lr},
            {"tokens_per_s", tokens},
            {"mfu", mfu},
            {"step_ms", step_ms},
            {"compute_ms", compute},
            {"comm_exposed_ms", comm},
            {"ckpt_stall_ms", ckpt}}}};
}

}  // namespace kiln::sched
