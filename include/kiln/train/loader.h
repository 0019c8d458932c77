// The data loader: batches of (inputs, targets) windows from a directory of token shards, in a
// seeded order that is the same for every rank and every world size.
//
// The data directory's shards (every *.bin, sorted by name; see shard.h) are concatenated into
// one stream of N tokens. Window w is tokens [w*T, w*T + T + 1): inputs are its first T tokens,
// targets its last T (the inputs shifted by one). An epoch has W = (N - 1) / T windows.
//
// Order. Each epoch e visits windows in `order_e`, a Fisher-Yates shuffle of 0..W-1 drawn from
// Rng(derive_seed(seed, e)) (the identity when shuffle is off). The global batch of a step is the
// next G = world * B windows of that order, starting at the global position p; rank r takes
// order_e[p + r*B + b] for b < B. When fewer than G windows remain, the epoch's tail is skipped
// and epoch e + 1 starts at window 0. Because the order and position are global, the union of
// all ranks' batches does not depend on how G is split into world * B, and a run can resume on
// another world size with the same G (a different G resumes at the same window but groups the
// windows into batches differently).
//
// Memory: all N tokens (2 bytes each) plus, when shuffling, one permutation of W uint32 window
// indices (4 bytes each): 2N + 4W bytes, allocated once in open(). next() allocates nothing and
// costs O(B * T), plus an O(W) reshuffle at an epoch boundary. W must stay below 2^32 (the
// corpus would then need over 2^32 * T tokens of memory, far beyond one machine).
//
// Not thread-safe: one loader per rank (or per thread).
#ifndef KILN_TRAIN_LOADER_H_
#define KILN_TRAIN_LOADER_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <kiln/base/result.h>
#include <kiln/base/status.h>

namespace kiln::train {

struct LoaderConfig {
  std::string dir;          // shard directory
  int batch = 0;            // B: windows per rank per step
  int seq = 0;              // T: tokens per window's inputs (and targets)
  int rank = 0, world = 1;  // this rank's slice of the global batch
  uint64_t seed = 0;        // of the per-epoch shuffles
  bool shuffle = true;      // false: windows in order (validation)
  uint32_t vocab_size = 0;  // every token must be below it (checked in open()); 0: unchecked
};

// Where the next global batch starts; global, so world-size independent.
struct LoaderPosition {
  uint64_t epoch = 0;
  uint64_t window = 0;  // index into the epoch's order, not a window id
  friend bool operator==(const LoaderPosition&, const LoaderPosition&) = default;
};

class DataLoader {
 public:
  // Lists, reads and verifies every shard of config.dir (checksums included) and prepares epoch
  // 0. InvalidArgument for a bad batch/seq/rank/world or when the stream holds fewer windows
  // than one global batch; kCorruption naming the shard and the position of the first token at
  // or above config.vocab_size (when set); the shard errors of list_shards()/read_shard()
  // otherwise.
  static Result<DataLoader> open(const LoaderConfig& config);

  // Fills this rank's slice of the next global batch: inputs and targets are (B, T) row-major.
  // Tokens are GPT-2 ids, stored as int32 for the model's embedding lookup.
  // REQUIRES: inputs.size() == targets.size() == B * T.
  void next(std::span<int32_t> inputs, std::span<int32_t> targets);

  // The position of the next global batch; always one that has a full batch left in its epoch.
  LoaderPosition position() const { return {epoch_, window_}; }

  // Continues from `position` (from position(), possibly of another rank or world size). A
  // window with fewer than G windows left after it moves to the start of the next epoch, as
  // next() would. InvalidArgument when position.window > W.
  Status seek(const LoaderPosition& position);

  uint64_t tokens() const { return tokens_.size(); }
  uint64_t windows_per_epoch() const { return windows_; }
  const LoaderConfig& config() const { return config_; }
  const std::vector<std::string>& shard_paths() const { return shard_paths_; }

 private:
  DataLoader() = default;
  // Sets epoch_ = epoch, window_ = 0 and rebuilds order_ for it.
  void start_epoch(uint64_t epoch);
  uint64_t window_id(uint64_t index) const {
    return config_.shuffle ? order_[static_cast<size_t>(index)] : index;
  }

  LoaderConfig config_;
  std::vector<std::string> shard_paths_;
  std::vector<uint16_t> tokens_;  // (N) the concatenated stream
  std::vector<uint32_t> order_;   // (W) this epoch's permutation; empty when !shuffle
  uint64_t windows_ = 0;          // W
  uint64_t global_batch_ = 0;     // G = world * B
  uint64_t epoch_ = 0;
  uint64_t window_ = 0;  // index into order_ of the next global batch
};

}  // namespace kiln::train

#endif  // KILN_TRAIN_LOADER_H_
