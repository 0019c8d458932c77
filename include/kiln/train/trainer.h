// The trainer behind `kiln train`: GPT-2 on token shards, AdamW, a warmup+cosine schedule,
// periodic validation; data-parallel over kiln_comm and checkpointed through kiln_ckpt when
// TrainerOptions ask for it.
//
// One optimizer step (llm.c's train_gpt2 loop):
//   zero_grad; grad_accum times: loader.next -> forward -> backward(loss_scale = 1/grad_accum)
//   -> global gradient norm -> clip scale (grad_clip; 0: none) -> lr from the schedule
//   -> AdamW (weight decay on 2-D weights only)
// then, every val_every steps and at the last step, the mean loss over val_batches batches of an
// unshuffled loader on the validation data, rewound to its start each time.
//
// Invariants:
// - Every buffer (model arenas, batches, validation, debug-dump records) is sized before step 1;
//   a single-process step without a checkpoint allocates nothing (trainer_alloc_test.cc). A
//   checkpoint step builds its save request, and each collective of a data-parallel step its
//   small work handle.
// - Deterministic: the same config (seed, threads included) gives bit-identical losses.
// - All compute runs on one ThreadPool of `train.threads` threads (ops::Context).
//
// Progress channel (TrainerOptions::progress_fd): a JSON line per step for the node agent that
// started the rank; see the option.
//
// Output, to `TrainerOptions::out` when set:
// - json: one line per step {"step","loss","lr","grad_norm","tokens_per_s","step_ms","mfu",
//   "world","comm_exposed_ms","ckpt_stall_ms"} plus "val_loss" on steps that validate, then
//   {"event":"done","steps","train_loss","val_loss", "tokens_per_s" (mean over the steps after the
//   first),"peak_rss_bytes","precision"} with "stopped":true added when a stop request ended the
//   run.
// - otherwise the progress line `step 12/300 | loss 6.123 | val 6.201 | 1234 tok/s | 210 ms/step |
//   ETA 1m02s`: live, it is redrawn in place at most 4 times a second; at validation steps and at
//   the end it is kept (newline), and those kept lines are all that is printed when not live.
// Metrics (when given a registry): kiln_train_step, kiln_train_loss, kiln_train_val_loss,
// kiln_train_tokens_per_second, kiln_train_mfu, kiln_train_allreduce_exposed_seconds (gauges),
// kiln_train_step_seconds (histogram); checkpoints add kiln_ckpt_* (stall, write time, bytes).
// MFU = flops_per_token * tokens/s / (peak * world), the peak (one rank's) from TrainerOptions or
// measured at start-up.
//
// Stopping (TrainerOptions::stop): a request ends the run after the step in progress. With a
// communicator every rank adds its flag to a one-element max-allreduce at the end of every step
// but the last, so all ranks stop after the same step even when the request (a signal, say)
// reached only one of them. The stop step is then checkpointed (when ckpt_dir is set), the
// trainer waits until that checkpoint is durable, skips the export and returns a summary with
// `stopped` set: the CLI exits with launch::kExitStoppedResumable, and a rerun with the same
// ckpt_dir continues from that step exactly as if it had never stopped.
#ifndef KILN_TRAIN_TRAINER_H_
#define KILN_TRAIN_TRAINER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>

#include <kiln/base/log.h>
#include <kiln/base/result.h>
#include <kiln/comm/communicator.h>
#include <kiln/comm/store.h>
#include <kiln/obs/metrics.h>
#include <kiln/train/train_config.h>

namespace kiln::train {

// A request to stop a run at the end of the step in progress (see "Stopping" above). request()
// only stores an atomic flag: call it from any thread, a step callback or a signal thread.
class StopRequest {
 public:
  void request() { requested_.store(true, std::memory_order_relaxed); }
  bool requested() const { return requested_.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> requested_{false};
};

struct TrainerOptions {
  std::string export_path;     // non-empty: write the final weights here (export format)
  std::string debug_dump_dir;  // non-empty: weights0 and steps.safetensors (see below)
  // A fault drill: this step's loss is made NaN on every rank (0: never), so the run stops as a
  // diverged one would and the coordinator's error signature and alerts can be checked.
  int debug_nan_step = 0;
  // The machine's peak in GFLOP/s for MFU; 0 measures it with a short sgemm probe on the
  // training threads at start-up (about half a second).
  double peak_gflops = 0;
  std::ostream* out = nullptr;  // where step lines go; null: nowhere
  bool json = false;            // JSON lines on `out`
  // Without json: true redraws the live progress line on `out` (a terminal); false prints only
  // its kept lines (validation steps and the last), for a file or a pipe.
  bool live_progress = false;

  // Data parallelism: this rank's communicator (null: one process). Every rank calls train()
  // with the same config; each reads its own slice of every global batch (world * batch
  // windows), gradients are averaged in buckets all-reduced while the backward runs (or, with
  // train.zero 1, reduce-scattered to ZeRO-1 optimizer shards), and only rank 0 writes `out`,
  // the export and the debug dump. A failed peer fails the step with kiln_comm's error, which
  // names it. `store` (the rendezvous store) carries checkpoint records to rank 0.
  comm::Communicator* comm = nullptr;
  comm::Store* store = nullptr;
  // Every key this run writes to or reads from `store` lives under this prefix (checkpoint
  // records: <prefix>/ckpt/<step>/<rank>). Each attempt of a job needs its own, so a restart
  // never reads a dead attempt's records: launch::JobAttempt::store_prefix(), whose default job
  // and attempt this is.
  std::string store_prefix = "kiln/job/default/attempt/0";
  // Smallest gradient bucket (bytes); blocks are merged up to it.
  size_t bucket_bytes_min = 8u << 20;

  // Checkpoints (empty dir: none): the run resumes from the newest complete checkpoint there
  // that verifies, saves asynchronously every ckpt_every steps and after the last, and keeps
  // the newest ckpt_keep.
  std::string ckpt_dir;
  // The SHA-256 of the config file's text (hex), echoed in the final JSON line: a trial run
  // (kiln/preflight/trial.h) compares figures only of runs of the same config. Empty: none.
  std::string config_sha256;
  int ckpt_every = 0;
  int ckpt_keep = 3;
  // Stop after this step (0: train.max_steps) without changing the schedule, which still runs to
  // max_steps: a run split in two (with a checkpoint at the stop) equals one run straight.
  int stop_after_step = 0;
  // Stop requests (null: none can be made); must outlive train().
  const StopRequest* stop = nullptr;

  // A node agent's progress pipe (-1: none). Every rank, not only rank 0, writes one line per
  // optimizer step, {"step":N,"step_ms":X,"loss":Y,"tokens_per_s":Z,"comm_exposed_ms":C} (loss:
  // the mean over ranks; C: this rank's wait on the gradient collective, so that X - C is its
  // own work, the figure a straggler stands out by: in step X every rank waits for the slowest),
  // and {"event":"done","steps":N,"stopped":B} after the last; each at most kProgressLineBytesMax
  // bytes with its newline. train() makes the descriptor non-blocking: a line the pipe has no
  // room for (nobody reading) is dropped whole, and a reader that went away ends the channel
  // (no SIGPIPE), so training never waits on it. Formatted on the stack: no allocation per step.
  // The descriptor stays the caller's (not closed). kInvalidArgument when it is not open.
  int progress_fd = -1;
};

// A progress line's bound: well under PIPE_BUF (4096), so each write to a pipe is all or nothing.
inline constexpr size_t kProgressLineBytesMax = 512;

// `debug_dump_dir` (the input of the golden parity test): before step 1
// DIR/weights0.safetensors holds the initial weights in the export format; at the end
// DIR/steps.safetensors holds `inputs` and `targets` (I32, (S, B, T): every step's batch),
// `logits` (F32, (B, T, vocab_size): step 1's, without the padding columns), `losses` (F32, (S))
// and `grad.<name>` (F32: step 1's gradients before clipping, export names and shapes).
// REQUIRES grad_accum == 1 (a step is then exactly one batch).

// What one optimizer step did.
struct StepReport {
  int step = 0;  // 1-based
  int max_steps = 0;
  float loss = 0;  // mean over the step's micro-batches
  double lr = 0;
  double grad_norm = 0;  // before clipping
  double tokens_per_s = 0;
  double step_ms = 0;  // the optimizer step, validation excluded
  double mfu = 0;      // fraction of the peak, in [0, 1] unless the peak was underestimated
  bool validated = false;
  float val_loss = 0;  // when validated
  // Data parallelism: the wait for gradient collectives after the backward (what overlap did not
  // hide), 0 with one process. Checkpoints: what the loop waited for the save (copy + a write
  // still running), 0 on steps without one.
  double comm_exposed_ms = 0;
  double ckpt_stall_ms = 0;
  int world = 1;
  int resumed_from = 0;  // the checkpoint step this run resumed from (0: none)
};

struct TrainSummary {
  int steps = 0;
  float train_loss = 0;     // the last step's
  float val_loss = 0;       // the last validation's (NaN when none ran)
  double tokens_per_s = 0;  // over the steps after the first (all steps when only one ran)
  int64_t peak_rss_bytes = 0;
  double peak_gflops = 0;                  // the peak MFU was computed against
  std::string config_sha256;               // TrainerOptions::config_sha256
  Precision precision = Precision::kFp32;  // train.precision: what the matrix products ran in
  // A StopRequest ended the run after `steps`, before its last step; its checkpoint (with a
  // ckpt_dir) is durable.
  bool stopped = false;
};

// Called after each step on the training thread, after the step's output was written. A
// callback that requests the run's StopRequest stops it after this step.
using StepCallback = std::function<void(const StepReport&)>;

// Trains as `config` says. `registry` may be null (no metrics). Errors: the loader's, the model's
// and the writers' (each naming its file), kInvalidArgument for a debug dump with grad_accum > 1.
Result<TrainSummary> train(const TrainConfig& config, const TrainerOptions& options,
                           obs::MetricsRegistry* registry, const Logger& log,
                           const StepCallback& on_step = {});

// Writes freshly initialised weights of `config.model` (seed `seed`) to `path`, export format, as
// F32 or BF16 (save_weights).
Status export_initial_weights(const ModelConfig& model, uint64_t seed, const std::string& path,
                              Precision dtype = Precision::kFp32);

}  // namespace kiln::train

#endif  // KILN_TRAIN_TRAINER_H_
