// A small SIMD vocabulary for kiln_ops kernels, so each kernel is written once and compiled for
// every ISA: a translation unit defines KILN_SIMD_LEVEL (0 scalar, 1 AVX2+FMA, 2 AVX-512) and
// is compiled with the matching -m flags (see kiln_ops_kernels() in src/ops/CMakeLists.txt).
//
//   Vf      a vector of kWidth floats (1, 8 or 16)
//   load/loadu/store, broadcast, zero, +, -, *, fma, min, max, exp, reduce_add, reduce_max
//   load_partial/store_partial   the first n (< kWidth) lanes, for loop tails
//
// Everything is inline and lives in an ISA-specific namespace (kiln::ops::simd::<isa>), so the
// three compilations never define the same symbol: no ODR clash between ISAs, and no AVX
// instruction can leak into the scalar build through a shared inline function.
//
// exp: Cephes-style range reduction x = n ln2 + r, |r| <= ln2/2, and a degree-6 polynomial for
// e^r: max relative error about 2e-7 (1-2 ulp) over the float range. The input is clamped to
// [-87.3, 88.4]: below, the result is e^-87.3 (about 1e-38), not 0, so kernels that mask
// (causal attention) must zero masked entries themselves; above, +inf.
#ifndef KILN_OPS_CPU_SIMD_H_
#define KILN_OPS_CPU_SIMD_H_

#ifndef KILN_SIMD_LEVEL
#error "define KILN_SIMD_LEVEL (0 scalar, 1 avx2, 2 avx512) before including simd.h"
#endif

#include <immintrin.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if KILN_SIMD_LEVEL == 2
#define KILN_SIMD_NS avx512
#elif KILN_SIMD_LEVEL == 1
#define KILN_SIMD_NS avx2
#else
#define KILN_SIMD_NS scalar
#endif

namespace kiln::ops::simd::KILN_SIMD_NS {

// Constants of the exp approximation.
inline constexpr float kExpHi = 88.3762626647949f;
inline constexpr float kExpLo = -87.3365447504f;
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f;
inline constexpr float kLn2Lo = -2.12194440e-4f;
inline constexpr float kExpP0 = 1.9875691500e-4f;
inline constexpr float kExpP1 = 1.3981999507e-3f;
inline constexpr float kExpP2 = 8.3334519073e-3f;
inline constexpr float kExpP3 = 4.1665795894e-2f;
inline constexpr float kExpP4 = 1.6666665459e-1f;
inline constexpr float kExpP5 = 5.0000001201e-1f;

#if KILN_SIMD_LEVEL == 2

inline constexpr int kWidth = 16;
struct Vf {
  __m512 v;
};
inline Vf zero() {
  return {_mm512_setzero_ps()};
}
inline Vf broadcast(float x) {
  return {_mm512_set1_ps(x)};
}
inline Vf loadu(const float* p) {
  return {_mm512_loadu_ps(p)};
}
inline void storeu(float* p, Vf a) {
  _mm512_storeu_ps(p, a.v);
}
inline __mmask16 tail_mask(size_t n) {
  return static_cast<__mmask16>((1u << n) - 1u);
}
inline Vf load_partial(const float* p, size_t n) {
  return {_mm512_maskz_loadu_ps(tail_mask(n), p)};
}
inline void store_partial(float* p, Vf a, size_t n) {
  _mm512_mask_storeu_ps(p, tail_mask(n), a.v);
}
// bf16 to f32 is exact: the bf16 bits are the f32's upper half.
inline Vf load_bf16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))};
}
inline Vf load_bf16_partial(const uint16_t* p, size_t n) {
  const __m256i h = _mm256_maskz_loadu_epi16(tail_mask(n), p);
  return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))};
}
inline Vf operator+(Vf a, Vf b) {
  return {_mm512_add_ps(a.v, b.v)};
}
inline Vf operator-(Vf a, Vf b) {
  return {_mm512_sub_ps(a.v, b.v)};
}
inline Vf operator*(Vf a, Vf b) {
  return {_mm512_mul_ps(a.v, b.v)};
}
inline Vf operator/(Vf a, Vf b) {
  return {_mm512_div_ps(a.v, b.v)};
}
inline Vf fma(Vf a, Vf b, Vf c) {
  return {_mm512_fmadd_ps(a.v, b.v, c.v)};
}  // a*b+c
inline Vf fnma(Vf a, Vf b, Vf c) {
  return {_mm512_fnmadd_ps(a.v, b.v, c.v)};
}  // c-a*b
inline Vf max(Vf a, Vf b) {
  return {_mm512_max_ps(a.v, b.v)};
}
inline Vf min(Vf a, Vf b) {
  return {_mm512_min_ps(a.v, b.v)};
}
// The tree of GCC's _mm512_reduce_add_ps/_mm512_reduce_max_ps (halves, quarters, then pairs),
// so sums are bit-identical to that intrinsic's; written out because GCC 12 reports the
// _mm256_undefined_pd() those intrinsics (and _mm512_castps512_ps256) start from as used
// uninitialized under -Werror. _mm512_extractf32x8_ps starts from zero instead.
inline float reduce_add(Vf a) {
  const __m256 h = _mm256_add_ps(_mm512_extractf32x8_ps(a.v, 0), _mm512_extractf32x8_ps(a.v, 1));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float reduce_max(Vf a) {
  const __m256 h = _mm256_max_ps(_mm512_extractf32x8_ps(a.v, 0), _mm512_extractf32x8_ps(a.v, 1));
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline Vf exp2_int(Vf n) {  // 2^n for integral n in [-126, 127]
  const __m512i e =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n.v), _mm512_set1_epi32(127)), 23);
  return {_mm512_castsi512_ps(e)};
}
inline Vf round_nearest(Vf a) {
  return {_mm512_roundscale_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
}

#elif KILN_SIMD_LEVEL == 1

inline constexpr int kWidth = 8;
struct Vf {
  __m256 v;
};
inline Vf zero() {
  return {_mm256_setzero_ps()};
}
inline Vf broadcast(float x) {
  return {_mm256_set1_ps(x)};
}
inline Vf loadu(const float* p) {
  return {_mm256_loadu_ps(p)};
}
inline void storeu(float* p, Vf a) {
  _mm256_storeu_ps(p, a.v);
}
inline __m256i tail_mask(size_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline Vf load_partial(const float* p, size_t n) {
  return {_mm256_maskload_ps(p, tail_mask(n))};
}
inline void store_partial(float* p, Vf a, size_t n) {
  _mm256_maskstore_ps(p, tail_mask(n), a.v);
}
inline Vf load_bf16(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return {_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))};
}
inline Vf load_bf16_partial(const uint16_t* p, size_t n) {
  alignas(16) uint16_t tail[8] = {};
  for (size_t i = 0; i < n; ++i)
    tail[i] = p[i];
  return load_bf16(tail);
}
inline Vf operator+(Vf a, Vf b) {
  return {_mm256_add_ps(a.v, b.v)};
}
inline Vf operator-(Vf a, Vf b) {
  return {_mm256_sub_ps(a.v, b.v)};
}
inline Vf operator*(Vf a, Vf b) {
  return {_mm256_mul_ps(a.v, b.v)};
}
inline Vf operator/(Vf a, Vf b) {
  return {_mm256_div_ps(a.v, b.v)};
}
inline Vf fma(Vf a, Vf b, Vf c) {
  return {_mm256_fmadd_ps(a.v, b.v, c.v)};
}
inline Vf fnma(Vf a, Vf b, Vf c) {
  return {_mm256_fnmadd_ps(a.v, b.v, c.v)};
}
inline Vf max(Vf a, Vf b) {
  return {_mm256_max_ps(a.v, b.v)};
}
inline Vf min(Vf a, Vf b) {
  return {_mm256_min_ps(a.v, b.v)};
}
inline float reduce_add(Vf a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float reduce_max(Vf a) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline Vf exp2_int(Vf n) {
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n.v), _mm256_set1_epi32(127)), 23);
  return {_mm256_castsi256_ps(e)};
}
inline Vf round_nearest(Vf a) {
  return {_mm256_round_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
}

#else

inline constexpr int kWidth = 1;
struct Vf {
  float v;
};
inline Vf zero() {
  return {0.0f};
}
inline Vf broadcast(float x) {
  return {x};
}
inline Vf loadu(const float* p) {
  return {*p};
}
inline void storeu(float* p, Vf a) {
  *p = a.v;
}
inline Vf load_partial(const float* p, size_t n) {
  return {n > 0 ? *p : 0.0f};
}
inline void store_partial(float* p, Vf a, size_t n) {
  if (n > 0) *p = a.v;
}
inline Vf load_bf16(const uint16_t* p) {
  const uint32_t bits = static_cast<uint32_t>(*p) << 16;
  float f;
  __builtin_memcpy(&f, &bits, sizeof(f));
  return {f};
}
inline Vf load_bf16_partial(const uint16_t* p, size_t n) {
  return n > 0 ? load_bf16(p) : zero();
}
inline Vf operator+(Vf a, Vf b) {
  return {a.v + b.v};
}
inline Vf operator-(Vf a, Vf b) {
  return {a.v - b.v};
}
inline Vf operator*(Vf a, Vf b) {
  return {a.v * b.v};
}
inline Vf operator/(Vf a, Vf b) {
  return {a.v / b.v};
}
inline Vf fma(Vf a, Vf b, Vf c) {
  return {a.v * b.v + c.v};
}
inline Vf fnma(Vf a, Vf b, Vf c) {
  return {c.v - a.v * b.v};
}
inline Vf max(Vf a, Vf b) {
  return {a.v > b.v ? a.v : b.v};
}
inline Vf min(Vf a, Vf b) {
  return {a.v < b.v ? a.v : b.v};
}
inline float reduce_add(Vf a) {
  return a.v;
}
inline float reduce_max(Vf a) {
  return a.v;
}
inline Vf exp2_int(Vf n) {
  const int32_t e = (static_cast<int32_t>(n.v) + 127) << 23;
  float f;
  std::memcpy(&f, &e, 4);
  return {f};
}
inline Vf round_nearest(Vf a) {
  return {std::nearbyint(a.v)};
}

#endif

inline Vf& operator+=(Vf& a, Vf b) {
  return a = a + b;
}
inline Vf& operator*=(Vf& a, Vf b) {
  return a = a * b;
}

// e^x, see the top of the file.
inline Vf exp(Vf x) {
  x = min(max(x, broadcast(kExpLo)), broadcast(kExpHi));
  const Vf n = round_nearest(x * broadcast(kLog2e));
  Vf r = fnma(n, broadcast(kLn2Hi), x);
  r = fnma(n, broadcast(kLn2Lo), r);
  Vf p = broadcast(kExpP0);
  p = fma(p, r, broadcast(kExpP1));
  p = fma(p, r, broadcast(kExpP2));
  p = fma(p, r, broadcast(kExpP3));
  p = fma(p, r, broadcast(kExpP4));
  p = fma(p, r, broadcast(kExpP5));
  const Vf r2 = r * r;
  p = fma(p, r2, r + broadcast(1.0f));
  return p * exp2_int(n);
}

// tanh(x) = 1 - 2 / (e^{2x} + 1), accurate to a few ulp away from 0 and saturating cleanly.
inline Vf tanh(Vf x) {
  const Vf e = exp(x + x);
  return broadcast(1.0f) - broadcast(2.0f) / (e + broadcast(1.0f));
}

}  // namespace kiln::ops::simd::KILN_SIMD_NS

#endif  // KILN_OPS_CPU_SIMD_H_
