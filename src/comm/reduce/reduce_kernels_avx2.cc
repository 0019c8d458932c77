// The AVX2 reduce kernel: 32-byte vectors, unrolled four to a loop iteration; the last partial
// vector is done by the scalar loop of reduce_scalar_ops.h (AVX2 has no masked 16-bit loads and
// stores, and a scalar tail of at most 15 elements costs less than building masks). Large
// destinations are written with non-temporal stores (kStreamBytesMin).
//
// Compiled with -mavx2 -mfma (reduce.cmake); only reached through the dispatcher after it has seen
// these features. Results are bit-identical to the scalar kernel: the same IEEE operations in the
// same precision, the same operand order for min/max, the same bf16 rounding on 8 lanes at once.
//
// Shapes: a "Lanes" struct says how one vector of a DataType is loaded and stored (16 bf16 are
// widened to two vectors of 8 fp32 on load and rounded back on store); a "Math" struct holds the
// arithmetic of the type computed in (f32, f64, i32, i64).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "comm/reduce/reduce_kernels_internal.h"
#include "comm/reduce/reduce_scalar_ops.h"

namespace kiln::comm::reduce_internal {
namespace {

// Vectors per main-loop iteration (the unroll factor): four independent load-op-store chains per
// iteration keep the loop overhead small next to the memory operations.
constexpr int kUnroll = 4;

struct F32Math {
  using V = __m256;
  using Div = __m256;
  static Div make_div(int divide_by) { return _mm256_set1_ps(static_cast<float>(divide_by)); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  // MINPS returns its second operand when either is NaN; put a back where a is NaN.
  static V min(V a, V b) {
    return _mm256_blendv_ps(_mm256_min_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  }
  static V max(V a, V b) {
    return _mm256_blendv_ps(_mm256_max_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  }
  static V div(V s, Div d) { return _mm256_div_ps(s, d); }
};

struct F64Math {
  using V = __m256d;
  using Div = __m256d;
  static Div make_div(int divide_by) { return _mm256_set1_pd(static_cast<double>(divide_by)); }
  static V add(V a, V b) { return _mm256_add_pd(a, b); }
  static V min(V a, V b) {
    return _mm256_blendv_pd(_mm256_min_pd(a, b), a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q));
  }
  static V max(V a, V b) {
    return _mm256_blendv_pd(_mm256_max_pd(a, b), a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q));
  }
  static V div(V s, Div d) { return _mm256_div_pd(s, d); }
};

struct I32Math {
  using V = __m256i;
  using Div = __m256d;
  static Div make_div(int divide_by) { return _mm256_set1_pd(static_cast<double>(divide_by)); }
  static V add(V a, V b) { return _mm256_add_epi32(a, b); }  // wraps
  static V min(V a, V b) { return _mm256_min_epi32(a, b); }
  static V max(V a, V b) { return _mm256_max_epi32(a, b); }
  // There is no vector integer division. In double, s and d are exact and trunc(fl(s / d)) is the
  // truncated quotient: if d does not divide s, s / d lies at least 1/d from every integer while
  // the rounding error is at most |s / d| * 2^-53 <= 2^31 / d * 2^-53 < 1/d.
  static V div(V s, Div d) {
    const __m128i lo =
        _mm256_cvttpd_epi32(_mm256_div_pd(_mm256_cvtepi32_pd(_mm256_castsi256_si128(s)), d));
    const __m128i hi =
        _mm256_cvttpd_epi32(_mm256_div_pd(_mm256_cvtepi32_pd(_mm256_extracti128_si256(s, 1)), d));
    return _mm256_set_m128i(hi, lo);
  }
};

// AVX2 has no 64-bit min/max: compare and blend. No div: an i64 avg that divides runs the scalar
// loop (see Avx2Kernel).
struct I64Math {
  using V = __m256i;
  using Div = int;
  static Div make_div(int divide_by) { return divide_by; }
  static V add(V a, V b) { return _mm256_add_epi64(a, b); }  // wraps
  static V min(V a, V b) { return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(a, b)); }
  static V max(V a, V b) { return _mm256_blendv_epi8(b, a, _mm256_cmpgt_epi64(a, b)); }
};

// Lanes<D>: Math, lanes per vector, bytes per element; load to a Math::V; pack a result into its
// stored form P; store P.
template <DataType D>
struct Lanes;

template <>
struct Lanes<DataType::kF32> {
  using Math = F32Math;
  using P = __m256;
  static constexpr size_t kLanes = 8;
  static constexpr size_t kBytes = 4;
  static __m256 load(const unsigned char* p) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  }
  static P pack(__m256 v) { return v; }
  static void store(unsigned char* p, P v) { _mm256_storeu_ps(reinterpret_cast<float*>(p), v); }
  static void stream(unsigned char* p, P v) { _mm256_stream_ps(reinterpret_cast<float*>(p), v); }
};

template <>
struct Lanes<DataType::kF64> {
  using Math = F64Math;
  using P = __m256d;
  static constexpr size_t kLanes = 4;
  static constexpr size_t kBytes = 8;
  static __m256d load(const unsigned char* p) {
    return _mm256_loadu_pd(reinterpret_cast<const double*>(p));
  }
  static P pack(__m256d v) { return v; }
  static void store(unsigned char* p, P v) { _mm256_storeu_pd(reinterpret_cast<double*>(p), v); }
  static void stream(unsigned char* p, P v) { _mm256_stream_pd(reinterpret_cast<double*>(p), v); }
};

template <>
struct Lanes<DataType::kI32> {
  using Math = I32Math;
  using P = __m256i;
  static constexpr size_t kLanes = 8;
  static constexpr size_t kBytes = 4;
  static __m256i load(const unsigned char* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  static P pack(__m256i v) { return v; }
  static void store(unsigned char* p, P v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
  }
  static void stream(unsigned char* p, P v) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), v);
  }
};

template <>
struct Lanes<DataType::kI64> {
  using Math = I64Math;
  using P = __m256i;
  static constexpr size_t kLanes = 4;
  static constexpr size_t kBytes = 8;
  static __m256i load(const unsigned char* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  static P pack(__m256i v) { return v; }
  static void store(unsigned char* p, P v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
  }
  static void stream(unsigned char* p, P v) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), v);
  }
};

// bf16 is computed in fp32, without cross-lane shuffles. One 32-byte load holds 16 bf16, two per
// 32-bit lane: element 2k in the low half of lane k, element 2k+1 in the high half. Shifting the
// lane left 16 gives element 2k's exact fp32 value (`even`); clearing the low half gives element
// 2k+1's (`odd`). After rounding, each result sits in the high half of its lane; shifting `even`
// right 16 and blending in the high halves of `odd` restores the memory order.
struct F32Pair {
  __m256 even;
  __m256 odd;
};

struct F32PairMath {
  using V = F32Pair;
  using Div = F32Math::Div;
  static Div make_div(int divide_by) { return F32Math::make_div(divide_by); }
  static V add(V a, V b) { return {F32Math::add(a.even, b.even), F32Math::add(a.odd, b.odd)}; }
  static V min(V a, V b) { return {F32Math::min(a.even, b.even), F32Math::min(a.odd, b.odd)}; }
  static V max(V a, V b) { return {F32Math::max(a.even, b.even), F32Math::max(a.odd, b.odd)}; }
  static V div(V s, Div d) { return {F32Math::div(s.even, d), F32Math::div(s.odd, d)}; }
};

template <>
struct Lanes<DataType::kBF16> {
  using Math = F32PairMath;
  using P = __m256i;
  static constexpr size_t kLanes = 16;
  static constexpr size_t kBytes = 2;
  // VPBLENDW immediate selecting the high (odd-numbered) 16-bit word of every 32-bit lane.
  static constexpr int kOddWords = 0xAA;
  static F32Pair load(const unsigned char* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return {_mm256_castsi256_ps(_mm256_slli_epi32(h, 16)),
            _mm256_castsi256_ps(_mm256_and_si256(h, _mm256_set1_epi32(0xFFFF0000u)))};
  }
  // reduce_scalar_ops.h's f32_to_bf16 on 8 lanes, result in the high half of each lane: add 0x7FFF
  // plus the lowest kept bit (bit 16); where the value is NaN, set the quiet bit instead.
  static __m256i round(__m256 v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded =
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(kBf16RoundBias)), lsb);
    const __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(kBf16QuietBit << 16));
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    return _mm256_blendv_epi8(rounded, quiet, nan);
  }
  static P pack(F32Pair v) {
    return _mm256_blend_epi16(_mm256_srli_epi32(round(v.even), 16), round(v.odd), kOddWords);
  }
  static void store(unsigned char* p, P v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
  }
  static void stream(unsigned char* p, P v) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), v);
  }
};

template <DataType D, Kind K>
struct VecOp {
  using Math = typename Lanes<D>::Math;
  using V = typename Math::V;
  explicit VecOp(int divide_by) : div(Math::make_div(divide_by)) {}
  V operator()(V a, V b) const {
    if constexpr (K == Kind::kSum) {
      return Math::add(a, b);
    } else if constexpr (K == Kind::kMin) {
      return Math::min(a, b);
    } else if constexpr (K == Kind::kMax) {
      return Math::max(a, b);
    } else {
      return Math::div(Math::add(a, b), div);
    }
  }
  typename Math::Div div;
};

// The pointers of one reduction, copied out of KernelArgs into locals by each loop: the stores
// may alias anything, so fields read through a reference would be reloaded after every store.
struct Ptrs {
  const unsigned char* a;
  const unsigned char* b;
  unsigned char* dst;
  unsigned char* dst2;
};

// Elements [i, end) in full vectors, stored plainly or (kStream) non-temporally, in which case
// dst and dst2 must be 32-byte aligned at element i. Returns the first element not done.
template <DataType D, Kind K, bool kCopy, bool kStream>
size_t full_vectors(Ptrs p, const VecOp<D, K>& op, size_t i, size_t end, bool stream_dst2) {
  using L = Lanes<D>;
  const unsigned char* const a = p.a;
  const unsigned char* const b = p.b;
  unsigned char* const dst = p.dst;
  unsigned char* const dst2 = p.dst2;
#pragma GCC unroll kUnroll
  for (; end - i >= L::kLanes; i += L::kLanes) {
    const size_t off = i * L::kBytes;
    const typename L::P r = L::pack(op(L::load(a + off), L::load(b + off)));
    if constexpr (kStream) {
      L::stream(dst + off, r);
      if constexpr (kCopy) {
        if (stream_dst2) {
          L::stream(dst2 + off, r);
        } else {
          L::store(dst2 + off, r);  // a link's slot that a peer reads next: keep it in cache
        }
      }
    } else {
      L::store(dst + off, r);
      if constexpr (kCopy) L::store(dst2 + off, r);
    }
  }
  return i;
}

// A large destination: the scalar loop up to the first 32-byte boundary of dst, then streamed
// full vectors (see streaming_head), then an SFENCE so the streamed results are ordered before
// any later store of this thread (such as a flag that tells a peer the data is ready), as plain
// stores would be. Then, or otherwise, plain full vectors and the scalar loop for the rest.
// Element i of the result depends only on a[i] and b[i], which are loaded before it is stored,
// so dst (or dst2) may be exactly a or b.
template <DataType D, Kind K, bool kCopy>
void vector_loop(const KernelArgs& args) {
  using L = Lanes<D>;
  const Ptrs p{args.a, args.b, args.dst, args.dst2};
  const size_t n = args.count;
  const VecOp<D, K> op(args.divide_by);
  size_t i = 0;  // element index
  const size_t head = streaming_head(args, L::kBytes, L::kLanes * L::kBytes);
  if (head != kNoStreaming) {
    scalar_loop<D, K>(args, 0, head);
    i = full_vectors<D, K, kCopy, true>(p, op, head, n, args.stream_dst2);
    _mm_sfence();
  }
  i = full_vectors<D, K, kCopy, false>(p, op, i, n, false);
  scalar_loop<D, K>(args, i, n);
}

template <DataType D, Kind K>
struct Avx2Kernel {
  static void run(const KernelArgs& args) {
    if constexpr (D == DataType::kI64 && K == Kind::kAvg) {
      // x86 has no vector 64-bit integer division, and doing it in double is inexact above
      // 2^53; an avg divides once per collective (its last step), so the scalar loop is used.
      scalar_loop<D, K>(args, 0, args.count);
    } else if (args.dst2 == nullptr) {
      vector_loop<D, K, false>(args);
    } else {
      vector_loop<D, K, true>(args);
    }
  }
};

}  // namespace

void reduce_kernel_avx2(const KernelArgs& args) {
  dispatch<Avx2Kernel>(args);
}

}  // namespace kiln::comm::reduce_internal
