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

// bf16 rows (the conversion op's kernels, and the bf16 paths of other families).
//
// To bf16: round to nearest even by adding 0x7FFF plus the lowest kept bit (bit 16) and dropping
// the low 16 bits; a NaN instead keeps its sign and top payload bits and gets the quiet bit, so
// it cannot round into an infinity. Overflow rounds to infinity by the same addition.
constexpr uint32_t kBf16RoundBias = 0x7FFF;
constexpr uint32_t kBf16QuietBit = 0x0040;

[[maybe_unused]] uint16_t f32_to_bf16_one(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, sizeof(u));
  if (f != f) return static_cast<uint16_t>((u >> 16) | kBf16QuietBit);
  return static_cast<uint16_t>((u + kBf16RoundBias + ((u >> 16) & 1)) >> 16);
}

[[maybe_unused]] float bf16_to_f32_one(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &u, sizeof(f));
  return f;
}

#if KILN_SIMD_LEVEL == 2
// 16 results, one in the low half of each 32-bit lane.
[[maybe_unused]] __m512i f32_to_bf16_lanes(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i high = _mm512_srli_epi32(u, 16);
  const __m512i lsb = _mm512_and_si512(high, _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(kBf16RoundBias)), lsb), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_mask_or_epi32(rounded, nan, high, _mm512_set1_epi32(kBf16QuietBit));
}

[[maybe_unused]] void f32_to_bf16_range(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i packed = _mm512_cvtepi32_epi16(f32_to_bf16_lanes(_mm512_loadu_ps(src + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), packed);
  }
  if (i < n) {
    const __mmask16 m = tail_mask(static_cast<size_t>(n - i));
    _mm512_mask_cvtepi32_storeu_epi16(dst + i, m,
                                      f32_to_bf16_lanes(_mm512_maskz_loadu_ps(m, src + i)));
  }
}

[[maybe_unused]] void bf16_to_f32_range(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
  }
  if (i < n) {
    const __mmask16 m = tail_mask(static_cast<size_t>(n - i));
    const __m256i h = _mm256_maskz_loadu_epi16(m, src + i);
    _mm512_mask_storeu_ps(dst + i, m,
                          _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
  }
}
#elif KILN_SIMD_LEVEL == 1
// 8 results, one in the low half of each 32-bit lane.
[[maybe_unused]] __m256i f32_to_bf16_lanes(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i high = _mm256_srli_epi32(u, 16);
  const __m256i lsb = _mm256_and_si256(high, _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(kBf16RoundBias)), lsb), 16);
  const __m256i quiet = _mm256_or_si256(high, _mm256_set1_epi32(kBf16QuietBit));
  const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  return _mm256_castps_si256(
      _mm256_blendv_ps(_mm256_castsi256_ps(rounded), _mm256_castsi256_ps(quiet), nan));
}

[[maybe_unused]] void f32_to_bf16_range(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    // packus interleaves 128-bit halves (a0-3 b0-3 a4-7 b4-7); the permute restores the order.
    const __m256i packed = _mm256_packus_epi32(f32_to_bf16_lanes(_mm256_loadu_ps(src + i)),
                                               f32_to_bf16_lanes(_mm256_loadu_ps(src + i + 8)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_permute4x64_epi64(packed, _MM_SHUFFLE(3, 1, 2, 0)));
  }
  for (; i < n; ++i)
    dst[i] = f32_to_bf16_one(src[i]);
}

[[maybe_unused]] void bf16_to_f32_range(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
  }
  for (; i < n; ++i)
    dst[i] = bf16_to_f32_one(src[i]);
}
#else
[[maybe_unused]] void f32_to_bf16_range(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = f32_to_bf16_one(src[i]);
}

[[maybe_unused]] void bf16_to_f32_range(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = bf16_to_f32_one(src[i]);
}
#endif

// A kernel's bf16 output goes through an f32 buffer of this many floats (4 KiB, in the L1):
// the kernel writes f32 there as it would into an f32 output, and f32_to_bf16_range rounds it
// out, so a bf16 output holds exactly the rounding of the f32 one (convert_f32_to_bf16's).
constexpr int64_t kBf16StageFloats = 1024;

// Writes n values through write(i0, count, f32_dst) to out: directly when Out is float, else in
// stages of kBf16StageFloats rounded to bf16.
template <typename Out, typename Write>
void write_f32_or_bf16(Out* out, int64_t n, Write&& write) {
  if constexpr (sizeof(Out) == sizeof(float)) {
    write(int64_t{0}, n, out);
  } else {
    alignas(64) float stage[kBf16StageFloats];
    for (int64_t i0 = 0; i0 < n; i0 += kBf16StageFloats) {
      const int64_t count = n - i0 < kBf16StageFloats ? n - i0 : kBf16StageFloats;
      write(i0, count, stage);
      f32_to_bf16_range(stage, out + i0, count);
    }
  }
}

[[maybe_unused]] const float* cf32(const TensorView& t) {
  return static_cast<const float*>(t.data);
}
[[maybe_unused]] float* f32(const TensorView& t) {
  return static_cast<float*>(t.data);
}

}  // namespace
}  // namespace kiln::ops::cpu::KILN_OPS_ISA_NS
