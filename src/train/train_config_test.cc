// Tests of the trainer's config: the shipped configs load, every rule names file:line:key, and
// flag overrides are range-checked under their flag's name.
#include <kiln/train/train_config.h>

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "base/testing/temp_path.h"

namespace kiln::train {
namespace {

// The contract's tiny.yaml in block style, so each key sits on a known line.
constexpr const char* kGood = R"(model:
  n_layer: 2
  n_head: 4
  n_embd: 64
  block_size: 128
  vocab_size: 50257
data:
  train: data/sotu/train
  val: data/sotu/val
train:
  batch: 4
  seq: 64
  lr: 0.001
  min_lr: 0.0001
  beta2: 0.99
  seed: 7
)";

std::string write_config(const std::string& text, const std::string& name = "config.yaml") {
  const std::string path = testing::unique_temp_path(name);
  std::ofstream(path) << text;
  return path;
}

// kGood with `from` (a whole line) replaced by `to`.
std::string edited(const std::string& from, const std::string& to) {
  std::string text = kGood;
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

Status load_error(const std::string& text) {
  Result<TrainConfig> c = load_train_config(write_config(text));
  return c.ok() ? Status() : c.status();
}

TEST(TrainConfigTest, ReadsEveryKeyAndDefaultsTheRest) {
  Result<TrainConfig> c = load_train_config(write_config(kGood));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->model.n_layer, 2);
  EXPECT_EQ(c->model.n_head, 4);
  EXPECT_EQ(c->model.n_embd, 64);
  EXPECT_EQ(c->model.block_size, 128);
  EXPECT_EQ(c->model.vocab_size, 50257);
  EXPECT_EQ(c->data.train, "data/sotu/train");
  EXPECT_EQ(c->data.val, "data/sotu/val");
  EXPECT_EQ(c->train.batch, 4);
  EXPECT_EQ(c->train.seq, 64);
  EXPECT_DOUBLE_EQ(c->train.lr, 0.001);
  EXPECT_DOUBLE_EQ(c->train.min_lr, 0.0001);
  EXPECT_DOUBLE_EQ(c->train.beta2, 0.99);
  EXPECT_EQ(c->train.seed, 7u);
  const TrainHyperparams defaults;
  EXPECT_EQ(c->train.grad_accum, defaults.grad_accum);
  EXPECT_EQ(c->train.max_steps, defaults.max_steps);
  EXPECT_EQ(c->train.threads, defaults.threads);
  EXPECT_DOUBLE_EQ(c->train.beta1, defaults.beta1);
  EXPECT_TRUE(c->overridden.empty());
}

TEST(TrainConfigTest, ShippedConfigsLoad) {
  Result<TrainConfig> tiny = load_train_config(KILN_SOURCE_DIR "/configs/tiny.yaml");
  ASSERT_TRUE(tiny.ok()) << tiny.status().to_string();
  EXPECT_EQ(tiny->model.n_layer, 6);
  EXPECT_EQ(tiny->model.n_embd, 384);
  EXPECT_EQ(tiny->train.batch, 8);
  EXPECT_EQ(tiny->train.max_steps, 300);
  EXPECT_EQ(tiny->train.warmup_steps, 30);
  EXPECT_EQ(tiny->train.seed, 1337u);
  EXPECT_DOUBLE_EQ(tiny->train.eps, 1e-8);
  Result<TrainConfig> gpt2 = load_train_config(KILN_SOURCE_DIR "/configs/gpt2-124m.yaml");
  ASSERT_TRUE(gpt2.ok()) << gpt2.status().to_string();
  EXPECT_EQ(gpt2->model.n_layer, 12);
  EXPECT_EQ(gpt2->model.n_head, 12);
  EXPECT_EQ(gpt2->model.n_embd, 768);
  EXPECT_EQ(gpt2->model.block_size, 1024);
  EXPECT_EQ(gpt2->train.batch, 1);
  EXPECT_EQ(gpt2->train.seq, 1024);
}

TEST(TrainConfigTest, MissingFileIsNotFoundNamingIt) {
  Result<TrainConfig> c = load_train_config("/nonexistent/kiln.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(c.status().is_not_found()) << c.status().to_string();
  EXPECT_NE(c.status().message().find("/nonexistent/kiln.yaml"), std::string::npos);
}

TEST(TrainConfigTest, UnknownKeyNamesFileLineAndKey) {
  const std::string path = write_config(edited("  n_layer: 2", "  n_layr: 2"));
  Result<TrainConfig> c = load_train_config(path);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(c.status().is_invalid_argument());
  EXPECT_NE(c.status().message().find(path + ":2:3: key 'model.n_layr': unknown key"),
            std::string::npos)
      << c.status().message();
  // And the real key is now missing.
  EXPECT_NE(c.status().message().find("key 'model.n_layer': required key is missing"),
            std::string::npos)
      << c.status().message();
}

TEST(TrainConfigTest, WrongTypeAndRangeNameTheirLines) {
  std::string text = edited("  n_head: 4", "  n_head: four");
  text.replace(text.find("  batch: 4"), 10, "  batch: 0");
  const std::string path = write_config(text);
  Result<TrainConfig> c = load_train_config(path);
  ASSERT_FALSE(c.ok());
  const std::string msg = c.status().message();
  EXPECT_NE(msg.find(path + ":3:11: key 'model.n_head'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path + ":11:10: key 'train.batch': 0 is out of range"), std::string::npos)
      << msg;
}

TEST(TrainConfigTest, SeqBeyondBlockSizeIsOutOfRange) {
  const Status s = load_error(edited("  seq: 64", "  seq: 256"));
  EXPECT_NE(s.message().find(":12:8: key 'train.seq': 256 is out of range [1, 128]"),
            std::string::npos)
      << s.message();
}

TEST(TrainConfigTest, MinLrAboveLrIsOutOfRange) {
  const Status s = load_error(edited("  min_lr: 0.0001", "  min_lr: 0.01"));
  EXPECT_NE(s.message().find(":14:11: key 'train.min_lr'"), std::string::npos) << s.message();
}

TEST(TrainConfigTest, RulesAcrossKeysNameTheKeyAndLine) {
  Status s = load_error(edited("  n_embd: 64", "  n_embd: 66"));
  EXPECT_TRUE(s.is_invalid_argument());
  EXPECT_NE(s.message().find(":4:11: key 'model.n_embd': 66 is not a multiple of model.n_head"),
            std::string::npos)
      << s.message();
  s = load_error(edited("  beta2: 0.99", "  beta2: 1.0"));
  EXPECT_NE(s.message().find(":15:10: key 'train.beta2': must be below 1"), std::string::npos)
      << s.message();
  s = load_error(edited("  seed: 7", "  seed: 7\n  eps: 0.0"));
  EXPECT_NE(s.message().find(":17:8: key 'train.eps': must be above 0"), std::string::npos)
      << s.message();
}

TEST(TrainConfigTest, ValDirIsNeededOnlyWhenValidating) {
  Status s = load_error(edited("  val: data/sotu/val\n", ""));
  EXPECT_NE(s.message().find("key 'data.val': required while train.val_batches > 0"),
            std::string::npos)
      << s.message();
  s = load_error(edited("  val: data/sotu/val\n", "").append("  val_batches: 0\n"));
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(TrainConfigTest, YamlSyntaxErrorNamesTheLine) {
  const Status s = load_error(edited("  n_head: 4", "  n_head: [4"));
  EXPECT_TRUE(s.is_invalid_argument());
  EXPECT_NE(s.message().find("YAML syntax error"), std::string::npos) << s.message();
}

TEST(TrainConfigTest, OverridesReplaceValuesAndAreRecorded) {
  Result<TrainConfig> c = load_train_config(write_config(kGood));
  ASSERT_TRUE(c.ok());
  TrainOverrides o;
  o.max_steps = 3;
  o.batch = 2;
  o.seq = 128;
  o.threads = 1;
  o.seed = 99;
  o.grad_accum = 4;
  o.val_every = 0;
  ASSERT_TRUE(apply_overrides(o, &*c).ok());
  EXPECT_EQ(c->train.max_steps, 3);
  EXPECT_EQ(c->train.batch, 2);
  EXPECT_EQ(c->train.seq, 128);
  EXPECT_EQ(c->train.threads, 1);
  EXPECT_EQ(c->train.seed, 99u);
  EXPECT_EQ(c->train.grad_accum, 4);
  EXPECT_EQ(c->train.val_every, 0);
  EXPECT_EQ(c->overridden.size(), 7u);
  EXPECT_TRUE(c->overridden.contains("train.seq"));
}

TEST(TrainConfigTest, BadOverrideNamesItsFlagAndChangesNothing) {
  Result<TrainConfig> c = load_train_config(write_config(kGood));
  ASSERT_TRUE(c.ok());
  TrainOverrides o;
  o.batch = 2;
  o.seq = 512;  // beyond block_size 128
  Status s = apply_overrides(o, &*c);
  EXPECT_TRUE(s.is_invalid_argument());
  EXPECT_NE(s.message().find("--seq 512: out of range [1, 128] (model.block_size"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(c->train.batch, 4) << "a failed apply_overrides changed the config";
  EXPECT_EQ(c->train.seq, 64);

  for (auto [set, flag] : std::initializer_list<std::pair<void (*)(TrainOverrides*), const char*>>{
           {[](TrainOverrides* x) { x->max_steps = 0; }, "--max-steps 0"},
           {[](TrainOverrides* x) { x->batch = -1; }, "--batch -1"},
           {[](TrainOverrides* x) { x->threads = 0; }, "--threads 0"},
           {[](TrainOverrides* x) { x->grad_accum = 0; }, "--grad-accum 0"},
           {[](TrainOverrides* x) { x->val_every = -5; }, "--val-every -5"}}) {
    TrainOverrides bad;
    set(&bad);
    s = apply_overrides(bad, &*c);
    EXPECT_TRUE(s.is_invalid_argument()) << flag;
    EXPECT_EQ(s.message().rfind(flag, 0), 0u) << s.message();
  }
}

TEST(TrainConfigTest, PrecisionAndGradReduceAreFp32OrBf16) {
  Result<TrainConfig> c = load_train_config(write_config(kGood));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->train.precision, Precision::kFp32);
  EXPECT_EQ(c->train.grad_reduce, Precision::kFp32);
  c = load_train_config(
      write_config(edited("  seed: 7\n", "  seed: 7\n  precision: bf16\n  grad_reduce: bf16\n")));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->train.precision, Precision::kBf16);
  EXPECT_EQ(c->train.grad_reduce, Precision::kBf16);
  // A value that is neither names the file, line and key.
  const Status s = load_error(edited("  seed: 7\n", "  seed: 7\n  precision: fp16\n"));
  EXPECT_TRUE(s.is_invalid_argument());
  EXPECT_NE(s.message().find(":17:"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("precision"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("fp16"), std::string::npos) << s.message();
  // The flags, by name.
  TrainOverrides o;
  o.precision = "bf16";
  o.grad_reduce = "bf16";
  c = load_train_config(write_config(kGood));
  ASSERT_TRUE(apply_overrides(o, &*c).ok());
  EXPECT_EQ(c->train.precision, Precision::kBf16);
  EXPECT_TRUE(c->overridden.contains("train.precision"));
  EXPECT_TRUE(c->overridden.contains("train.grad_reduce"));
  o.precision = "half";
  const Status bad = apply_overrides(o, &*c);
  EXPECT_NE(bad.message().find("--precision: 'half' is not a precision: fp32 or bf16"),
            std::string::npos)
      << bad.message();
}

}  // namespace
}  // namespace kiln::train
