// The trainer's Prometheus series and the peak-FLOP/s probe its MFU is measured against.
//
//   kiln_train_step               gauge      the last finished optimizer step
//   kiln_train_loss               gauge      its training loss
//   kiln_train_val_loss           gauge      the last validation loss (NaN before the first)
//   kiln_train_tokens_per_second  gauge      of the last step
//   kiln_train_mfu                gauge      model FLOP utilisation of the last step, 0..1
//   kiln_train_step_seconds       histogram  optimizer step time, validation excluded
//   kiln_train_checkpoint_every_steps  gauge  the checkpoint interval (0: none, or only at the
//                                             end): with kiln_ckpt_last_durable_step, how stale
//                                             the newest checkpoint may be (rules.yml)
//
// Updating a series allocates nothing (prometheus-cpp's gauges and histograms are atomics and
// fixed bucket arrays), so record() may run inside the training loop.
#ifndef KILN_TRAIN_TRAINER_METRICS_H_
#define KILN_TRAIN_TRAINER_METRICS_H_

#include <kiln/base/result.h>
#include <kiln/obs/metrics.h>
#include <kiln/ops/context.h>
#include <kiln/train/trainer.h>

namespace kiln::train {

class TrainMetrics {
 public:
  // A null registry keeps the series private (see obs::MetricGroup).
  explicit TrainMetrics(obs::MetricsRegistry* registry);

  void record(const StepReport& report);
  void set_checkpoint_every(int steps);

 private:
  obs::MetricGroup group_;
  prometheus::Gauge& step_;
  prometheus::Gauge& loss_;
  prometheus::Gauge& val_loss_;
  prometheus::Gauge& tokens_per_second_;
  prometheus::Gauge& mfu_;
  prometheus::Gauge& comm_exposed_seconds_;
  prometheus::Histogram& step_seconds_;
  prometheus::Gauge& checkpoint_every_;
};

// The probe's run time: long enough for a dozen timed sgemms at the peak of a small machine,
// short enough not to delay the start noticeably.
inline constexpr double kPeakProbeSeconds = 0.5;

// The best GFLOP/s of a square matmul (ops::matmul_forward split over ctx's pool, as the model's
// layers run) repeated for about `seconds`: with f32 inputs (the GEMM library's sgemm), or bf16
// ones (oneDNN's bf16 matmul) for a bf16 model, whose MFU is against the bf16 peak.
Result<double> measure_peak_gflops(const ops::Context& ctx, Precision precision = Precision::kFp32,
                                   double seconds = kPeakProbeSeconds);

}  // namespace kiln::train

#endif  // KILN_TRAIN_TRAINER_METRICS_H_
