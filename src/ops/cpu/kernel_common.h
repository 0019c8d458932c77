// What every kernel family shares, for one ISA: the full/tail vector access of a loop, task
// loops on the Context's pool, and untyped access to a view's data (the public functions have
// checked the dtype). Included by the cpu/<family>.inc files; no include guard, since each
// generated translation unit includes it exactly once.
//
// Everything is in an anonymous namespace (and [[maybe_unused]]: a family may not need all) inside
// the ISA's namespace and calls only compiler builtins, run_parallel (out of line, plain x86-64)
// and the C library, never an inline function with external linkage: such a function would be
// emitted by each ISA's translation unit under one name and the linker would keep one copy,
// possibly the AVX-512 one, for every caller (tests/style/check_isa_leaks.py checks the objects).
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <kiln/ops/context.h>
#include <kiln/ops/tensor.h>

#include "ops/cpu/simd.h"
#include "ops/parallel.h"

namespace kiln::ops::cpu::KILN_OPS_ISA_NS {
namespace {

using namespace kiln::ops::simd::KILN_SIMD_NS;

// 1.0 in every lane: load_partial(kOnes, n) is a 0/1 mask of the first n lanes. 16 lanes is the
// widest Vf (AVX-512).
alignas(64) constexpr float kOnes[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
static_assert(kWidth <= 16, "kOnes must cover a whole vector");

// A full vector's loads and stores, or those of the first n lanes of a loop's tail: a loop body
// written once as a generic lambda body(i, io) serves both.
struct Full {
  Vf load(const float* p) const { return loadu(p); }
  void store(float* p, Vf v) const { storeu(p, v); }
  Vf keep(Vf v) const { return v; }
};
struct Tail {
  size_t n;
  Vf load(const float* p) const { return load_partial(p, n); }
  void store(float* p, Vf v) const { store_partial(p, v, n); }
  // v in the first n lanes, 0 in the others.
  Vf keep(Vf v) const { return v * load_partial(kOnes, n); }
};

[[maybe_unused]] int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}
[[maybe_unused]] int64_t max64(int64_t a, int64_t b) {
  return a > b ? a : b;
}

// body(i, io) for every vector of [0, n), the last one possibly partial.
template <typename Body>
void for_vectors(int64_t n, Body&& body) {
  int64_t i = 0;
  for (; i + kWidth <= n; i += kWidth)
    body(i, Full{});
  if (i < n) body(i, Tail{static_cast<size_t>(n - i)});
}

// Runs fn(task) or fn(task, thread) for every task in [0, tasks): on ctx.pool, or inline
// without one. thread is in [0, ctx.threads()), for per-thread scratch.
template <typename Fn>
void run_tasks(const Context& ctx, int64_t tasks, Fn&& fn) {
  run_parallel(ctx, tasks, [&](int64_t task, int thread) {
    if constexpr (std::is_invocable_v<Fn&, int64_t, int>) {
      fn(task, thread);
    } else {
      fn(task);
    }
  });
}

[[maybe_unused]] const float* cf32(const TensorView& t) {
  return static_cast<const float*>(t.data);
}
[[maybe_unused]] float* f32(const TensorView& t) {
  return static_cast<float*>(t.data);
}

}  // namespace
}  // namespace kiln::ops::cpu::KILN_OPS_ISA_NS
