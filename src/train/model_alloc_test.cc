// Heap allocations during a training step of Gpt2, counted.
//
// The model allocates everything in create(); forward, backward and adamw_step must not allocate.
// This binary counts every allocation while a step runs: the global operator new is replaced,
// and the link wraps malloc, calloc, realloc, aligned_alloc and posix_memalign (ld --wrap, see
// model.cmake), so every C allocation made by our static libraries is seen too. (OpenBLAS, a
// shared library, keeps its own preallocated buffers and is not seen.)
//
// The ops that need scratch (attention forward and backward, layernorm_backward, global_grad_norm)
// take it from the Context's ops::Workspace: with one, a step after the first allocates nothing
// at all. Without one, each such op call allocates exactly one block of its own, which the second
// test spells out, so it too fails if the model adds a single allocation of its own.
#include <kiln/train/model.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <new>
#include <vector>

#include <kiln/base/thread_pool.h>
#include <kiln/ops/context.h>
#include <kiln/train/rng.h>

// The counter of the hooks below: test instrumentation, which has to be global (operator new
// and malloc have nowhere else to find it).
namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};

void note_allocation() {
  if (g_counting.load(std::memory_order_relaxed))
    g_allocations.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

extern "C" {
void* __real_malloc(size_t size);
void* __real_calloc(size_t n, size_t size);
void* __real_realloc(void* p, size_t size);
void* __real_aligned_alloc(size_t align, size_t size);
int __real_posix_memalign(void** out, size_t align, size_t size);
void __real_free(void* p);

void* __wrap_malloc(size_t size) {
  note_allocation();
  return __real_malloc(size);
}
void* __wrap_calloc(size_t n, size_t size) {
  note_allocation();
  return __real_calloc(n, size);
}
void* __wrap_realloc(void* p, size_t size) {
  note_allocation();
  return __real_realloc(p, size);
}
void* __wrap_aligned_alloc(size_t align, size_t size) {
  note_allocation();
  return __real_aligned_alloc(align, size);
}
int __wrap_posix_memalign(void** out, size_t align, size_t size) {
  note_allocation();
  return __real_posix_memalign(out, align, size);
}
void __wrap_free(void* p) {
  __real_free(p);
}
}

void* operator new(size_t size) {
  note_allocation();
  if (void* p = __real_malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new(size_t size, std::align_val_t align) {
  note_allocation();
  const size_t a = static_cast<size_t>(align);
  if (void* p = __real_aligned_alloc(a, (size + a - 1) / a * a)) return p;
  throw std::bad_alloc();
}
// __real_free rather than std::free: GCC's -Wmismatched-new-delete flags a replaced operator
// delete that calls free() on what (to it) came from operator new.
void operator delete(void* p) noexcept {
  __real_free(p);
}
void operator delete(void* p, size_t) noexcept {
  __real_free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  __real_free(p);
}
void operator delete(void* p, size_t, std::align_val_t) noexcept {
  __real_free(p);
}

namespace kiln::train {
namespace {

// Counts the allocations made while it is alive.
class AllocationCount {
 public:
  AllocationCount() {
    g_allocations.store(0);
    g_counting.store(true);
  }
  ~AllocationCount() { g_counting.store(false); }
  int64_t count() const { return g_allocations.load(); }
};

// The model and the inputs of one training step.
struct Step {
  Step() {
    config.n_layer = 2;
    config.n_head = 2;
    config.n_embd = 64;
    config.block_size = 32;
    config.vocab_size = 300;
    Rng rng(2);
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<int32_t>(rng.next_below(300));
      targets[i] = static_cast<int32_t>(rng.next_below(300));
    }
  }

  static constexpr int kBatch = 2, kSeq = 32;
  ModelConfig config;
  std::vector<int32_t> tokens = std::vector<int32_t>(kBatch * kSeq);
  std::vector<int32_t> targets = std::vector<int32_t>(kBatch * kSeq);
};

// The allocations of each phase of one step.
struct Counts {
  int64_t forward = 0, backward = 0, norm = 0, update = 0;
};

// Runs training step `step` (counting from 1) and counts each phase's allocations.
void run_step(const Step& in, Gpt2* model, const ops::Context& ctx, int step, Counts* out) {
  const std::function<void(int)> hook = [](int) {};
  const AdamWConfig adamw;
  {
    AllocationCount count;
    model->zero_grad();
    Result<float> loss = model->forward(in.tokens, in.targets, ctx);
    out->forward = count.count();
    ASSERT_TRUE(loss.ok());
  }
  {
    AllocationCount count;
    Status st = model->backward(1.0f, ctx, hook);
    out->backward = count.count();
    ASSERT_TRUE(st.ok());
  }
  {
    AllocationCount count;
    Result<double> n = model->grad_norm(ctx);
    out->norm = count.count();
    ASSERT_TRUE(n.ok());
  }
  {
    AllocationCount count;
    Status st = model->adamw_step(adamw, 1e-3f, step, 1.0f, ctx);
    out->update = count.count();
    ASSERT_TRUE(st.ok());
  }
}

TEST(ModelAllocTest, WithAWorkspaceAStepAfterTheFirstAllocatesNothing) {
  const Step in;
  ThreadPool pool(2);
  ops::Workspace workspace;
  Result<ops::Context> ctx = ops::make_cpu_context(&pool);
  ASSERT_TRUE(ctx.ok());
  ctx->workspace = &workspace;
  Result<Gpt2> created = Gpt2::create(in.config, Step::kBatch, Step::kSeq);
  ASSERT_TRUE(created.ok());
  Gpt2& model = *created;
  model.init_weights(1);

  // The first step may warm up anything lazy: OpenBLAS's buffers, the pool's threads, the
  // workspace's growth to the largest op's scratch.
  Counts first;
  ASSERT_NO_FATAL_FAILURE(run_step(in, &model, *ctx, 1, &first));
  const int64_t grown = workspace.allocations();
  EXPECT_GE(grown, 1) << "the ops took no scratch from the workspace";
  for (int step = 2; step <= 3; ++step) {
    Counts c;
    ASSERT_NO_FATAL_FAILURE(run_step(in, &model, *ctx, step, &c));
    EXPECT_EQ(c.forward, 0) << "forward, step " << step;
    EXPECT_EQ(c.backward, 0) << "backward, step " << step;
    EXPECT_EQ(c.norm, 0) << "grad_norm, step " << step;
    EXPECT_EQ(c.update, 0) << "adamw_step, step " << step;
  }
  EXPECT_EQ(workspace.allocations(), grown);
}

// Without a workspace, each op call that needs scratch allocates one block of its own
// (kiln_ops' fallback) and the model nothing beyond: with L blocks, attention_forward once per
// block; per block ln_2's and ln_1's backward and attention_backward, then ln_f's backward once;
// global_grad_norm once.
TEST(ModelAllocTest, WithoutAWorkspaceOnlyTheOpsScratchIsAllocated) {
  const Step in;
  ThreadPool pool(2);
  Result<ops::Context> ctx = ops::make_cpu_context(&pool);
  ASSERT_TRUE(ctx.ok());
  ASSERT_EQ(ctx->workspace, nullptr);
  Result<Gpt2> created = Gpt2::create(in.config, Step::kBatch, Step::kSeq);
  ASSERT_TRUE(created.ok());
  created->init_weights(1);
  Counts c;
  for (int step = 1; step <= 2; ++step)  // the second step's counts
    ASSERT_NO_FATAL_FAILURE(run_step(in, &*created, *ctx, step, &c));
  const int64_t L = in.config.n_layer;
  EXPECT_EQ(c.forward, L) << "forward";
  EXPECT_EQ(c.backward, L * 3 + 1) << "backward";
  EXPECT_EQ(c.norm, 1) << "grad_norm";
  EXPECT_EQ(c.update, 0) << "adamw_step";
}

// The hooks see allocations at all (a test that counts nothing would pass for any model).
TEST(ModelAllocTest, TheCountersSeeAllocations) {
  // Through volatile pointers, so the compiler cannot elide the allocations.
  AllocationCount count;
  std::vector<float>* volatile v = new std::vector<float>(100);
  void* volatile p = std::malloc(64);
  std::free(p);
  delete v;
  EXPECT_EQ(count.count(), 3);  // the vector object, its buffer, the malloc
}

}  // namespace
}  // namespace kiln::train
