// The step loop of `kiln train` (see include/kiln/train/trainer.h).
//
// Everything the loop touches is made before step 1: the pool and context, both loaders, the
// model with its arenas, the batch buffers, the debug-dump records, the metric series and the
// output buffers. Inside the loop only spans of those are passed around, so a step allocates
// nothing (trainer_alloc_test.cc counts).
#include <kiln/base/clock.h>
#include <kiln/base/thread_pool.h>
#include <kiln/ops/blas.h>
#include <kiln/ops/context.h>
#include <kiln/ops/matmul.h>
#include <kiln/ops/optimizer.h>
#include <kiln/train/loader.h>
#include <kiln/train/model.h>
#include <kiln/train/trainer.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <ostream>
#include <string_view>
#include <utility>
#include <vector>

#include "train/data_parallel.h"
#include "train/schedule.h"
#include "train/trainer_checkpoint.h"
#include "train/trainer_debug_dump.h"
#include "train/trainer_json.h"
#include "train/trainer_metrics.h"
#include "train/trainer_progress.h"

namespace kiln::train {
namespace {

int64_t peak_rss_bytes() {
  struct rusage usage {};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

// The mean over ranks of `value` (itself when there is one process).
Result<float> mean_over_ranks(comm::Communicator* comm, float value) {
  if (comm == nullptr || comm->world_size() == 1) return value;
  KILN_RETURN_IF_ERROR(comm->run(comm::CollectiveArgs::allreduce(
      &value, &value, 1, comm::DataType::kF32, comm::ReduceOp::kAvg)));
  return value;
}

// The mean loss over `batches` global batches from the start of the validation stream (each
// rank evaluates its slice; the mean is over ranks too).
Result<float> validation_loss(DataLoader* val, int batches, Gpt2* model, std::span<int32_t> inputs,
                              std::span<int32_t> targets, const ops::Context& ctx,
                              comm::Communicator* comm) {
  KILN_RETURN_IF_ERROR(val->seek(LoaderPosition{}));
  double sum = 0;
  for (int i = 0; i < batches; ++i) {
    val->next(inputs, targets);
    KILN_ASSIGN_OR_RETURN(float loss, model->forward(inputs, targets, ctx));
    sum += loss;
  }
  return mean_over_ranks(comm, static_cast<float>(sum / batches));
}

// Whether any rank was asked to stop: a max over the ranks' flags (just this process's with one),
// so every rank gets the same answer after the same step.
Result<bool> agree_to_stop(comm::Communicator* comm, const StopRequest* stop) {
  float flag = stop != nullptr && stop->requested() ? 1.0f : 0.0f;
  if (comm != nullptr) {
    KILN_RETURN_IF_ERROR(comm->run(comm::CollectiveArgs::allreduce(
        &flag, &flag, 1, comm::DataType::kF32, comm::ReduceOp::kMax)));
  }
  return flag > 0;
}

bool validates_at(const TrainHyperparams& h, int step) {
  if (h.val_batches == 0) return false;
  return step == h.max_steps || (h.val_every > 0 && step % h.val_every == 0);
}

// The node agent's progress pipe (TrainerOptions::progress_fd). Each line is formatted into a
// stack buffer and goes out in one non-blocking write: a line under PIPE_BUF is written whole or
// not at all, so a full pipe (EAGAIN) drops it whole and the reader never sees half a line.
class ProgressChannel {
 public:
  // Makes `fd` non-blocking; fd < 0 gives a channel that writes nothing.
  static Result<ProgressChannel> open(int fd) {
    ProgressChannel c;
    if (fd < 0) return c;
    const int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
      return Status::invalid_argument("progress fd " + std::to_string(fd) + ": " +
                                      std::strerror(errno));
    }
    c.fd_ = fd;
    return c;
  }

  void step(const StepReport& r) {
    if (fd_ < 0) return;
    std::array<char, kProgressLineBytesMax> buf;
    write_line(format_progress_json(r, buf));
  }

  void done(const TrainSummary& s) {
    if (fd_ < 0) return;
    std::array<char, kProgressLineBytesMax> buf;
    write_line(format_progress_done_json(s, buf));
  }

 private:
  // A reader that went away must not kill the rank with SIGPIPE: the signal is blocked for the
  // write, and one the write raised is taken before the mask is restored. EPIPE (or any error
  // but EAGAIN) ends the channel; EAGAIN only drops this line.
  void write_line(std::string_view text) {
    sigset_t pipe_signal, old_mask, pending;
    sigemptyset(&pipe_signal);
    sigaddset(&pipe_signal, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_signal, &old_mask);
    sigpending(&pending);
    const bool was_pending = sigismember(&pending, SIGPIPE) == 1;
    ssize_t n = 0;
    do {
      n = write(fd_, text.data(), text.size());
    } while (n < 0 && errno == EINTR);
    const int err = errno;
    if (n < 0 && err == EPIPE && !was_pending) {
      const timespec now{0, 0};
      sigtimedwait(&pipe_signal, nullptr, &now);
    }
    pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    if (n < 0 && err != EAGAIN && err != EWOULDBLOCK) fd_ = -1;
  }

  int fd_ = -1;
};

}  // namespace

Result<TrainSummary> train(const TrainConfig& config, const TrainerOptions& options,
                           obs::MetricsRegistry* registry, const Logger& log,
                           const StepCallback& on_step) {
  const TrainHyperparams& h = config.train;
  comm::Communicator* comm =
      options.comm != nullptr && options.comm->world_size() > 1 ? options.comm : nullptr;
  const int rank = comm != nullptr ? comm->rank() : 0;
  const int world = comm != nullptr ? comm->world_size() : 1;
  const bool zero1 = comm != nullptr && h.zero == 1;
  std::ostream* out = rank == 0 ? options.out : nullptr;
  if (!options.debug_dump_dir.empty() && world > 1) {
    return Status::invalid_argument("--debug-dump records a single process's run, not " +
                                    std::to_string(world) + " ranks");
  }
  if (!options.debug_dump_dir.empty() && h.grad_accum != 1) {
    return Status::invalid_argument(
        "--debug-dump records one batch per step: it needs "
        "train.grad_accum 1, not " +
        std::to_string(h.grad_accum));
  }
  KILN_ASSIGN_OR_RETURN(ProgressChannel progress_channel,
                        ProgressChannel::open(options.progress_fd));
  Result<std::unique_ptr<ThreadPool>> pool_owner = ThreadPool::create(h.threads);
  if (!pool_owner.ok()) return pool_owner.status().with_context("train.threads");
  ThreadPool& pool = **pool_owner;
  ops::Workspace workspace;  // the ops' scratch: grows in the first step, reused after
  KILN_ASSIGN_OR_RETURN(ops::Context ctx, ops::make_cpu_context(&pool));
  ctx.workspace = &workspace;

  LoaderConfig train_data;
  train_data.dir = config.data.train;
  train_data.batch = h.batch;
  train_data.seq = h.seq;
  train_data.seed = h.seed;
  train_data.shuffle = true;
  train_data.rank = rank;
  train_data.world = world;
  train_data.vocab_size = static_cast<uint32_t>(config.model.vocab_size);
  Result<DataLoader> train_loader = DataLoader::open(train_data);
  if (!train_loader.ok()) return train_loader.status().with_context("data.train");
  std::optional<DataLoader> val_loader;
  if (h.val_batches > 0) {
    LoaderConfig val_data = train_data;
    val_data.dir = config.data.val;
    val_data.shuffle = false;
    Result<DataLoader> val = DataLoader::open(val_data);
    if (!val.ok()) return val.status().with_context("data.val");
    val_loader.emplace(std::move(*val));
  }

  // Under ZeRO-1 the model's moment arenas are this rank's share, which ShardedAdamW updates.
  KILN_RETURN_IF_ERROR(config.model.validate());
  const MomentArenas moment_arenas =
      zero1 ? zero1_moment_arenas(config.model, world) : MomentArenas::whole();
  KILN_ASSIGN_OR_RETURN(Gpt2 model,
                        Gpt2::create(config.model, h.batch, h.seq, moment_arenas, h.precision));
  model.init_weights(h.seed);
  const ops::BlasInfo blas = ops::blas_info();
  log.info("training", {{"config", config.source},
                        {"params", model.num_params()},
                        {"n_layer", config.model.n_layer},
                        {"n_embd", config.model.n_embd},
                        {"batch", h.batch},
                        {"seq", h.seq},
                        {"grad_accum", h.grad_accum},
                        {"max_steps", h.max_steps},
                        {"threads", h.threads},
                        {"isa", cpu_isa_name(ctx.isa)},
                        {"rank", rank},
                        {"world", world},
                        {"zero", zero1 ? 1 : 0},
                        {"train_tokens", train_loader->tokens()},
                        {"blas_core", blas.core}});
  if (blas.fallback()) {
    // Every GEMM, so nearly all of a step, runs on kernels narrower than the CPU's.
    log.warn("the BLAS runs kernels narrower than this CPU has: GEMMs run far below its speed",
             {{"blas_core", blas.core},
              {"blas_core_isa", cpu_isa_name(blas.core_isa)},
              {"cpu_isa", cpu_isa_name(blas.cpu_isa)},
              {"OPENBLAS_CORETYPE",
               blas.coretype_env.empty() ? std::string("unset") : blas.coretype_env},
              {"fix", blas.coretype_env.empty()
                          ? std::string("run through the kiln binary, which forces the core")
                          : "unset OPENBLAS_CORETYPE (or set it to " +
                                ops::openblas_core_for(detect_cpu_features()) + ")"}});
  }

  if (h.precision == Precision::kBf16) {
    // oneDNN's kernel for a GPT-2-sized block, or the widened path. Without AMX oneDNN's bf16
    // kernels ran slower than fp32 where they could be compared (an Intel Xeon with oneDNN capped
    // at AVX512-BF16: docs/PERFORMANCE.md), and widened products are f32 GEMMs with conversions
    // added, so a run on either is told to compare.
    const std::string kernel = ops::bf16_matmul_kernel(ctx.isa);
    if (kernel == ops::kBf16WidenedKernel) {
      const std::string why = ops::bf16_matmul_widened_reason();
      log.warn(
          "bf16 matrix products are widened to f32 here (no bf16 arithmetic at this ISA): the "
          "same values as on bf16 units, not their speed; compare a few steps with --precision "
          "fp32",
          {{"kernel", kernel},
           {"isa", cpu_isa_name(ctx.isa)},
           {"why", why.empty() ? "the ISA is below AVX-512 (KILN_OPS_ISA)" : why}});
    } else if (kernel.find("amx") == std::string::npos) {
      log.warn(
          "bf16 matrix products run without AMX on this CPU; oneDNN's AVX512-BF16 kernels were "
          "slower than fp32 where measured: compare a few steps with --precision fp32",
          {{"kernel", kernel}});
    } else {
      log.info("bf16 matrix products on the CPU's matrix units", {{"kernel", kernel}});
    }
  }
  double peak_gflops = options.peak_gflops;
  if (peak_gflops <= 0) {
    KILN_ASSIGN_OR_RETURN(peak_gflops, measure_peak_gflops(ctx, h.precision));
    log.info("peak FLOP/s for MFU measured by a matmul probe on the training threads",
             {{"gflops", peak_gflops},
              {"precision", precision_name(h.precision)},
              {"threads", h.threads},
              {"probe_s", kPeakProbeSeconds},
              {"override", "--peak-gflops"}});
  }

  std::optional<DebugDump> dump;
  if (!options.debug_dump_dir.empty()) {
    KILN_ASSIGN_OR_RETURN(DebugDump d,
                          DebugDump::create(options.debug_dump_dir, model, h.max_steps));
    dump.emplace(std::move(d));
    KILN_RETURN_IF_ERROR(dump->write_initial_weights(model));
  }

  // Data parallelism: gradient buckets in backward order, or the ZeRO-1 optimizer.
  std::optional<GradAllreducer> reducer;
  std::optional<ShardedAdamW> sharded;
  std::function<void(int)> block_done;
  if (comm != nullptr && !zero1) {
    std::vector<GradBucket> blocks;
    for (int l = config.model.n_layer - 1; l >= -1; --l) {
      const BlockRange r = model.block_range(l);
      blocks.push_back({r.offset, r.count, l});
    }
    reducer.emplace(comm, model.grad_data(), plan_buckets(blocks, options.bucket_bytes_min),
                    h.grad_reduce, &ctx);
    block_done = [&reducer](int l) { reducer->on_block_done(l); };
  } else if (zero1) {
    std::vector<DecayRange> ranges;
    for (const ParamInfo& p : model.params())
      ranges.push_back({p.offset, p.numel, p.decay});
    sharded.emplace(comm, std::move(ranges), model.param_data().size(), model.adam_m(),
                    model.adam_v(), h.grad_reduce);
  }
  MomentLayout moments;
  moments.total = model.param_data().size();
  moments.zero_count = moments.total;
  moments.tail_begin = moments.total;
  std::span<float> adam_m = model.adam_m(), adam_v = model.adam_v();
  if (sharded) {
    moments.zero_begin = sharded->shard_begin();
    moments.zero_count = sharded->shard_end() - sharded->shard_begin();
    moments.tail_begin = static_cast<size_t>(world) * moments.zero_count;
    adam_m = sharded->m();
    adam_v = sharded->v();
  }

  // Checkpoints: resume first, so every rank starts from the same state.
  std::unique_ptr<TrainerCheckpoints> checkpoints;
  int start_step = 0;
  if (!options.ckpt_dir.empty()) {
    TrainerCheckpointOptions c;
    c.dir = options.ckpt_dir;
    c.every = options.ckpt_every;
    c.keep_last = options.ckpt_keep;
    c.rank = rank;
    c.world = world;
    c.store = options.store;
    c.store_prefix = options.store_prefix;
    c.metrics = registry;
    c.log = log;
    const size_t staging = (rank == 0 ? model.param_data().size() : 0) +
                           (sharded || rank == 0 ? 2 * adam_m.size() : 0);
    KILN_ASSIGN_OR_RETURN(checkpoints,
                          TrainerCheckpoints::create(std::move(c), staging * sizeof(float) + 4096));
    KILN_ASSIGN_OR_RETURN(ResumePoint resumed,
                          checkpoints->resume(config, model.param_data(), adam_m, adam_v, moments));
    if (resumed.step > 0) {
      KILN_RETURN_IF_ERROR(train_loader->seek(resumed.loader));
      start_step = static_cast<int>(resumed.step);
    }
    if (comm != nullptr) KILN_RETURN_IF_ERROR(comm->run(comm::CollectiveArgs::barrier()));
    if (rank == 0) KILN_RETURN_IF_ERROR(checkpoints->set_aside_skipped());
  }

  const size_t batch_tokens = static_cast<size_t>(h.batch) * h.seq;
  std::vector<int32_t> inputs(batch_tokens), targets(batch_tokens);  // (B, T)
  TrainMetrics metrics(registry);
  metrics.set_checkpoint_every(checkpoints != nullptr ? options.ckpt_every : 0);
  ProgressLine progress(options.json ? nullptr : out, options.live_progress);
  std::array<char, kStepJsonMax> json_line{};
  const LrSchedule schedule{h.lr, h.min_lr, h.warmup_steps, h.max_steps};
  AdamWConfig adamw;
  adamw.beta1 = static_cast<float>(h.beta1);
  adamw.beta2 = static_cast<float>(h.beta2);
  adamw.eps = static_cast<float>(h.eps);
  adamw.weight_decay = static_cast<float>(h.weight_decay);
  const float loss_scale = 1.0f / static_cast<float>(h.grad_accum);
  const double tokens_per_step = static_cast<double>(batch_tokens) * h.grad_accum * world;
  const double flops_per_token = model.flops_per_token(h.seq);

  TrainSummary summary;
  summary.val_loss = std::numeric_limits<float>::quiet_NaN();
  summary.peak_gflops = peak_gflops;
  summary.config_sha256 = options.config_sha256;
  summary.precision = h.precision;
  bool warned_mfu = false;  // the MFU-above-1 warning is given once
  double first_step_ns = 0;
  double later_steps_ns = 0;  // time of steps 2..S, for the mean rate after warm-up
  const int64_t loop_start_ns = monotonic_now_ns();
  const int last_step =
      options.stop_after_step > 0 ? std::min(options.stop_after_step, h.max_steps) : h.max_steps;
  if (start_step >= last_step) {
    return Status::invalid_argument("the run already reached step " + std::to_string(start_step) +
                                    " (checkpoint in " + options.ckpt_dir +
                                    "), at or past the last step " + std::to_string(last_step));
  }
  for (int step = start_step + 1; step <= last_step; ++step) {
    const int64_t t0 = monotonic_now_ns();
    model.zero_grad(ctx);
    double loss_sum = 0;
    double comm_exposed_ms = 0;
    for (int micro = 0; micro < h.grad_accum; ++micro) {
      // Buckets go out during the last micro-step's backward, once the sums are complete.
      const bool last_micro = micro + 1 == h.grad_accum;
      train_loader->next(inputs, targets);
      if (dump) dump->record_batch(step, inputs, targets);
      Result<float> loss = model.forward(inputs, targets, ctx);
      if (!loss.ok()) return loss.status().with_context("step " + std::to_string(step));
      if (dump && step == 1) dump->record_logits(model);
      Status s = model.backward(loss_scale, ctx, last_micro ? block_done : nullptr);
      if (s.ok() && last_micro && reducer) s = reducer->finish(&comm_exposed_ms);
      if (!s.ok()) return s.with_context("step " + std::to_string(step));
      loss_sum += *loss;
    }
    StepReport r;
    r.step = step;
    r.max_steps = h.max_steps;
    r.world = world;
    r.resumed_from = start_step;
    KILN_ASSIGN_OR_RETURN(r.loss,
                          mean_over_ranks(comm, static_cast<float>(loss_sum / h.grad_accum)));
    if (step == options.debug_nan_step) r.loss = std::numeric_limits<float>::quiet_NaN();
    if (dump) {
      dump->record_loss(step, r.loss);
      if (step == 1) dump->record_grads(model);
    }
    r.lr = learning_rate(schedule, step);
    // The overflow and NaN check of every step (bf16 has f32's range, so no loss scaling: a
    // non-finite loss or gradient norm is a diverged run, not a step to skip). A non-finite
    // loss is caught before the update; a non-finite norm too (ShardedAdamW, which computes it
    // under ZeRO-1, then skips its update and all-gather on every rank). Either way the step is
    // reported, not validated and not checkpointed, and the run stops: the parameters and the
    // last checkpoint stay the last good step's.
    const bool loss_finite = std::isfinite(r.loss);
    if (!loss_finite) {
      r.grad_norm = std::numeric_limits<double>::quiet_NaN();
    } else if (sharded) {
      const int64_t z0 = monotonic_now_ns();
      const AdamWSettings zs{adamw.beta1, adamw.beta2, adamw.eps, adamw.weight_decay};
      Status s = sharded->step(model.param_data(), model.grad_data(), zs, static_cast<float>(r.lr),
                               step, h.grad_clip, ctx, &r.grad_norm);
      if (!s.ok()) return s.with_context("step " + std::to_string(step));
      comm_exposed_ms = static_cast<double>(monotonic_now_ns() - z0) * 1e-6;
    } else {
      KILN_ASSIGN_OR_RETURN(r.grad_norm, model.grad_norm(ctx));
      const float grad_scale =
          h.grad_clip > 0 ? ops::grad_clip_scale(r.grad_norm, h.grad_clip) : 1.0f;
      if (std::isfinite(r.grad_norm)) {
        KILN_RETURN_IF_ERROR(
            model.adamw_step(adamw, static_cast<float>(r.lr), step, grad_scale, ctx));
      }
    }
    const bool diverged = !loss_finite || !std::isfinite(r.grad_norm);
    r.comm_exposed_ms = comm_exposed_ms;
    const int64_t t1 = monotonic_now_ns();

    const double step_ns = static_cast<double>(std::max<int64_t>(t1 - t0, 1));
    r.step_ms = step_ns * 1e-6;
    r.tokens_per_s = tokens_per_step / (step_ns * 1e-9);
    // The peak is one rank's; tokens/s counts every rank.
    r.mfu = flops_per_token * r.tokens_per_s / (peak_gflops * 1e9 * world);
    (step == start_step + 1 ? first_step_ns : later_steps_ns) += step_ns;
    if (r.mfu > 1 && !warned_mfu) {
      // Only an underestimated peak does this: the probe ran while other work held the cores.
      log.warn(
          "MFU above 1: the peak was underestimated (a busy machine during the probe?); "
          "pass --peak-gflops for a stable figure",
          {{"step", step}, {"mfu", r.mfu}, {"peak_gflops", peak_gflops}});
      warned_mfu = true;
    }
    if (!diverged && (validates_at(h, step) || (step == last_step && h.val_batches > 0))) {
      Result<float> val =
          validation_loss(&*val_loader, h.val_batches, &model, inputs, targets, ctx, comm);
      if (!val.ok())
        return val.status().with_context("validation after step " + std::to_string(step));
      r.validated = true;
      r.val_loss = *val;
      summary.val_loss = *val;
    }
    auto save_checkpoint = [&]() -> Result<double> {
      Result<double> stall = checkpoints->save(step, config, std::as_const(model).param_data(),
                                               adam_m, adam_v, moments, train_loader->position());
      if (!stall.ok())
        return stall.status().with_context("checkpoint after step " + std::to_string(step));
      return stall;
    };
    if (!diverged && checkpoints && checkpoints->due(step, last_step)) {
      KILN_ASSIGN_OR_RETURN(r.ckpt_stall_ms, save_checkpoint());
    }
    summary.steps = step;
    summary.train_loss = r.loss;

    if (out != nullptr && options.json) {
      *out << format_step_json(r, json_line) << '\n';
      out->flush();
    }
    progress_channel.step(r);
    const int64_t now_ns = monotonic_now_ns();
    const double eta_s = static_cast<double>(now_ns - loop_start_ns) * 1e-9 / (step - start_step) *
                         (last_step - step);
    progress.update(r, eta_s, now_ns);
    metrics.record(r);
    if (on_step) on_step(r);
    if (!loss_finite) {
      return Status::aborted("step " + std::to_string(step) + ": training loss is " +
                             std::to_string(r.loss) + ": the run diverged (try a lower train.lr)");
    }
    if (diverged) {
      return Status::aborted("step " + std::to_string(step) + ": the gradient norm is " +
                             std::to_string(r.grad_norm) +
                             " (an overflow or NaN in the backward): the run diverged (try a "
                             "lower train.lr)");
    }
    // After the callback, so a callback's request stops the run after its own step. The last
    // step ends the run anyway: no collective there, on any rank.
    if (step < last_step) {
      bool stop_now = false;
      KILN_ASSIGN_OR_RETURN(stop_now, agree_to_stop(comm, options.stop));
      if (stop_now) {
        if (checkpoints && !checkpoints->due(step, last_step)) {
          KILN_RETURN_IF_ERROR(save_checkpoint().status());
        }
        log.warn("stopping on request after this step",
                 {{"step", step},
                  {"last_step", last_step},
                  {"checkpoint", checkpoints ? "saving this step" : "none (no checkpoint dir)"}});
        summary.stopped = true;
        break;
      }
    }
  }

  const int steps_run = summary.steps - start_step;
  summary.tokens_per_s = steps_run > 1 ? tokens_per_step * (steps_run - 1) / (later_steps_ns * 1e-9)
                                       : tokens_per_step / (first_step_ns * 1e-9);
  if (checkpoints) KILN_RETURN_IF_ERROR(checkpoints->finish());
  if (dump) KILN_RETURN_IF_ERROR(dump->write_steps(model, summary.steps));
  if (!options.export_path.empty() && rank == 0 && summary.stopped) {
    log.warn("stopped before the last step: not exporting", {{"path", options.export_path}});
  } else if (!options.export_path.empty() && rank == 0) {
    KILN_RETURN_IF_ERROR(save_weights(model, options.export_path));
    log.info("exported the final weights", {{"path", options.export_path}});
  }
  summary.peak_rss_bytes = peak_rss_bytes();
  if (out != nullptr && options.json) {
    *out << format_done_json(summary) << '\n';
    out->flush();
  }
  progress_channel.done(summary);
  return summary;
}

Status export_initial_weights(const ModelConfig& model_config, uint64_t seed,
                              const std::string& path, Precision dtype) {
  // The smallest activations the model can be built with: only the parameters matter here.
  KILN_ASSIGN_OR_RETURN(Gpt2 model, Gpt2::create(model_config, 1, 1));
  model.init_weights(seed);
  return save_weights(model, path, dtype);
}

}  // namespace kiln::train
