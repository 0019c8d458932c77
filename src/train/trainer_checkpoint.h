// The trainer's checkpoints: what goes into them, resume, and the gather of file records.
//
// Contents. Rank 0's shard holds `params` (the whole parameter arena, F32). The AdamW moments:
// without ZeRO rank 0 also holds `adam_m` and `adam_v` (whole arenas) and the other ranks' shards
// are empty; with ZeRO-1 every rank holds its own slice ([begin, begin + count) of the arena, in
// the shard's metadata as zero_begin/zero_count) plus the shared tail. The manifest's metadata
// holds what makes a resume exact: the step, the world size, the global batch, sequence and seed,
// the loader's position (epoch, window: the data order is a pure function of the seed and the
// epoch, so the position is the loader's whole random state) and a hash of the model config.
//
// Resume picks the newest checkpoint that verifies (kiln_ckpt), says which newer ones it passed
// over and why, and rebuilds the moments for this run's layout from whichever layout saved them,
// so a run can resume on another world size, with or without ZeRO. Same world size and layout:
// the state is bit-identical to the one saved.
//
// Records are gathered to rank 0 through the rendezvous store (key
// <store_prefix>/ckpt/<step>/<rank>, the prefix naming the job and attempt), not
// the training communicator: the writer thread runs beside the training loop, whose collectives
// must keep the same order on every rank.
#ifndef KILN_TRAIN_TRAINER_CHECKPOINT_H_
#define KILN_TRAIN_TRAINER_CHECKPOINT_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <kiln/base/log.h>
#include <kiln/base/result.h>
#include <kiln/ckpt/async_checkpointer.h>
#include <kiln/comm/store.h>
#include <kiln/obs/metrics.h>
#include <kiln/train/loader.h>
#include <kiln/train/model.h>
#include <kiln/train/train_config.h>

namespace kiln::train {

// How long rank 0 waits for another rank's checkpoint record before the save counts as failed.
inline constexpr int64_t kCheckpointGatherTimeoutMs = 120'000;

// The optimizer state layout of this run: whole arenas (zero_count == total) or a ZeRO-1 slice
// [zero_begin, zero_begin + zero_count) plus the tail [tail_begin, total).
struct MomentLayout {
  size_t total = 0;
  size_t zero_begin = 0;
  size_t zero_count = 0;
  size_t tail_begin = 0;
  bool sharded() const { return zero_count != total; }
};

struct TrainerCheckpointOptions {
  std::string dir;
  int every = 0;      // save every this many steps (and after the last); 0: only the last
  int keep_last = 3;  // retention
  int rank = 0;
  int world = 1;
  comm::Store* store = nullptr;  // required when world > 1 (the record gather)
  // The job and attempt's root in the store (TrainerOptions::store_prefix).
  std::string store_prefix = "kiln/job/default/attempt/0";
  obs::MetricsRegistry* metrics = nullptr;
  Logger log;
};

// What a resume restored.
struct ResumePoint {
  int64_t step = 0;  // the last completed step (0: a fresh start)
  LoaderPosition loader;
};

class TrainerCheckpoints {
 public:
  static Result<std::unique_ptr<TrainerCheckpoints>> create(TrainerCheckpointOptions options,
                                                            size_t staging_bytes);

  // Restores params and this run's moments (m, v laid out as `layout`) from the newest
  // checkpoint that verifies; a fresh start returns step 0 and touches nothing. Errors name the
  // checkpoint and what does not match (a different model config is kInvalidArgument), or the
  // file and field that is missing or malformed (kInvalidArgument): nothing here throws.
  Result<ResumePoint> resume(const TrainConfig& config, std::span<float> params, std::span<float> m,
                             std::span<float> v, const MomentLayout& layout);

  // Rank 0, after every rank has resumed: moves the newer checkpoints resume passed over (those
  // with a manifest) aside, so their steps can be written again.
  Status set_aside_skipped();

  bool due(int64_t step, int64_t max_steps) const;

  // Starts an asynchronous save of the state after `step`; returns what the loop waited (the
  // copy, plus the previous write when it was still running). Failures of earlier saves are
  // logged here as they come in.
  Result<double> save(int64_t step, const TrainConfig& config, std::span<const float> params,
                      std::span<const float> m, std::span<const float> v,
                      const MomentLayout& layout, const LoaderPosition& position);

  // Waits for the last save and returns its error, if any (a run that ends with its final state
  // not durable must say so).
  Status finish();

 private:
  TrainerCheckpoints() = default;
  void log_completed();

  TrainerCheckpointOptions options_;
  std::unique_ptr<ckpt::AsyncCheckpointer> writer_;
  Status last_failure_;
  std::vector<std::string> skipped_;  // step directories resume passed over
};

}  // namespace kiln::train

#endif  // KILN_TRAIN_TRAINER_CHECKPOINT_H_
