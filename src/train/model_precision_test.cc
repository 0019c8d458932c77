// A bf16 model's packed weights (model_precision.cc, kPackedWeightsMinTokens): a step of that
// many tokens reads its matmul weights packed for the matrix units, and packs them again after
// every update, so that what it computes follows the weights it holds.
#include <kiln/ops/matmul.h>
#include <kiln/train/model.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

#include "ops/gemm_bf16.h"
#include "train/model_state.h"
#include "train/model_test_util.h"
#include "train/trainer_test_util.h"

namespace kiln::train {
namespace {

using testing::bits;
using testing::random_tokens;

// Two small blocks over 8 x 256 tokens: past the packing threshold, with a vocabulary wider
// than matmul.cc's 3,072-column span (the head's packed pieces are then several, the last
// narrower).
ModelConfig packed_config() {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 64;
  c.block_size = 256;
  c.vocab_size = 3500;
  return c;
}
constexpr int kBatch = 8, kSeq = 256;
static_assert(int64_t{kBatch} * kSeq >= kPackedWeightsMinTokens, "kAuto must pack here");

Gpt2 make(Precision precision, int batch, int seq, WeightPacking packing) {
  Result<Gpt2> model =
      Gpt2::create(packed_config(), batch, seq, MomentArenas(), precision, packing);
  KILN_CHECK(model.ok()) << model.status().to_string();
  return std::move(model).value();
}

// Two updates of a packed bf16 model, then a forward: the loss of a fresh model of the same
// parameters, bit for bit, and near fp32's. Run without a pool, on a thread of its own, so that
// its counts of packed reads are exactly these matmuls': each reads its packed weight, none the
// plain one (else a stale pack could go unseen: both models would read the same plain weights).
void expect_packed_model_follows_its_weights(int batch, int seq, WeightPacking packing) {
  Result<ops::Context> made = ops::make_cpu_context(nullptr);
  ASSERT_TRUE(made.ok());
  const ops::Context ctx = *made;
  const size_t n = static_cast<size_t>(batch) * seq;
  const auto tokens = random_tokens(n, packed_config().vocab_size, 7);
  const auto targets = random_tokens(n, packed_config().vocab_size, 8);
  Gpt2 trained = make(Precision::kBf16, batch, seq, packing);
  trained.init_weights(5);
  for (int64_t step = 1; step <= 2; ++step) {
    trained.zero_grad(ctx);
    ASSERT_TRUE(trained.forward(tokens, targets, ctx).ok());
    ASSERT_TRUE(trained.backward(1.0f, ctx).ok());
    ASSERT_TRUE(trained.adamw_step(AdamWConfig{}, 1e-2f, step, 1.0f, ctx).ok());
  }
  const Result<float> after = trained.forward(tokens, targets, ctx);
  ASSERT_TRUE(after.ok()) << after.status().to_string();

  // The same parameters in fresh models: packed from scratch (bf16), and not rounded (fp32).
  Gpt2 fresh = make(Precision::kBf16, batch, seq, packing);
  Gpt2 fp32 = make(Precision::kFp32, batch, seq, packing);
  for (Gpt2* copy : {&fresh, &fp32}) {
    const std::span<const float> from = std::as_const(trained).param_data();
    std::copy(from.begin(), from.end(), copy->param_data().begin());
  }
  const Result<float> fresh_loss = fresh.forward(tokens, targets, ctx);
  const Result<float> fp32_loss = fp32.forward(tokens, targets, ctx);
  ASSERT_TRUE(fresh_loss.ok() && fp32_loss.ok());
  // Stale packed weights (the update's not packed again) would give the loss of older weights.
  EXPECT_EQ(bits(*after), bits(*fresh_loss)) << *after << " vs " << *fresh_loss;
  // Wrong pieces would be far off; bf16 rounding moves a loss near 8 by about 1e-3.
  EXPECT_NEAR(*after, *fp32_loss, 0.01 * *fp32_loss);
  EXPECT_NE(bits(*after), bits(*fp32_loss)) << "the bf16 model ran in fp32";
  const ops::PackedBUse use = ops::packed_b_use_here();
  EXPECT_GT(use.read_packed, 0);
  EXPECT_EQ(use.read_plain, 0);
}

void on_a_fresh_thread(int batch, int seq, WeightPacking packing) {
  std::thread fresh(expect_packed_model_follows_its_weights, batch, seq, packing);
  fresh.join();
}

TEST(ModelPrecisionTest, APackedBf16ModelComputesWithTheWeightsItHoldsAfterEachUpdate) {
  // Packed by kAuto's threshold, and by kAlways below it.
  on_a_fresh_thread(kBatch, kSeq, WeightPacking::kAuto);
  on_a_fresh_thread(2, 64, WeightPacking::kAlways);
}

}  // namespace
}  // namespace kiln::train
