// Tests of save_weights / load_weights: an exact round trip in the contract's format (names,
// shapes, F32, metadata), and strict loading: a wrong shape, dtype, missing or extra tensor, or
// a config mismatch is an error naming the file and the tensor, leaving the parameters as they
// were.
#include <kiln/train/model.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <kiln/ckpt/safetensors.h>

#include "ops/ref/ref.h"

#include "base/testing/temp_path.h"
#include "train/model_test_util.h"

namespace kiln::train {
namespace {

using testing::kMicroBatch;
using testing::kMicroSeq;
using testing::make_model;
using testing::micro_config;
using testing::random_tokens;
using testing::TestContext;

class ModelIoTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = kiln::testing::unique_temp_dir("weights"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // The model's tensors as TensorRefs, in export order, for hand-made files.
  static std::vector<ckpt::TensorRef> refs(const Gpt2& model) {
    std::vector<ckpt::TensorRef> out;
    for (const ParamInfo& p : model.params())
      out.push_back({p.name, ckpt::DType::kF32, p.shape, model.param_data().data() + p.offset});
    return out;
  }

  // Loading `path` into a fresh model fails with a message naming the file and `mention`, and
  // leaves the parameters as they were.
  void expect_load_error(const std::string& path, const std::string& mention) {
    Gpt2 model = make_model(micro_config(), 1, 1, 99);
    const std::vector<float> before(model.param_data().begin(), model.param_data().end());
    Status st = load_weights(&model, path);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(mention), std::string::npos) << st.message();
    EXPECT_EQ(std::memcmp(before.data(), model.param_data().data(), before.size() * 4), 0)
        << "a failed load changed the parameters";
  }

  std::string dir_;
};

TEST_F(ModelIoTest, RoundTripIsExactInTheContractFormat) {
  TestContext env(2);
  const ModelConfig c = micro_config();
  Gpt2 trained = make_model(c, kMicroBatch, kMicroSeq, 1);
  const size_t n = kMicroBatch * kMicroSeq;
  for (int step = 1; step <= 2; ++step) {  // weights that are not just the init
    trained.zero_grad();
    ASSERT_TRUE(trained
                    .forward(random_tokens(n, c.vocab_size, step),
                             random_tokens(n, c.vocab_size, step + 10), env.ctx())
                    .ok());
    ASSERT_TRUE(trained.backward(1.0f, env.ctx()).ok());
    ASSERT_TRUE(trained.adamw_step(AdamWConfig{}, 1e-3f, step, 1.0f, env.ctx()).ok());
  }
  const std::string path = dir_ + "/w.safetensors";
  ASSERT_TRUE(save_weights(trained, path).ok());

  Result<ckpt::SafetensorsFile> file = ckpt::SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  const std::map<std::string, std::string> meta = {{"format", "kiln-gpt2"}, {"n_layer", "2"},
                                                   {"n_head", "2"},         {"n_embd", "32"},
                                                   {"block_size", "16"},    {"vocab_size", "67"}};
  EXPECT_EQ(file->metadata(), meta);
  ASSERT_EQ(file->tensors().size(), trained.params().size());
  for (size_t i = 0; i < trained.params().size(); ++i) {
    const ParamInfo& p = trained.params()[i];
    const ckpt::TensorEntry& e = file->tensors()[i];
    EXPECT_EQ(e.name, p.name);
    EXPECT_EQ(e.dtype, ckpt::DType::kF32);
    EXPECT_EQ(e.shape, p.shape);
  }
  ASSERT_TRUE(file->get("wte.weight").ok());
  EXPECT_EQ(file->get("wte.weight")->shape, (std::vector<int64_t>{67, 32}));  // no pad rows

  Gpt2 loaded = make_model(c, 1, 1, 2);  // other weights, other (batch, seq)
  Status st = load_weights(&loaded, path);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(loaded.param_data().size(), trained.param_data().size());
  EXPECT_EQ(std::memcmp(loaded.param_data().data(), trained.param_data().data(),
                        trained.param_data().size_bytes()),
            0);
}

// BF16 export: every tensor BF16, each value the reference's round-to-nearest-even of the f32
// parameter (half the bytes); loading it back widens exactly, so a load and a BF16 save give the
// same file again. A file may mix nothing else: BF16 and F32 are the two dtypes a load accepts.
TEST_F(ModelIoTest, Bf16ExportRoundsEveryValueAndLoadsBackExactly) {
  const ModelConfig c = micro_config();
  Gpt2 model = make_model(c, 1, 1, 5);
  const std::string path = dir_ + "/w16.safetensors";
  ASSERT_TRUE(save_weights(model, path, Precision::kBf16).ok());
  Result<ckpt::SafetensorsFile> file = ckpt::SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  ASSERT_EQ(file->tensors().size(), model.params().size());
  const std::span<const float> params = std::as_const(model).param_data();
  std::vector<float> widened(params.size(), 0.0f);
  for (size_t i = 0; i < model.params().size(); ++i) {
    const ParamInfo& p = model.params()[i];
    const ckpt::TensorEntry& e = file->tensors()[i];
    ASSERT_EQ(e.dtype, ckpt::DType::kBF16) << p.name;
    ASSERT_EQ(e.bytes.size(), p.numel * 2) << p.name;
    std::vector<uint16_t> want(p.numel), got(p.numel);
    std::memcpy(got.data(), e.bytes.data(), e.bytes.size());
    ASSERT_TRUE(
        ops::ref::convert_f32_to_bf16(
            ops::TensorView::f32(const_cast<float*>(params.data() + p.offset),
                                 {static_cast<int64_t>(p.numel)}),
            ops::TensorView::of(want.data(), ops::DType::kBF16, {static_cast<int64_t>(p.numel)}))
            .ok());
    ASSERT_EQ(got, want) << p.name;
    ASSERT_TRUE(
        ops::ref::convert_bf16_to_f32(
            ops::TensorView::of(want.data(), ops::DType::kBF16, {static_cast<int64_t>(p.numel)}),
            ops::TensorView::f32(widened.data() + p.offset, {static_cast<int64_t>(p.numel)}))
            .ok());
  }
  Gpt2 loaded = make_model(c, 1, 1, 6);
  ASSERT_TRUE(load_weights(&loaded, path).ok());
  EXPECT_EQ(std::memcmp(std::as_const(loaded).param_data().data(), widened.data(),
                        widened.size() * sizeof(float)),
            0);
  const std::string again = dir_ + "/again.safetensors";
  ASSERT_TRUE(save_weights(loaded, again, Precision::kBf16).ok());
  Result<ckpt::SafetensorsFile> second = ckpt::SafetensorsFile::open(again);
  ASSERT_TRUE(second.ok());
  for (size_t i = 0; i < file->tensors().size(); ++i) {
    const auto& a = file->tensors()[i].bytes;
    const auto& b = second->tensors()[i].bytes;
    ASSERT_TRUE(a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0) << i;
  }
}

TEST_F(ModelIoTest, WrongShapeNamesFileAndTensor) {
  Gpt2 model = make_model(micro_config(), 1, 1, 3);
  std::vector<ckpt::TensorRef> tensors = refs(model);
  // Same number of floats, transposed shape: only the shape check can catch it.
  for (ckpt::TensorRef& t : tensors) {
    if (t.name == "h.1.mlp.fc.weight") t.shape = {32, 128};
  }
  const std::string path = dir_ + "/shape.safetensors";
  ASSERT_TRUE(ckpt::write_safetensors(path, tensors).ok());
  expect_load_error(path, "tensor h.1.mlp.fc.weight has shape [32,128], the model needs [128,32]");
}

TEST_F(ModelIoTest, WrongDtypeMissingAndExtraTensorsAreErrors) {
  Gpt2 model = make_model(micro_config(), 1, 1, 3);
  {
    std::vector<ckpt::TensorRef> tensors = refs(model);
    tensors[3].dtype = ckpt::DType::kI32;  // h.0.ln_1.bias, same bytes
    const std::string path = dir_ + "/dtype.safetensors";
    ASSERT_TRUE(ckpt::write_safetensors(path, tensors).ok());
    expect_load_error(path, "tensor h.0.ln_1.bias has dtype I32");
  }
  {
    std::vector<ckpt::TensorRef> tensors = refs(model);
    tensors.pop_back();  // ln_f.bias
    const std::string path = dir_ + "/missing.safetensors";
    ASSERT_TRUE(ckpt::write_safetensors(path, tensors).ok());
    expect_load_error(path, "ln_f.bias");
  }
  {
    std::vector<ckpt::TensorRef> tensors = refs(model);
    const float extra[4] = {};
    tensors.push_back({"lm_head.weight", ckpt::DType::kF32, {4}, extra});
    const std::string path = dir_ + "/extra.safetensors";
    ASSERT_TRUE(ckpt::write_safetensors(path, tensors).ok());
    expect_load_error(path, "tensor lm_head.weight is not a parameter");
  }
}

TEST_F(ModelIoTest, ConfigMismatchIsAnError) {
  // Same shapes, other head count: only the metadata tells.
  Gpt2 model = make_model(micro_config(), 1, 1, 3);
  const std::string path = dir_ + "/heads.safetensors";
  ASSERT_TRUE(ckpt::write_safetensors(path, refs(model), {{"n_head", "4"}}).ok());
  expect_load_error(path, "metadata n_head is \"4\", the model has \"2\"");

  // A deeper model's file: its extra block is not a parameter here.
  ModelConfig deeper = micro_config();
  deeper.n_layer = 3;
  Gpt2 other = make_model(deeper, 1, 1, 3);
  const std::string deep_path = dir_ + "/deep.safetensors";
  ASSERT_TRUE(save_weights(other, deep_path).ok());
  expect_load_error(deep_path, "n_layer");

  expect_load_error(dir_ + "/absent.safetensors", "absent.safetensors");
}

}  // namespace
}  // namespace kiln::train
