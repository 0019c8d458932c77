// Heap allocations during a training step of Gpt2, counted.
//
// The model allocates everything in create(); forward, backward and adamw_step must not allocate.
// This binary counts every allocation while a step runs: the global operator new is replaced,
// and the link wraps malloc, calloc, realloc, aligned_alloc and posix_memalign (ld --wrap, see
// model.cmake), so every C allocation made by our static libraries is seen too. (OpenBLAS, a
// shared library, keeps its own preallocated buffers and is not seen.)
//
// What is counted today beyond the model's own code, which is zero: kiln_ops allocates scratch
// inside a few ops (attention's per-thread tiles and dq partials, layernorm_backward's partial
// dweight/dbias, global_grad_norm's chunk list). Those counts are the ops' share, spelled out
// below (global_grad_norm's, which grows with the arena, measured by calling it directly); the
// test fails if the model adds a single allocation of its own, and the constants go to zero
// when kiln_ops takes its scratch from the caller.
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
#include <kiln/ops/optimizer.h>
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

// kiln_ops' own scratch allocations per call (see the file comment), with L blocks:
// attention_forward: one per-thread tile buffer.
constexpr int64_t kAttentionForwardScratch = 1;
// attention_backward: D_i = rowsum(dO * O), the dq partials, the per-thread tiles.
constexpr int64_t kAttentionBackwardScratch = 3;
// layernorm_backward: the per-task partial dweight/dbias (a std::vector).
constexpr int64_t kLayerNormBackwardScratch = 1;

TEST(ModelAllocTest, TrainingStepAllocatesNothingOfItsOwn) {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 64;
  c.block_size = 32;
  c.vocab_size = 300;
  constexpr int kBatch = 2, kSeq = 32;
  ThreadPool pool(2);
  Result<ops::Context> ctx = ops::make_cpu_context(&pool);
  ASSERT_TRUE(ctx.ok());
  Result<Gpt2> created = Gpt2::create(c, kBatch, kSeq);
  ASSERT_TRUE(created.ok());
  Gpt2& model = *created;
  model.init_weights(1);
  Rng rng(2);
  std::vector<int32_t> tokens(kBatch * kSeq), targets(kBatch * kSeq);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>(rng.next_below(300));
    targets[i] = static_cast<int32_t>(rng.next_below(300));
  }
  const std::function<void(int)> hook = [](int) {};
  const AdamWConfig adamw;

  // Two steps: the first may warm up anything lazy (OpenBLAS's buffers, the pool's threads).
  for (int step = 1; step <= 2; ++step) {
    int64_t forward = 0, backward = 0, norm = 0, update = 0;
    {
      AllocationCount count;
      model.zero_grad();
      Result<float> loss = model.forward(tokens, targets, *ctx);
      forward = count.count();
      ASSERT_TRUE(loss.ok());
    }
    {
      AllocationCount count;
      Status st = model.backward(1.0f, *ctx, hook);
      backward = count.count();
      ASSERT_TRUE(st.ok());
    }
    {
      AllocationCount count;
      Result<double> n = model.grad_norm(*ctx);
      norm = count.count();
      ASSERT_TRUE(n.ok());
    }
    {
      AllocationCount count;
      Status st = model.adamw_step(adamw, 1e-3f, step, 1.0f, *ctx);
      update = count.count();
      ASSERT_TRUE(st.ok());
    }
    if (step == 1) continue;
    const int64_t L = c.n_layer;
    EXPECT_EQ(forward, L * kAttentionForwardScratch) << "forward";
    // Per block: ln_2 and ln_1 backward, attention backward; then ln_f's backward once.
    EXPECT_EQ(backward, L * (2 * kLayerNormBackwardScratch + kAttentionBackwardScratch) +
                            kLayerNormBackwardScratch)
        << "backward";
    // global_grad_norm's chunk list grows with the arena, so its share is measured: the same
    // call on the same gradient arena, made directly.
    const std::vector<ops::TensorView> grads = {ops::TensorView::f32(
        model.grad_data().data(), {static_cast<int64_t>(model.grad_data().size())})};
    int64_t ops_norm = 0;
    {
      AllocationCount count;
      Result<double> direct = ops::global_grad_norm(grads, *ctx);
      ops_norm = count.count();
      ASSERT_TRUE(direct.ok());
    }
    EXPECT_EQ(norm, ops_norm) << "grad_norm";
    EXPECT_EQ(update, 0) << "adamw_step";
  }
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
