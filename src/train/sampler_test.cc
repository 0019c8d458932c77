// Tests of sampling: greedy and top-k selection, the temperature, determinism for a seed, the
// weights file's config, and generation past the model's block size.
#include <kiln/base/thread_pool.h>
#include <kiln/ckpt/safetensors.h>
#include <kiln/train/sampler.h>

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <vector>

#include "base/testing/temp_path.h"

namespace kiln::train {
namespace {

TEST(TokenSamplerTest, ZeroTemperatureIsArgmaxAndTiesGoToTheLowerId) {
  TokenSampler sampler(5, 0, 0.0f, 1);
  EXPECT_EQ(sampler.next(std::vector<float>{0.1f, 3.0f, -1.0f, 2.9f, 0.0f}), 1u);
  EXPECT_EQ(sampler.next(std::vector<float>{0.0f, 2.0f, 2.0f, 1.0f, 2.0f}), 1u);
}

TEST(TokenSamplerTest, TopOneIsArgmaxWhateverTheSeed) {
  const std::vector<float> logits = {0.5f, 0.4f, 0.6f, 0.59f};
  for (uint64_t seed = 0; seed < 50; ++seed) {
    TokenSampler sampler(4, 1, 1.0f, seed);
    EXPECT_EQ(sampler.next(logits), 2u) << seed;
  }
}

TEST(TokenSamplerTest, TopKDrawsOnlyTheKLargestInSoftmaxProportion) {
  // ids 3 and 1 are the top two; softmax over them: e^1 / (e^1 + e^0) = 0.731.
  const std::vector<float> logits = {-5.0f, 1.0f, -4.0f, 2.0f, 0.5f};
  TokenSampler sampler(5, 2, 1.0f, 42);
  std::map<uint32_t, int> counts;
  constexpr int kDraws = 20000;
  for (int i = 0; i < kDraws; ++i)
    ++counts[sampler.next(logits)];
  EXPECT_EQ(counts.size(), 2u);
  // Binomial standard deviation at n = 20000, p = 0.731 is 0.003; allow five of them.
  EXPECT_NEAR(static_cast<double>(counts[3]) / kDraws, 0.7311, 0.015);
  EXPECT_NEAR(static_cast<double>(counts[1]) / kDraws, 0.2689, 0.015);
}

TEST(TokenSamplerTest, TemperatureSharpensAndFlattens) {
  const std::vector<float> logits = {0.0f, 1.0f};
  auto share_of_1 = [&](float temperature) {
    TokenSampler sampler(2, 0, temperature, 7);
    int ones = 0;
    for (int i = 0; i < 10000; ++i)
      ones += sampler.next(logits) == 1 ? 1 : 0;
    return ones / 10000.0;
  };
  EXPECT_NEAR(share_of_1(1.0f), 0.731, 0.02);   // e / (1 + e)
  EXPECT_NEAR(share_of_1(0.25f), 0.982, 0.01);  // e^4 / (1 + e^4)
  EXPECT_NEAR(share_of_1(100.0f), 0.5025, 0.02);
}

TEST(TokenSamplerTest, PadColumnsAreNeverDrawn) {
  // A padded row: 3 real logits, then pad columns that must never count.
  const std::vector<float> logits = {0.0f, 0.0f, 0.0f, 100.0f, 100.0f};
  TokenSampler sampler(3, 0, 1.0f, 3);
  for (int i = 0; i < 1000; ++i)
    EXPECT_LT(sampler.next(logits), 3u);
}

TEST(TokenSamplerTest, SameSeedSameTokensOtherSeedOthers) {
  std::vector<float> logits(100);
  for (size_t i = 0; i < logits.size(); ++i)
    logits[i] = static_cast<float>(i % 10) * 0.1f;
  auto draw = [&](uint64_t seed) {
    TokenSampler sampler(100, 50, 1.0f, seed);
    std::vector<uint32_t> ids;
    for (int i = 0; i < 64; ++i)
      ids.push_back(sampler.next(logits));
    return ids;
  };
  EXPECT_EQ(draw(5), draw(5));
  EXPECT_NE(draw(5), draw(6));
}

std::string write_weights_with(const std::map<std::string, std::string>& metadata) {
  const std::string path = testing::unique_temp_path("w.safetensors");
  const float one = 1.0f;
  const ckpt::TensorRef t{"x", ckpt::DType::kF32, {1}, &one};
  EXPECT_TRUE(ckpt::write_safetensors(path, {&t, 1}, metadata).ok());
  return path;
}

const std::map<std::string, std::string> kMeta = {{"format", "kiln-gpt2"}, {"n_layer", "2"},
                                                  {"n_head", "4"},         {"n_embd", "64"},
                                                  {"block_size", "128"},   {"vocab_size", "50257"}};

TEST(WeightsConfigTest, ReadsTheModelConfigFromTheMetadata) {
  Result<ModelConfig> c = read_weights_config(write_weights_with(kMeta));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->n_layer, 2);
  EXPECT_EQ(c->n_head, 4);
  EXPECT_EQ(c->n_embd, 64);
  EXPECT_EQ(c->block_size, 128);
  EXPECT_EQ(c->vocab_size, 50257);
}

TEST(WeightsConfigTest, BadMetadataNamesTheFileAndField) {
  auto error_with = [](const std::string& key, const std::string* value) {
    std::map<std::string, std::string> meta = kMeta;
    if (value == nullptr) {
      meta.erase(key);
    } else {
      meta[key] = *value;
    }
    const std::string path = write_weights_with(meta);
    Result<ModelConfig> c = read_weights_config(path);
    EXPECT_FALSE(c.ok()) << key;
    EXPECT_NE(c.status().message().find(path), std::string::npos) << c.status().message();
    return c.ok() ? std::string() : c.status().message();
  };
  const std::string other = "llama", six = "six", zero = "0";
  EXPECT_NE(error_with("format", &other).find("__metadata__.format is 'llama'"), std::string::npos);
  EXPECT_NE(error_with("format", nullptr).find("__metadata__.format is missing"),
            std::string::npos);
  EXPECT_NE(error_with("n_head", &six).find("__metadata__.n_head is 'six', not an integer"),
            std::string::npos);
  EXPECT_NE(error_with("n_embd", nullptr).find("__metadata__.n_embd is missing"),
            std::string::npos);
  EXPECT_NE(error_with("n_layer", &zero).find("n_layer"), std::string::npos);
}

TEST(WeightsConfigTest, NotASafetensorsFileIsAnErrorNamingIt) {
  const std::string path = testing::unique_temp_path("garbage.safetensors");
  std::ofstream(path) << "this is not a weights file at all";
  Result<ModelConfig> c = read_weights_config(path);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find(path), std::string::npos) << c.status().message();
}

TEST(GenerateTest, DeterministicInVocabularyAndSlidesPastTheBlockSize) {
  const ModelConfig config{1, 2, 32, 16, 300};
  Result<Gpt2> model = Gpt2::create(config, 1, config.block_size);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  model->init_weights(11);
  ThreadPool pool(2);
  Result<ops::Context> ctx = ops::make_cpu_context(&pool);
  ASSERT_TRUE(ctx.ok());
  const std::vector<uint32_t> prompt = {1, 2, 3};
  SampleOptions options;
  options.tokens = 30;  // 33 tokens in all: the window slides past block_size 16
  options.top_k = 0;
  options.seed = 9;
  auto run = [&](uint64_t seed) {
    options.seed = seed;
    std::vector<uint32_t> out;
    Status s = generate(&*model, prompt, options, *ctx, [&](uint32_t id) { out.push_back(id); });
    EXPECT_TRUE(s.ok()) << s.to_string();
    return out;
  };
  const std::vector<uint32_t> a = run(9);
  ASSERT_EQ(a.size(), 30u);
  for (uint32_t id : a)
    EXPECT_LT(id, 300u);
  EXPECT_EQ(run(9), a);
  EXPECT_NE(run(10), a);
}

}  // namespace
}  // namespace kiln::train
