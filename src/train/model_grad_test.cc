// Gpt2's backward against central finite differences of its own forward, on the micro config
// (L=2, H=2, C=32, V=67 padded to 128, B=2, T=8), for entries of every parameter tensor.
//
// Method: the weights are GPT-2's init plus normal(0, 0.05) noise on every parameter (biases and
// LayerNorm included), so that no gradient is structurally tiny and the biases matter. For each
// tensor the analytic gradient of the mean loss is computed once; then for its 3 entries of
// largest |gradient| and 2 seeded random ones, the loss is evaluated at theta +- eps (eps = 1e-2,
// f32) and (L+ - L-) / (2 eps) compared with the analytic value.
//
// Tolerance: |numeric - analytic| <= 2e-4 + 1e-2 |analytic|. The numeric side has two errors:
// truncation, O(eps^2 f''') (about 1e-5 here), and rounding: the loss (about 4.2) is a mean of f32
// row losses good to about 5e-7 each, so L+ - L- carries up to about 1e-6 of noise, i.e. 5e-5 in
// the quotient. The ops' exp/tanh approximations (2e-7 relative) add less. The worst entry
// measured uses a tenth of the bound (relative error 0.2% where |gradient| > 1e-2); a wrong term
// in a backward (a missing residual path, a transposed weight, a wrong scale) is off by tens of
// percent, and dropping one LayerNorm's residual accumulation fails dozens of entries.
#include <kiln/train/model.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include <kiln/train/rng.h>

#include "train/model_test_util.h"

namespace kiln::train {
namespace {

using testing::kMicroBatch;
using testing::kMicroSeq;
using testing::make_model;
using testing::micro_config;
using testing::random_tokens;
using testing::TestContext;

constexpr float kEps = 1e-2f;
constexpr double kAbsTolerance = 2e-4;
constexpr double kRelTolerance = 1e-2;
constexpr int kLargestPerTensor = 3;
constexpr int kRandomPerTensor = 2;
// The largest |gradient| of every tensor must reach this, or the check would compare noise.
constexpr double kSizeableGradient = 1e-3;

TEST(ModelGradTest, BackwardMatchesCentralDifferences) {
  TestContext env(2);
  const ops::Context& ctx = env.ctx();
  const ModelConfig c = micro_config();
  Gpt2 model = make_model(c, kMicroBatch, kMicroSeq, 77);
  const size_t n = kMicroBatch * kMicroSeq;
  const auto tokens = random_tokens(n, c.vocab_size, 1);
  const auto targets = random_tokens(n, c.vocab_size, 2);

  Rng noise(3);
  const std::span<float> theta = model.param_data();
  for (const ParamInfo& p : model.params()) {
    for (size_t i = 0; i < p.numel; ++i)
      theta[p.offset + i] += 0.05f * noise.normal();
  }

  model.zero_grad();
  ASSERT_TRUE(model.forward(tokens, targets, ctx).ok());
  ASSERT_TRUE(model.backward(1.0f, ctx).ok());
  const std::vector<float> grad(model.grad_data().begin(), model.grad_data().end());

  const auto loss_at = [&](size_t index, float value) {
    const float saved = theta[index];
    theta[index] = value;
    Result<float> loss = model.forward(tokens, targets, ctx);
    theta[index] = saved;
    KILN_CHECK(loss.ok()) << loss.status().to_string();
    return static_cast<double>(*loss);
  };

  Rng pick(4);
  int checked = 0;
  for (const ParamInfo& p : model.params()) {
    std::vector<size_t> order(p.numel);
    std::iota(order.begin(), order.end(), size_t{0});
    std::partial_sort(order.begin(), order.begin() + kLargestPerTensor, order.end(),
                      [&](size_t a, size_t b) {
                        return std::fabs(grad[p.offset + a]) > std::fabs(grad[p.offset + b]);
                      });
    std::vector<size_t> entries(order.begin(), order.begin() + kLargestPerTensor);
    for (int r = 0; r < kRandomPerTensor; ++r)
      entries.push_back(pick.next_below(p.numel));
    EXPECT_GE(std::fabs(grad[p.offset + entries[0]]), kSizeableGradient)
        << p.name << ": every gradient is tiny, the check would compare noise";
    for (size_t e : entries) {
      const size_t index = p.offset + e;
      const double numeric =
          (loss_at(index, theta[index] + kEps) - loss_at(index, theta[index] - kEps)) /
          (2.0 * static_cast<double>(kEps));
      const double analytic = grad[index];
      EXPECT_NEAR(numeric, analytic, kAbsTolerance + kRelTolerance * std::fabs(analytic))
          << p.name << "[" << e << "]";
      ++checked;
    }
  }
  EXPECT_EQ(checked,
            static_cast<int>(model.params().size()) * (kLargestPerTensor + kRandomPerTensor));
}

// The head's gradient reaches wte through both uses (embedding and tied output head), and pad
// rows get none: checked on wte's rows directly, since they are one tensor to the test above.
TEST(ModelGradTest, PadRowsGetNoGradient) {
  TestContext env(2);
  const ModelConfig c = micro_config();
  Gpt2 model = make_model(c, kMicroBatch, kMicroSeq, 78);
  const size_t n = kMicroBatch * kMicroSeq;
  model.zero_grad();
  ASSERT_TRUE(
      model.forward(random_tokens(n, c.vocab_size, 5), random_tokens(n, c.vocab_size, 6), env.ctx())
          .ok());
  ASSERT_TRUE(model.backward(1.0f, env.ctx()).ok());
  const size_t C = static_cast<size_t>(c.n_embd);
  const std::span<const float> g = model.grad_data();
  for (size_t i = static_cast<size_t>(c.vocab_size) * C;
       i < static_cast<size_t>(c.padded_vocab()) * C; ++i)
    ASSERT_EQ(g[i], 0.0f) << "pad float " << i;
  // Every real row of the head has a gradient (the softmax touches every class).
  for (size_t row = 0; row < static_cast<size_t>(c.vocab_size); ++row) {
    ASSERT_TRUE(std::any_of(g.begin() + row * C, g.begin() + (row + 1) * C,
                            [](float v) { return v != 0.0f; }))
        << "wte row " << row;
  }
}

}  // namespace
}  // namespace kiln::train
