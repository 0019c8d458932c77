// See trainer_metrics.h.
#include "train/trainer_metrics.h"

#include <kiln/base/clock.h>
#include <kiln/ops/convert.h>
#include <kiln/ops/matmul.h>

#include <algorithm>
#include <limits>
#include <vector>

namespace kiln::train {
namespace {

// Step times from a millisecond (a toy model) to about nine minutes (GPT-2 124M with a large
// batch on a few cores): 1 ms * 2^k for k < 20.
constexpr double kStepSecondsFirstBucket = 0.001;
constexpr double kStepSecondsBucketFactor = 2.0;
constexpr int kStepSecondsBuckets = 20;

// The probe's matrices: 1024^3 is large enough for sgemm to reach its peak on every core count
// we run on (each pool thread gets at least 1024/threads rows) and takes tens of milliseconds.
constexpr int64_t kProbeDim = 1024;
// At least this many timed runs after the warm-up run, however slow the machine.
constexpr int kProbeRunsMin = 2;

}  // namespace

TrainMetrics::TrainMetrics(obs::MetricsRegistry* registry)
    : group_(registry),
      step_(group_.add_gauge("kiln_train_step", "The last finished optimizer step.")),
      loss_(group_.add_gauge("kiln_train_loss", "Training loss of the last step.")),
      val_loss_(group_.add_gauge("kiln_train_val_loss",
                                 "Mean validation loss of the last validation (NaN before it).")),
      tokens_per_second_(group_.add_gauge("kiln_train_tokens_per_second",
                                          "Training tokens per second of the last step.")),
      mfu_(group_.add_gauge("kiln_train_mfu",
                            "Model FLOP utilisation of the last step: achieved / peak FLOP/s.")),
      comm_exposed_seconds_(group_.add_gauge(
          "kiln_train_allreduce_exposed_seconds",
          "Gradient collective time of the last step that the backward did not hide.")),
      step_seconds_(group_.add_histogram(
          "kiln_train_step_seconds", "Optimizer step time, validation excluded.",
          obs::exponential_buckets(kStepSecondsFirstBucket, kStepSecondsBucketFactor,
                                   kStepSecondsBuckets))),
      checkpoint_every_(group_.add_gauge("kiln_train_checkpoint_every_steps",
                                         "Steps between checkpoints (0: none before the end)")) {
  val_loss_.Set(std::numeric_limits<double>::quiet_NaN());
}

void TrainMetrics::record(const StepReport& r) {
  step_.Set(r.step);
  loss_.Set(r.loss);
  if (r.validated) val_loss_.Set(r.val_loss);
  tokens_per_second_.Set(r.tokens_per_s);
  mfu_.Set(r.mfu);
  comm_exposed_seconds_.Set(r.comm_exposed_ms * 1e-3);
  step_seconds_.Observe(r.step_ms * 1e-3);
}

Result<double> measure_peak_gflops(const ops::Context& ctx, Precision precision, double seconds) {
  constexpr int64_t n = kProbeDim;
  std::vector<float> x(n * n), w(n * n), y(n * n);
  // Values of moderate size: denormals or infinities would slow sgemm or flag nothing. Both are
  // exact in bf16 (a few significant bits).
  for (int64_t i = 0; i < n * n; ++i) {
    x[i] = static_cast<float>(i % 7) * 0.125f;
    w[i] = static_cast<float>(i % 5) * 0.25f;
  }
  ops::MatmulParams p;
  p.x = ops::TensorView::f32(x.data(), {n, n});
  p.w = ops::TensorView::f32(w.data(), {n, n});
  p.y = ops::TensorView::f32(y.data(), {n, n});
  std::vector<uint16_t> x16, w16;
  if (precision == Precision::kBf16) {
    x16.resize(x.size()), w16.resize(w.size());
    KILN_RETURN_IF_ERROR(ops::convert_f32_to_bf16(
        p.x, ops::TensorView::of(x16.data(), ops::DType::kBF16, {n, n}), ctx));
    KILN_RETURN_IF_ERROR(ops::convert_f32_to_bf16(
        p.w, ops::TensorView::of(w16.data(), ops::DType::kBF16, {n, n}), ctx));
    p.x = ops::TensorView::of(x16.data(), ops::DType::kBF16, {n, n});
    p.w = ops::TensorView::of(w16.data(), ops::DType::kBF16, {n, n});
  }
  KILN_RETURN_IF_ERROR(ops::matmul_forward(p, ctx));  // warm-up: page faults, thread wake-up
  const double flops = 2.0 * static_cast<double>(n) * n * n;
  double best = 0;
  const int64_t start_ns = monotonic_now_ns();
  for (int run = 0;; ++run) {
    const int64_t t0 = monotonic_now_ns();
    KILN_RETURN_IF_ERROR(ops::matmul_forward(p, ctx));
    const int64_t t1 = monotonic_now_ns();
    best = std::max(best, flops / static_cast<double>(std::max<int64_t>(t1 - t0, 1)));
    if (run + 1 >= kProbeRunsMin && static_cast<double>(t1 - start_ns) * 1e-9 >= seconds) break;
  }
  return best;  // flops per ns = GFLOP/s
}

void TrainMetrics::set_checkpoint_every(int steps) {
  checkpoint_every_.Set(steps);
}

}  // namespace kiln::train
