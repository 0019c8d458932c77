// The trainer's promise that a step allocates nothing: global operator new is replaced in this
// test binary by one that counts while armed, and a steady-state training step (micro-steps,
// optimizer step, validation, JSON or progress line, metrics) may make no call to it at all. The
// trainer hands the ops an ops::Workspace, so kiln_ops' scratch is allocated in the first step
// and reused after (model_alloc_test.cc counts the C allocations too, for the model alone).
//
// The replacement forwards to malloc/free as the default one does; it lives in a test binary of
// its own (kiln_trainer_alloc_tests) so no other test runs under it.
#include <kiln/base/thread_pool.h>
#include <kiln/ops/context.h>
#include <kiln/train/model.h>
#include <kiln/train/trainer.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <ostream>
#include <streambuf>
#include <string>
#include <vector>

namespace {

std::atomic<bool> counting{false};
std::atomic<int64_t> allocations{0};

}  // namespace

void* operator new(size_t size) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
// GCC pairs the free below with callers' `new` and warns of a mismatch; here they are a matched
// pair by construction (this operator new allocates with malloc).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  std::free(p);
}

namespace kiln::train {
namespace {

// Swallows what is written: an ostringstream would allocate as it grows, charging the test's
// buffer to the trainer.
class DiscardBuf : public std::streambuf {
 protected:
  int overflow(int c) override { return c; }
  std::streamsize xsputn(const char*, std::streamsize n) override { return n; }
};

constexpr int kBatch = 2, kSeq = 32, kGradAccum = 2, kValBatches = 2, kSteps = 4;

TrainConfig alloc_config(const std::string& train_dir, const std::string& val_dir) {
  TrainConfig config;
  config.model = ModelConfig{2, 2, 64, 64, 50257};
  config.data = {train_dir, val_dir};
  config.train.batch = kBatch;
  config.train.seq = kSeq;
  config.train.grad_accum = kGradAccum;
  config.train.max_steps = kSteps;
  config.train.val_every = 1;  // every step validates: that path is measured too
  config.train.val_batches = kValBatches;
  config.train.threads = 2;
  return config;
}

// The allocations of one steady-state step made by the model's and kiln_ops' own calls with a
// workspace in the context: the same calls the trainer makes, made directly. Zero, or the
// trainer's count below could not be zero either (this tells which side added one).
int64_t model_step_allocations(const TrainConfig& config) {
  ThreadPool pool(config.train.threads);
  ops::Workspace workspace;
  Result<ops::Context> ctx = ops::make_cpu_context(&pool);
  EXPECT_TRUE(ctx.ok());
  ctx->workspace = &workspace;
  Result<Gpt2> model = Gpt2::create(config.model, kBatch, kSeq);
  EXPECT_TRUE(model.ok());
  model->init_weights(1);
  std::vector<int32_t> tokens(kBatch * kSeq, 1), targets(kBatch * kSeq, 2);
  const AdamWConfig adamw;
  int64_t count = 0;
  for (int step = 1; step <= 3; ++step) {
    allocations.store(0);
    counting.store(step == 3);
    model->zero_grad();
    for (int micro = 0; micro < kGradAccum; ++micro) {
      EXPECT_TRUE(model->forward(tokens, targets, *ctx).ok());
      EXPECT_TRUE(model->backward(1.0f / kGradAccum, *ctx).ok());
    }
    EXPECT_TRUE(model->grad_norm(*ctx).ok());
    EXPECT_TRUE(model->adamw_step(adamw, 1e-3f, step, 1.0f, *ctx).ok());
    for (int i = 0; i < kValBatches; ++i)
      EXPECT_TRUE(model->forward(tokens, targets, *ctx).ok());
    counting.store(false);
    count = allocations.load();
  }
  return count;
}

class TrainerAllocTest : public ::testing::TestWithParam<bool> {};

TEST_P(TrainerAllocTest, StepsAfterTheFirstAllocateNothing) {
  const std::string train_dir = std::string(KILN_SOURCE_DIR) + "/data/sotu/train";
  const std::string val_dir = std::string(KILN_SOURCE_DIR) + "/data/sotu/val";
  for (const std::string& dir : {train_dir, val_dir}) {
    ASSERT_TRUE(std::filesystem::exists(dir + "/.complete"))
        << dir << " is missing: run scripts/fetch-data";
  }
  const TrainConfig config = alloc_config(train_dir, val_dir);
  EXPECT_EQ(model_step_allocations(config), 0) << "the model's and kiln_ops' own calls";

  TrainerOptions options;
  options.peak_gflops = 100;
  DiscardBuf discard;
  std::ostream out(&discard);
  options.out = &out;
  options.json = GetParam();            // the JSON line, or
  options.live_progress = !GetParam();  // the live progress line
  // Steps 3 and 4, each counted from the end of the previous step's callback (steps 1 and 2 may
  // grow lazily kept library state: OpenBLAS's buffers, the stream's, the ops' workspace).
  std::vector<int64_t> per_step;
  Result<TrainSummary> s = train(config, options, nullptr, Logger(), [&](const StepReport& r) {
    if (r.step >= 3) per_step.push_back(allocations.load());
    counting.store(r.step >= 2 && r.step < kSteps);
    allocations.store(0);
  });
  counting.store(false);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_EQ(per_step.size(), 2u);
  for (size_t i = 0; i < per_step.size(); ++i) {
    EXPECT_EQ(per_step[i], 0) << "step " << i + 3 << ": operator new calls";
  }
}

INSTANTIATE_TEST_SUITE_P(Output, TrainerAllocTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& param) {
                           return param.param ? std::string("Json") : std::string("Progress");
                         });

}  // namespace
}  // namespace kiln::train
