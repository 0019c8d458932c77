// The data loader (see include/kiln/train/loader.h for the order, the position and the memory
// bound).
#include <kiln/train/loader.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <utility>

#include <kiln/base/check.h>
#include <kiln/train/rng.h>
#include <kiln/train/shard.h>

namespace kiln::train {
namespace {

// Every token of the shard at `path` is below config.vocab_size (when set): found here, at load,
// an id the embedding has no row for names its shard and position, instead of failing the step
// whose window happens to draw it.
Status check_vocab(const std::string& path, std::span<const uint16_t> tokens,
                   const LoaderConfig& config) {
  if (config.vocab_size == 0) return Status();
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= config.vocab_size) {
      return Status::corruption(path + ": token " + std::to_string(tokens[i]) + " at position " +
                                std::to_string(i) + " is outside the vocabulary (vocab_size " +
                                std::to_string(config.vocab_size) + ")");
    }
  }
  return Status();
}

}  // namespace

Result<DataLoader> DataLoader::open(const LoaderConfig& config) {
  const std::string& dir = config.dir;
  if (config.batch < 1 || config.seq < 1) {
    return Status::invalid_argument(
        dir + ": batch and seq must be at least 1, not batch=" + std::to_string(config.batch) +
        " seq=" + std::to_string(config.seq));
  }
  if (config.world < 1 || config.rank < 0 || config.rank >= config.world) {
    return Status::invalid_argument(dir + ": rank " + std::to_string(config.rank) +
                                    " is not in a world of " + std::to_string(config.world));
  }
  DataLoader loader;
  loader.config_ = config;
  KILN_ASSIGN_OR_RETURN(loader.shard_paths_, list_shards(dir));
  for (const std::string& path : loader.shard_paths_) {
    const size_t first = loader.tokens_.size();
    KILN_RETURN_IF_ERROR(read_shard(path, &loader.tokens_));
    KILN_RETURN_IF_ERROR(check_vocab(path, std::span(loader.tokens_).subspan(first), config));
  }
  const uint64_t n = loader.tokens_.size();
  const uint64_t seq = static_cast<uint64_t>(config.seq);
  loader.windows_ = n > 0 ? (n - 1) / seq : 0;
  loader.global_batch_ = static_cast<uint64_t>(config.world) * static_cast<uint64_t>(config.batch);
  if (loader.windows_ < loader.global_batch_) {
    return Status::invalid_argument(
        dir + ": " + std::to_string(n) + " tokens make " + std::to_string(loader.windows_) +
        " windows of " + std::to_string(seq + 1) + " tokens, fewer than one global batch of " +
        std::to_string(loader.global_batch_) + " (world " + std::to_string(config.world) +
        " x batch " + std::to_string(config.batch) + ")");
  }
  if (loader.windows_ > std::numeric_limits<uint32_t>::max()) {
    return Status::not_supported(dir + ": " + std::to_string(loader.windows_) +
                                 " windows per epoch; the shuffle indexes at most 2^32 - 1");
  }
  if (config.shuffle) loader.order_.resize(static_cast<size_t>(loader.windows_));
  loader.start_epoch(0);
  return loader;
}

void DataLoader::start_epoch(uint64_t epoch) {
  epoch_ = epoch;
  window_ = 0;
  if (!config_.shuffle) return;
  // Fisher-Yates (Durstenfeld): position i takes a uniform pick of the i + 1 not yet placed.
  std::iota(order_.begin(), order_.end(), uint32_t{0});
  Rng rng(derive_seed(config_.seed, epoch));
  for (size_t i = order_.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(rng.next_below(i));
    std::swap(order_[i - 1], order_[j]);
  }
}

void DataLoader::next(std::span<int32_t> inputs, std::span<int32_t> targets) {
  const size_t batch = static_cast<size_t>(config_.batch);
  const size_t seq = static_cast<size_t>(config_.seq);
  KILN_CHECK(inputs.size() == batch * seq && targets.size() == batch * seq)
      << "next() wants (B, T) = (" << batch << ", " << seq << ") spans, got " << inputs.size()
      << " inputs and " << targets.size() << " targets";
  const uint64_t first = window_ + static_cast<uint64_t>(config_.rank) * batch;
  for (size_t b = 0; b < batch; ++b) {
    const uint16_t* src = tokens_.data() + window_id(first + b) * seq;  // (T + 1)
    int32_t* in = inputs.data() + b * seq;
    int32_t* tgt = targets.data() + b * seq;
    for (size_t t = 0; t < seq; ++t) {
      in[t] = src[t];
      tgt[t] = src[t + 1];
    }
  }
  window_ += global_batch_;
  if (window_ + global_batch_ > windows_) start_epoch(epoch_ + 1);
}

Status DataLoader::seek(const LoaderPosition& position) {
  if (position.window > windows_) {
    return Status::invalid_argument(config_.dir + ": position window " +
                                    std::to_string(position.window) + " is beyond the " +
                                    std::to_string(windows_) + " windows of an epoch (seq " +
                                    std::to_string(config_.seq) + ")");
  }
  // As next() does, a position without a full batch left belongs to the next epoch's start.
  const bool wraps = position.window + global_batch_ > windows_;
  const uint64_t epoch = wraps ? position.epoch + 1 : position.epoch;
  if (epoch != epoch_) start_epoch(epoch);  // order_ already holds epoch_'s permutation
  window_ = wraps ? 0 : position.window;
  return Status();
}

}  // namespace kiln::train
