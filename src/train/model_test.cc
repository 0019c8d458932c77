// Tests of Gpt2's contract (include/kiln/train/model.h) apart from the gradient check
// (model_grad_test.cc), the export (model_io_test.cc) and allocations (model_alloc_test.cc):
// the arena layout in export order, initialisation, the loss at init, gradient accumulation,
// the block_done hook, overfitting one batch, bitwise determinism, logits-only forwards, errors.
#include <kiln/train/model.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "train/model_test_util.h"

namespace kiln::train {
namespace {

using testing::kMicroBatch;
using testing::kMicroSeq;
using testing::make_model;
using testing::micro_config;
using testing::random_tokens;
using testing::TestContext;

// The tiny config of configs/tiny.yaml (GPT-2's vocabulary).
ModelConfig tiny_config() {
  ModelConfig c;
  c.n_layer = 6;
  c.n_head = 6;
  c.n_embd = 384;
  c.block_size = 256;
  c.vocab_size = 50257;
  return c;
}

// The export names in the contract's order, spelled out independently of the model's code.
std::vector<std::string> expected_names(int n_layer) {
  std::vector<std::string> names = {"wte.weight", "wpe.weight"};
  for (int i = 0; i < n_layer; ++i) {
    for (const char* suffix :
         {"ln_1.weight", "ln_1.bias", "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight",
          "attn.proj.bias", "ln_2.weight", "ln_2.bias", "mlp.fc.weight", "mlp.fc.bias",
          "mlp.proj.weight", "mlp.proj.bias"}) {
      names.push_back("h." + std::to_string(i) + "." + suffix);
    }
  }
  names.push_back("ln_f.weight");
  names.push_back("ln_f.bias");
  return names;
}

// One training step on (tokens, targets) with the trainer's default AdamW.
void train_step(Gpt2* model, const std::vector<int32_t>& tokens,
                const std::vector<int32_t>& targets, int64_t step, float lr,
                const ops::Context& ctx, float* loss = nullptr) {
  model->zero_grad();
  Result<float> l = model->forward(tokens, targets, ctx);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  if (loss != nullptr) *loss = *l;
  ASSERT_TRUE(model->backward(1.0f, ctx).ok());
  ASSERT_TRUE(model->adamw_step(AdamWConfig{}, lr, step, 1.0f, ctx).ok());
}

TEST(ModelConfigTest, PaddedVocabAndValidation) {
  ModelConfig c = tiny_config();
  EXPECT_EQ(c.padded_vocab(), 50304);
  c.vocab_size = 128;
  EXPECT_EQ(c.padded_vocab(), 128);
  EXPECT_TRUE(micro_config().validate().ok());
  ModelConfig bad = micro_config();
  bad.n_head = 3;  // 32 is not a multiple of 3
  Status st = bad.validate();
  EXPECT_TRUE(st.is_invalid_argument());
  EXPECT_NE(st.message().find("n_head 3"), std::string::npos) << st.message();
  bad = micro_config();
  bad.n_layer = 0;
  EXPECT_NE(bad.validate().message().find("n_layer is 0"), std::string::npos);
  Result<Gpt2> too_long = Gpt2::create(micro_config(), 1, micro_config().block_size + 1);
  ASSERT_FALSE(too_long.ok());
  EXPECT_TRUE(too_long.status().is_invalid_argument());
}

TEST(ModelLayoutTest, ExportOrderShapesAlignmentAndDecay) {
  const ModelConfig c = micro_config();
  Gpt2 model = make_model(c, 1, 1, 1);
  const std::vector<ParamInfo>& params = model.params();
  const std::vector<std::string> names = expected_names(c.n_layer);
  ASSERT_EQ(params.size(), names.size());
  const int64_t C = c.n_embd;
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamInfo& p = params[i];
    EXPECT_EQ(p.name, names[i]);
    EXPECT_EQ(p.offset % 16, 0u) << p.name << ": not 64-byte aligned";
    size_t numel = 1;
    for (int64_t d : p.shape)
      numel *= static_cast<size_t>(d);
    EXPECT_EQ(p.numel, numel) << p.name;
    EXPECT_EQ(p.decay, p.shape.size() == 2) << p.name << ": decay is for 2-D weights only";
    if (i + 1 < params.size()) {
      EXPECT_LE(p.offset + p.numel, params[i + 1].offset) << p.name;
    }
  }
  EXPECT_EQ(params[0].shape, (std::vector<int64_t>{c.vocab_size, C}));
  EXPECT_EQ(params[1].shape, (std::vector<int64_t>{c.block_size, C}));
  EXPECT_EQ(params[4].shape, (std::vector<int64_t>{3 * C, C}));   // h.0.attn.qkv.weight
  EXPECT_EQ(params[10].shape, (std::vector<int64_t>{4 * C, C}));  // h.0.mlp.fc.weight
  EXPECT_EQ(params[12].shape, (std::vector<int64_t>{C, 4 * C}));  // h.0.mlp.proj.weight
  // wte's pad rows lie between it and wpe: the head's (Vp, C) matrix is one block.
  EXPECT_GE(params[1].offset, static_cast<size_t>(c.padded_vocab() * C));
  EXPECT_EQ(model.param_data().size(), model.grad_data().size());
  EXPECT_EQ(model.param_data().size(), model.adam_m().size());
  EXPECT_EQ(model.param_data().size(), model.adam_v().size());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(model.param_data().data()) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(model.grad_data().data()) % 64, 0u);
}

// A ZeRO-1 rank's model allocates moment arenas of its share only; the whole-arena AdamW step
// refuses them (they do not cover the parameters).
TEST(ModelLayoutTest, MomentArenasCanBeAShare) {
  const ModelConfig c = micro_config();
  const size_t total = Gpt2::arena_floats(c);
  Result<Gpt2> whole = Gpt2::create(c, 1, 1);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->param_data().size(), total);
  EXPECT_EQ(whole->adam_m().size(), total);
  Result<Gpt2> share = Gpt2::create(c, 1, 1, MomentArenas::share(total / 2 + 1));
  ASSERT_TRUE(share.ok()) << share.status().to_string();
  EXPECT_EQ(share->param_data().size(), total);
  EXPECT_EQ(share->grad_data().size(), total);
  EXPECT_EQ(share->adam_m().size(), total / 2 + 1);
  EXPECT_EQ(share->adam_v().size(), total / 2 + 1);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(share->adam_m().data()) % 64, 0u);
  Result<Gpt2> too_big = Gpt2::create(c, 1, 1, MomentArenas::share(total + 1));
  ASSERT_FALSE(too_big.ok());
  EXPECT_TRUE(too_big.status().is_invalid_argument());
  EXPECT_NE(too_big.status().message().find("larger than the parameter arena"), std::string::npos)
      << too_big.status().message();
  const ops::Context ctx;
  EXPECT_DEATH((void)share->adamw_step(AdamWConfig{}, 1e-3f, 1, 1.0f, ctx),
               "needs whole moment arenas");
}

TEST(ModelLayoutTest, TinyParamCountIsGpt2Formula) {
  // 12 L C^2 + 13 L C + V C + block_size C + 2 C for L = 6, C = 384, V = 50257, block 256.
  Result<Gpt2> model = Gpt2::create(tiny_config(), 1, 1);
  ASSERT_TRUE(model.ok());
  EXPECT_EQ(model->num_params(), 30044544u);
  // flops_per_token = 6 N + 6 L C T (llm.c).
  EXPECT_DOUBLE_EQ(model->flops_per_token(256), 6.0 * 30044544 + 6.0 * 6 * 384 * 256);
}

TEST(ModelLayoutTest, BlockRangesPartitionTheArenaInBackwardOrder) {
  const ModelConfig c = micro_config();
  Gpt2 model = make_model(c, 1, 1, 1);
  size_t end = model.param_data().size();
  for (int block = c.n_layer - 1; block >= -1; --block) {
    const BlockRange r = model.block_range(block);
    EXPECT_EQ(r.offset + r.count, end) << "block " << block;
    end = r.offset;
  }
  EXPECT_EQ(end, 0u);
  // Every parameter lies in its block's range: h.<l>.* in l, ln_f in the last, embeddings in -1.
  for (const ParamInfo& p : model.params()) {
    int block = -1;
    if (p.name.rfind("h.", 0) == 0) block = std::stoi(p.name.substr(2));
    if (p.name.rfind("ln_f.", 0) == 0) block = c.n_layer - 1;
    const BlockRange r = model.block_range(block);
    EXPECT_GE(p.offset, r.offset) << p.name;
    EXPECT_LE(p.offset + p.numel, r.offset + r.count) << p.name;
  }
}

// Sample standard deviation of a tensor.
double stddev(const float* x, size_t n) {
  double sum = 0, sq = 0;
  for (size_t i = 0; i < n; ++i) {
    sum += x[i];
    sq += static_cast<double>(x[i]) * x[i];
  }
  const double mean = sum / static_cast<double>(n);
  return std::sqrt(sq / static_cast<double>(n) - mean * mean);
}

TEST(ModelInitTest, Gpt2InitAndPadRows) {
  const ModelConfig c = micro_config();
  Gpt2 model = make_model(c, 1, 1, 7);
  const float* data = model.param_data().data();
  const double proj_std = 0.02 / std::sqrt(2.0 * c.n_layer);
  for (const ParamInfo& p : model.params()) {
    const float* x = data + p.offset;
    if (p.name.find("ln_") != std::string::npos && p.name.ends_with(".weight")) {
      EXPECT_TRUE(std::all_of(x, x + p.numel, [](float v) { return v == 1.0f; })) << p.name;
    } else if (p.shape.size() == 1) {
      EXPECT_TRUE(std::all_of(x, x + p.numel, [](float v) { return v == 0.0f; })) << p.name;
    } else {
      const bool proj = p.name.ends_with("proj.weight");
      // >= 2144 samples: the sample std is within 10% of the true one with overwhelming odds.
      EXPECT_NEAR(stddev(x, p.numel), proj ? proj_std : 0.02, (proj ? proj_std : 0.02) * 0.1)
          << p.name;
    }
  }
  // wte's pad rows (V..Vp) are zero.
  const size_t C = static_cast<size_t>(c.n_embd);
  const float* pad = data + static_cast<size_t>(c.vocab_size) * C;
  const size_t pad_floats = static_cast<size_t>(c.padded_vocab() - c.vocab_size) * C;
  EXPECT_TRUE(std::all_of(pad, pad + pad_floats, [](float v) { return v == 0.0f; }));
}

TEST(ModelInitTest, SameSeedSameBitsOtherSeedOtherBits) {
  Gpt2 a = make_model(micro_config(), 1, 1, 42);
  Gpt2 b = make_model(micro_config(), 1, 1, 42);
  Gpt2 c = make_model(micro_config(), 1, 1, 43);
  EXPECT_EQ(std::memcmp(a.param_data().data(), b.param_data().data(), a.param_data().size_bytes()),
            0);
  EXPECT_NE(std::memcmp(a.param_data().data(), c.param_data().data(), a.param_data().size_bytes()),
            0);
}

TEST(ModelForwardTest, LossAtInitIsNearLnVocab) {
  // At init the logits are nearly uniform: std s = 0.02 * sqrt(C) = 0.39 (wte rows dotted with
  // ln_f's unit-variance output), which raises the expected loss by about s^2 / 2 = 0.077 above
  // ln(50257) = 10.825. The per-row loss varies by about s, so the mean over 128 rows by about
  // 0.035: the bound 0.15 is 4 of those (measured: 10.87-10.94 over seeds). A wrong scale
  // anywhere (init, LayerNorm, the head, the mean) moves the loss by far more.
  TestContext env(2);
  const ModelConfig c = tiny_config();
  constexpr int kBatch = 2, kSeq = 64;
  Gpt2 model = make_model(c, kBatch, kSeq, 1337);
  const auto tokens = random_tokens(kBatch * kSeq, c.vocab_size, 1);
  const auto targets = random_tokens(kBatch * kSeq, c.vocab_size, 2);
  Result<float> loss = model.forward(tokens, targets, env.ctx());
  ASSERT_TRUE(loss.ok()) << loss.status().to_string();
  const double s2 = 0.02 * 0.02 * c.n_embd;
  EXPECT_NEAR(*loss, std::log(50257.0) + s2 / 2, 0.15);
  // Pad logits are exactly zero (zero pad rows of wte).
  const std::span<const float> logits = model.logits();
  ASSERT_EQ(logits.size(), static_cast<size_t>(kBatch * kSeq) * 50304);
  for (size_t v = 50257; v < 50304; ++v)
    EXPECT_EQ(logits[v], 0.0f);
}

TEST(ModelBackwardTest, AccumulatingTwoHalvesEqualsOneWhole) {
  TestContext env(2);
  const ModelConfig c = micro_config();
  Gpt2 model = make_model(c, kMicroBatch, kMicroSeq, 5);
  const size_t n = kMicroBatch * kMicroSeq;
  const auto tokens = random_tokens(n, c.vocab_size, 11);
  const auto targets = random_tokens(n, c.vocab_size, 12);

  model.zero_grad();
  ASSERT_TRUE(model.forward(tokens, targets, env.ctx()).ok());
  ASSERT_TRUE(model.backward(1.0f, env.ctx()).ok());
  const std::vector<float> whole(model.grad_data().begin(), model.grad_data().end());

  model.zero_grad();
  for (int micro = 0; micro < 2; ++micro) {
    ASSERT_TRUE(model.forward(tokens, targets, env.ctx()).ok());
    ASSERT_TRUE(model.backward(0.5f, env.ctx()).ok());
  }
  const std::span<const float> halves = model.grad_data();
  float max_abs = 0;
  for (float g : whole)
    max_abs = std::max(max_abs, std::fabs(g));
  ASSERT_GT(max_abs, 0.0f);
  // Scaling by 0.5 is exact in binary floating point, so the two halves should sum to the whole
  // up to the rounding of the accumulation: a few ulps of the largest gradient.
  for (size_t i = 0; i < whole.size(); ++i)
    ASSERT_NEAR(halves[i], whole[i], 1e-6f * max_abs) << "element " << i;
}

TEST(ModelBackwardTest, ZeroGradOnThePoolClearsEveryGradient) {
  // A vocabulary of 20,000 makes the arena (wte alone 640,000 floats) several of zero_grad's
  // 1 MiB chunks, with a partial last one, so the pool's threads share it.
  TestContext env(3);
  ModelConfig c = micro_config();
  c.vocab_size = 20000;
  Gpt2 model = make_model(c, kMicroBatch, kMicroSeq, 5);
  const std::span<float> grads = model.grad_data();
  ASSERT_GT(grads.size(), size_t{2} << 18);         // three chunks or more
  ASSERT_NE(grads.size() % (size_t{1} << 18), 0u);  // the last of them partial
  for (size_t i = 0; i < grads.size(); ++i)
    grads[i] = static_cast<float>(i % 7) + 1.0f;
  model.zero_grad(env.ctx());
  for (size_t i = 0; i < grads.size(); ++i)
    ASSERT_EQ(grads[i], 0.0f) << "element " << i << " of " << grads.size();
}

TEST(ModelBackwardTest, BlockDoneFiresInOrderWhenTheRangeIsFinal) {
  TestContext env(2);
  const ModelConfig c = micro_config();
  Gpt2 model = make_model(c, kMicroBatch, kMicroSeq, 5);
  const size_t n = kMicroBatch * kMicroSeq;
  const auto tokens = random_tokens(n, c.vocab_size, 21);
  const auto targets = random_tokens(n, c.vocab_size, 22);
  model.zero_grad();
  ASSERT_TRUE(model.forward(tokens, targets, env.ctx()).ok());

  std::vector<int> order;
  std::vector<std::vector<float>> at_call;  // each range's gradients when its hook fired
  bool next_untouched = true;               // the next range was still zero at each call
  const std::span<const float> grads = model.grad_data();
  ASSERT_TRUE(model
                  .backward(1.0f, env.ctx(),
                            [&](int block) {
                              order.push_back(block);
                              const BlockRange r = model.block_range(block);
                              at_call.emplace_back(grads.begin() + r.offset,
                                                   grads.begin() + r.offset + r.count);
                              if (block >= 1) {  // block - 1 is not done: its range is still 0
                                const BlockRange next = model.block_range(block - 1);
                                next_untouched &=
                                    std::all_of(grads.begin() + next.offset,
                                                grads.begin() + next.offset + next.count,
                                                [](float g) { return g == 0.0f; });
                              }
                            })
                  .ok());
  std::vector<int> expected;
  for (int l = c.n_layer - 1; l >= -1; --l)
    expected.push_back(l);
  EXPECT_EQ(order, expected);
  EXPECT_TRUE(next_untouched) << "a hook fired after the next block had already started";
  for (size_t i = 0; i < order.size(); ++i) {
    const BlockRange r = model.block_range(order[i]);
    EXPECT_EQ(std::memcmp(at_call[i].data(), grads.data() + r.offset, r.count * sizeof(float)), 0)
        << "block " << order[i] << "'s gradients changed after its block_done";
    EXPECT_TRUE(std::any_of(at_call[i].begin(), at_call[i].end(), [](float g) { return g != 0; }))
        << "block " << order[i] << "'s gradients were still zero at its block_done";
  }
}

TEST(ModelTrainTest, OverfitsOneBatch) {
  TestContext env(2);
  const ModelConfig c = micro_config();
  Gpt2 model = make_model(c, kMicroBatch, kMicroSeq, 3);
  const size_t n = kMicroBatch * kMicroSeq;
  const auto tokens = random_tokens(n, c.vocab_size, 31);
  const auto targets = random_tokens(n, c.vocab_size, 32);
  float first = 0, last = 0;
  // 16 random targets over 67 classes: memorising them takes the loss from ln(67) = 4.2 towards
  // 0. 60 AdamW steps at lr 1e-2 get far below a fifth of the start (measured: 0.002).
  for (int step = 1; step <= 60; ++step) {
    float loss = 0;
    train_step(&model, tokens, targets, step, 1e-2f, env.ctx(), &loss);
    if (step == 1) first = loss;
    last = loss;
  }
  EXPECT_NEAR(first, std::log(67.0), 0.1);
  EXPECT_LT(last, first * 0.2f) << "first " << first << ", last " << last;
}

TEST(ModelTrainTest, SameSeedSameBitsAfterThreeSteps) {
  const ModelConfig c = micro_config();
  const size_t n = kMicroBatch * kMicroSeq;
  std::vector<std::vector<float>> finals;
  for (int run = 0; run < 2; ++run) {
    TestContext env(2);
    Gpt2 model = make_model(c, kMicroBatch, kMicroSeq, 1337);
    for (int step = 1; step <= 3; ++step) {
      const auto tokens = random_tokens(n, c.vocab_size, 100 + step);
      const auto targets = random_tokens(n, c.vocab_size, 200 + step);
      train_step(&model, tokens, targets, step, 6e-4f, env.ctx());
    }
    finals.emplace_back(model.param_data().begin(), model.param_data().end());
    // The pad rows of wte are still zero after training.
    const size_t C = static_cast<size_t>(c.n_embd);
    for (size_t i = static_cast<size_t>(c.vocab_size) * C;
         i < static_cast<size_t>(c.padded_vocab()) * C; ++i) {
      ASSERT_EQ(model.param_data()[i], 0.0f) << "pad float " << i;
      ASSERT_EQ(model.adam_m()[i], 0.0f) << "pad float " << i;
    }
  }
  EXPECT_EQ(std::memcmp(finals[0].data(), finals[1].data(), finals[0].size() * sizeof(float)), 0);
}

TEST(ModelForwardTest, LogitsOnlyPrefixMatchesTheFullForward) {
  TestContext env(2);
  const ModelConfig c = micro_config();
  Gpt2 model = make_model(c, kMicroBatch, kMicroSeq, 9);
  const size_t n = kMicroBatch * kMicroSeq;
  const auto tokens = random_tokens(n, c.vocab_size, 41);
  ASSERT_TRUE(model.forward(tokens, {}, env.ctx()).ok());
  const std::vector<float> full(model.logits().begin(), model.logits().end());
  // Causal attention: the first 5 tokens of row 0 give the same logits alone.
  constexpr int kPrefix = 5;
  const size_t vp = static_cast<size_t>(c.padded_vocab());
  ASSERT_TRUE(
      model.forward_logits(std::span<const int32_t>(tokens.data(), kPrefix), 1, kPrefix, env.ctx())
          .ok());
  ASSERT_EQ(model.logits().size(), kPrefix * vp);
  for (size_t i = 0; i < kPrefix * vp; ++i)
    ASSERT_NEAR(model.logits()[i], full[i], 1e-5f) << "element " << i;
  // A logits-only forward cannot be followed by a backward.
  Status st = model.backward(1.0f, env.ctx());
  EXPECT_TRUE(st.is_invalid_argument()) << st.to_string();
  // Larger than create()'s rows, or longer than block_size: rejected.
  std::vector<int32_t> many(n + 1, 0);
  EXPECT_TRUE(
      model.forward_logits(many, 1, static_cast<int>(n + 1), env.ctx()).is_invalid_argument());
}

TEST(ModelErrorsTest, BadIdsSizesAndOrderAreErrors) {
  TestContext env(2);
  const ModelConfig c = micro_config();
  Gpt2 model = make_model(c, kMicroBatch, kMicroSeq, 9);
  const size_t n = kMicroBatch * kMicroSeq;
  auto tokens = random_tokens(n, c.vocab_size, 51);
  const auto targets = random_tokens(n, c.vocab_size, 52);

  Status st = model.backward(1.0f, env.ctx());  // no forward yet
  EXPECT_TRUE(st.is_invalid_argument());

  Result<float> loss =
      model.forward(std::span<const int32_t>(tokens.data(), n - 1), targets, env.ctx());
  ASSERT_FALSE(loss.ok());
  EXPECT_NE(loss.status().message().find("tokens has 15 ids"), std::string::npos)
      << loss.status().message();

  tokens[3] = c.vocab_size;  // one past the vocabulary, at row 0, position 3
  loss = model.forward(tokens, targets, env.ctx());
  ASSERT_FALSE(loss.ok());
  EXPECT_TRUE(loss.status().is_invalid_argument());
  EXPECT_NE(loss.status().message().find("tokens[0,3] = 67"), std::string::npos)
      << loss.status().message();

  tokens[3] = 0;
  ASSERT_TRUE(model.forward(tokens, targets, env.ctx()).ok());
  ASSERT_TRUE(model.backward(1.0f, env.ctx()).ok());
  // The logits now hold their gradient: a second backward needs a new forward.
  EXPECT_TRUE(model.backward(1.0f, env.ctx()).is_invalid_argument());
}

}  // namespace
}  // namespace kiln::train
