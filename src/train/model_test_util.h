// What the model's tests share: small configs, a context on a 2-thread pool, seeded batches.
#ifndef KILN_TRAIN_MODEL_TEST_UTIL_H_
#define KILN_TRAIN_MODEL_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <kiln/base/thread_pool.h>
#include <kiln/ops/context.h>
#include <kiln/train/model.h>
#include <kiln/train/rng.h>

namespace kiln::train::testing {

// The finite-difference config of the brief: big enough to exercise every op's loops (two
// heads, T not a power of two is covered by kMicroSeq = 8 < block_size), small enough that a
// forward takes microseconds. V = 67 pads to 128, so pad columns are exercised too.
inline ModelConfig micro_config() {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  c.block_size = 16;
  c.vocab_size = 67;
  return c;
}
inline constexpr int kMicroBatch = 2;
inline constexpr int kMicroSeq = 8;

// A Context with the best ISA of this CPU (or KILN_OPS_ISA's) on its own pool.
class TestContext {
 public:
  explicit TestContext(int threads) : pool_(std::make_unique<ThreadPool>(threads)) {
    Result<ops::Context> ctx = ops::make_cpu_context(pool_.get());
    KILN_CHECK(ctx.ok()) << ctx.status().to_string();
    ctx_ = *ctx;
  }
  const ops::Context& ctx() const { return ctx_; }

 private:
  std::unique_ptr<ThreadPool> pool_;
  ops::Context ctx_;
};

// n token ids in [0, vocab), the same for the same seed.
inline std::vector<int32_t> random_tokens(size_t n, int vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> out(n);
  for (int32_t& t : out)
    t = static_cast<int32_t>(rng.next_below(static_cast<uint64_t>(vocab)));
  return out;
}

// A model of `config` for (batch, seq), initialised with `seed`; fails the test on error.
inline Gpt2 make_model(const ModelConfig& config, int batch, int seq, uint64_t seed) {
  Result<Gpt2> model = Gpt2::create(config, batch, seq);
  KILN_CHECK(model.ok()) << model.status().to_string();
  model->init_weights(seed);
  return std::move(model).value();
}

}  // namespace kiln::train::testing

#endif  // KILN_TRAIN_MODEL_TEST_UTIL_H_
