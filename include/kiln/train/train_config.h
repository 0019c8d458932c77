// The trainer's configuration: a strict YAML file (configs/tiny.yaml) and the command-line flags
// that override some of its keys.
//
//   model: {n_layer: 6, n_head: 6, n_embd: 384, block_size: 256, vocab_size: 50257}
//   data: {train: data/sotu/train, val: data/sotu/val}   # relative to the working directory
//   train: {batch: 8, seq: 256, grad_accum: 1, max_steps: 300, lr: 0.0006, min_lr: 0.00006,
//           warmup_steps: 30, weight_decay: 0.1, beta1: 0.9, beta2: 0.95, eps: 1.0e-8,
//           grad_clip: 1.0, val_every: 50, val_batches: 10, seed: 1337, threads: 2,
//           precision: fp32, grad_reduce: fp32}
//
// Every `model` key and `data.train` are required; each `train` key is optional and defaults to
// the value above. `data.val` is required while `train.val_batches` > 0 (0 turns validation off).
// Errors name the file, line, column and key (see include/kiln/base/config.h); an override that
// breaks a rule names its flag instead (`--seq 512: ...`).
//
// Invariants of a TrainConfig returned by load_train_config() and kept by apply_overrides():
// every value is in its range, seq <= model.block_size, n_embd is a multiple of n_head,
// min_lr <= lr, beta1 and beta2 are below 1 and eps is above 0.
#ifndef KILN_TRAIN_TRAIN_CONFIG_H_
#define KILN_TRAIN_TRAIN_CONFIG_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include <kiln/base/result.h>
#include <kiln/base/status.h>
#include <kiln/train/model.h>

namespace kiln::train {

// Limits on values. Each is far beyond any model this trainer will run on a CPU; a value above
// one is a typo, caught before it allocates memory it cannot have.
inline constexpr int kLayersMax = 1024;
inline constexpr int kHeadsMax = 1024;
inline constexpr int kEmbdMax = 65536;
inline constexpr int kBlockSizeMax = 65536;
// Token shards store ids as uint16, so no vocabulary can be larger.
inline constexpr int kVocabSizeMax = 65536;
inline constexpr int kBatchMax = 65536;
inline constexpr int kGradAccumMax = 65536;
inline constexpr int kStepsMax = 1'000'000'000;
inline constexpr int kValBatchesMax = 1'000'000;
// The pool starts every thread it is given; more than this is a typo, not a machine.
inline constexpr int kThreadsMax = 1024;
// Step sizes above 1 diverge at once; a larger value is a unit mistake.
inline constexpr double kLrMax = 1.0;
inline constexpr double kGradClipMax = 1e6;

struct DataPaths {
  std::string train;  // shard directory of the training data
  std::string val;    // shard directory of the validation data; may be empty if val_batches == 0
};

struct TrainHyperparams {
  int batch = 8;        // B: windows per micro-step
  int seq = 256;        // T: tokens per window, <= model.block_size
  int grad_accum = 1;   // micro-steps per optimizer step (loss scaled by 1/grad_accum)
  int max_steps = 300;  // optimizer steps; also the end of the cosine schedule
  double lr = 6e-4;
  double min_lr = 6e-5;
  int warmup_steps = 30;
  double weight_decay = 0.1;  // applied to 2-D weights only
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;  // global gradient norm limit; 0 turns clipping off
  int val_every = 50;      // validate every this many steps (0: only at the last step)
  int val_batches = 10;    // batches per validation (0: no validation)
  uint64_t seed = 1337;    // weights, data order
  int threads = 2;         // the compute pool (per rank)
  int zero = 0;            // 1: ZeRO-1, AdamW moments sharded across data-parallel ranks
  // The matrix products' precision (model.h, Precision): fp32, or bf16 with f32 masters.
  Precision precision = Precision::kFp32;
  // The gradient all-reduce's wire format between data-parallel ranks: fp32, or bf16 (half the
  // bytes; each rank's gradients rounded to bf16 before the sum, the sum taken in f32).
  Precision grad_reduce = Precision::kFp32;
};

struct TrainConfig {
  std::string source;  // the file it was read from, for messages
  ModelConfig model{};
  DataPaths data;
  TrainHyperparams train;
  // Keys ("train.seq") whose value came from a flag rather than the file.
  std::set<std::string> overridden;
};

// Reads and validates `path`. kNotFound/kIoError name the file; kInvalidArgument lists every
// problem found, one per line, each naming file:line:column and the key.
Result<TrainConfig> load_train_config(const std::string& path);

// Flags of `kiln train` that replace a config value when given.
struct TrainOverrides {
  std::optional<int> max_steps;            // --max-steps
  std::optional<int> batch;                // --batch
  std::optional<int> seq;                  // --seq
  std::optional<int> threads;              // --threads
  std::optional<uint64_t> seed;            // --seed
  std::optional<int> grad_accum;           // --grad-accum
  std::optional<int> val_every;            // --val-every
  std::optional<int> zero;                 // --zero
  std::optional<std::string> precision;    // --precision fp32|bf16
  std::optional<std::string> grad_reduce;  // --grad-reduce fp32|bf16
};

// Applies the overrides given, checking each against the key's range and the rules above.
// kInvalidArgument names the flag (`--seq 512: out of range [1, 256] (model.block_size)`);
// `config` is unchanged on error.
Status apply_overrides(const TrainOverrides& overrides, TrainConfig* config);

}  // namespace kiln::train

#endif  // KILN_TRAIN_TRAIN_CONFIG_H_
