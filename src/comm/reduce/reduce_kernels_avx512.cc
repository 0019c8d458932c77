// The AVX-512 reduce kernel (F, BW, DQ, VL): 64-byte vectors, unrolled four to a loop iteration,
// and the last partial vector done with masked loads and stores, so no element is touched twice
// and no byte outside the buffers is read or written (masked-off lanes do not fault). Large
// destinations are written with non-temporal stores (kStreamBytesMin).
//
// Compiled with -mavx512f -mavx512bw -mavx512dq -mavx512vl (reduce.cmake); only reached through
// the dispatcher after it has seen these features. Results are bit-identical to the scalar kernel
// (reduce_scalar_ops.h): the same IEEE operations in the same precision, the same operand order
// for min/max, the same bf16 rounding done on 16 lanes at once.
//
// Shapes: a "Lanes" struct says how one vector of a DataType is loaded and stored (32 bf16 are
// widened to two vectors of 16 fp32 on load and rounded back on store); a "Math" struct holds the
// arithmetic of the type computed in (f32, f64, i32, i64).

// GCC 12.1 and 12.2 warn "__Y may be used uninitialized" inside every AVX-512 intrinsic that
// starts from _mm512_undefined_*() once it is inlined into our code (GCC bug 105593, fixed in
// 12.3). The warning is located in the intrinsic headers, so silencing it for their lines only
// keeps it on for this file's own code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

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
  using V = __m512;
  using Div = __m512;
  static Div make_div(int divide_by) { return _mm512_set1_ps(static_cast<float>(divide_by)); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  // MINPS returns its second operand when either is NaN; put a back where a is NaN.
  static V min(V a, V b) {
    return _mm512_mask_mov_ps(_mm512_min_ps(a, b), _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a);
  }
  static V max(V a, V b) {
    return _mm512_mask_mov_ps(_mm512_max_ps(a, b), _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a);
  }
  static V div(V s, Div d) { return _mm512_div_ps(s, d); }
};

struct F64Math {
  using V = __m512d;
  using Div = __m512d;
  static Div make_div(int divide_by) { return _mm512_set1_pd(static_cast<double>(divide_by)); }
  static V add(V a, V b) { return _mm512_add_pd(a, b); }
  static V min(V a, V b) {
    return _mm512_mask_mov_pd(_mm512_min_pd(a, b), _mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q), a);
  }
  static V max(V a, V b) {
    return _mm512_mask_mov_pd(_mm512_max_pd(a, b), _mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q), a);
  }
  static V div(V s, Div d) { return _mm512_div_pd(s, d); }
};

struct I32Math {
  using V = __m512i;
  using Div = __m512d;
  static Div make_div(int divide_by) { return _mm512_set1_pd(static_cast<double>(divide_by)); }
  static V add(V a, V b) { return _mm512_add_epi32(a, b); }  // wraps
  static V min(V a, V b) { return _mm512_min_epi32(a, b); }
  static V max(V a, V b) { return _mm512_max_epi32(a, b); }
  // There is no vector integer division. In double, s and d are exact and trunc(fl(s / d)) is the
  // truncated quotient: if d does not divide s, s / d lies at least 1/d from every integer while
  // the rounding error is at most |s / d| * 2^-53 <= 2^31 / d * 2^-53 < 1/d.
  static V div(V s, Div d) {
    const __m256i lo =
        _mm512_cvttpd_epi32(_mm512_div_pd(_mm512_cvtepi32_pd(_mm512_castsi512_si256(s)), d));
    const __m256i hi =
        _mm512_cvttpd_epi32(_mm512_div_pd(_mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(s, 1)), d));
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  }
};

// No div: an i64 avg that divides runs the scalar loop (see Avx512Kernel).
struct I64Math {
  using V = __m512i;
  using Div = int;
  static Div make_div(int divide_by) { return divide_by; }
  static V add(V a, V b) { return _mm512_add_epi64(a, b); }  // wraps
  static V min(V a, V b) { return _mm512_min_epi64(a, b); }
  static V max(V a, V b) { return _mm512_max_epi64(a, b); }
};

// Lanes<D>: Math, the mask type, lanes per vector, bytes per element; load (full or masked) to a
// Math::V; pack a result into its stored form P; store P (full or masked).
template <DataType D>
struct Lanes;

template <>
struct Lanes<DataType::kF32> {
  using Math = F32Math;
  using Mask = __mmask16;
  using P = __m512;
  static constexpr size_t kLanes = 16;
  static constexpr size_t kBytes = 4;
  static __m512 load(const unsigned char* p) { return _mm512_loadu_ps(p); }
  static __m512 load(const unsigned char* p, Mask m) { return _mm512_maskz_loadu_ps(m, p); }
  static P pack(__m512 v) { return v; }
  static void store(unsigned char* p, P v) { _mm512_storeu_ps(p, v); }
  static void stream(unsigned char* p, P v) { _mm512_stream_ps(reinterpret_cast<float*>(p), v); }
  static void store(unsigned char* p, P v, Mask m) { _mm512_mask_storeu_ps(p, m, v); }
};

template <>
struct Lanes<DataType::kF64> {
  using Math = F64Math;
  using Mask = __mmask8;
  using P = __m512d;
  static constexpr size_t kLanes = 8;
  static constexpr size_t kBytes = 8;
  static __m512d load(const unsigned char* p) { return _mm512_loadu_pd(p); }
  static __m512d load(const unsigned char* p, Mask m) { return _mm512_maskz_loadu_pd(m, p); }
  static P pack(__m512d v) { return v; }
  static void store(unsigned char* p, P v) { _mm512_storeu_pd(p, v); }
  static void stream(unsigned char* p, P v) { _mm512_stream_pd(reinterpret_cast<double*>(p), v); }
  static void store(unsigned char* p, P v, Mask m) { _mm512_mask_storeu_pd(p, m, v); }
};

template <>
struct Lanes<DataType::kI32> {
  using Math = I32Math;
  using Mask = __mmask16;
  using P = __m512i;
  static constexpr size_t kLanes = 16;
  static constexpr size_t kBytes = 4;
  static __m512i load(const unsigned char* p) { return _mm512_loadu_si512(p); }
  static __m512i load(const unsigned char* p, Mask m) { return _mm512_maskz_loadu_epi32(m, p); }
  static P pack(__m512i v) { return v; }
  static void store(unsigned char* p, P v) { _mm512_storeu_si512(p, v); }
  static void stream(unsigned char* p, P v) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(p), v);
  }
  static void store(unsigned char* p, P v, Mask m) { _mm512_mask_storeu_epi32(p, m, v); }
};

template <>
struct Lanes<DataType::kI64> {
  using Math = I64Math;
  using Mask = __mmask8;
  using P = __m512i;
  static constexpr size_t kLanes = 8;
  static constexpr size_t kBytes = 8;
  static __m512i load(const unsigned char* p) { return _mm512_loadu_si512(p); }
  static __m512i load(const unsigned char* p, Mask m) { return _mm512_maskz_loadu_epi64(m, p); }
  static P pack(__m512i v) { return v; }
  static void store(unsigned char* p, P v) { _mm512_storeu_si512(p, v); }
  static void stream(unsigned char* p, P v) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(p), v);
  }
  static void store(unsigned char* p, P v, Mask m) { _mm512_mask_storeu_epi64(p, m, v); }
};

// bf16 is computed in fp32, without shuffles. One 64-byte load holds 32 bf16, two per 32-bit
// lane: element 2k in the low half of lane k, element 2k+1 in the high half. Shifting the lane
// left 16 gives element 2k's exact fp32 value (`even`); clearing the low half gives element
// 2k+1's (`odd`). After rounding, each result sits in the high half of its lane; shifting `even`
// right 16 and blending in the high halves of `odd` restores the memory order.
struct F32Pair {
  __m512 even;
  __m512 odd;
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
  using Mask = __mmask32;
  using P = __m512i;
  static constexpr size_t kLanes = 32;
  static constexpr size_t kBytes = 2;
  // Selects the high (odd-numbered) 16-bit word of every 32-bit lane.
  static constexpr __mmask32 kOddWords = 0xAAAAAAAA;
  static F32Pair widen(__m512i h) {
    return {_mm512_castsi512_ps(_mm512_slli_epi32(h, 16)),
            _mm512_castsi512_ps(_mm512_and_si512(h, _mm512_set1_epi32(0xFFFF0000u)))};
  }
  static F32Pair load(const unsigned char* p) { return widen(_mm512_loadu_si512(p)); }
  static F32Pair load(const unsigned char* p, Mask m) {
    return widen(_mm512_maskz_loadu_epi16(m, p));
  }
  // reduce_scalar_ops.h's f32_to_bf16 on 16 lanes, result in the high half of each lane: add
  // 0x7FFF plus the lowest kept bit (bit 16); where the value is NaN, set the quiet bit instead.
  static __m512i round(__m512 v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i biased = _mm512_add_epi32(u, _mm512_set1_epi32(kBf16RoundBias));
    const __mmask16 odd_lsb = _mm512_test_epi32_mask(u, _mm512_set1_epi32(1 << 16));
    const __m512i rounded = _mm512_mask_add_epi32(biased, odd_lsb, biased, _mm512_set1_epi32(1));
    return _mm512_mask_or_epi32(rounded, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), u,
                                _mm512_set1_epi32(kBf16QuietBit << 16));
  }
  static P pack(F32Pair v) {
    return _mm512_mask_blend_epi16(kOddWords, _mm512_srli_epi32(round(v.even), 16), round(v.odd));
  }
  static void store(unsigned char* p, P v) { _mm512_storeu_si512(p, v); }
  static void stream(unsigned char* p, P v) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(p), v);
  }
  static void store(unsigned char* p, P v, Mask m) { _mm512_mask_storeu_epi16(p, m, v); }
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
// dst and dst2 must be 64-byte aligned at element i. Returns the first element not done.
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

// Elements [i, end), end - i < kLanes, as one masked vector.
template <DataType D, Kind K, bool kCopy>
void masked_vector(Ptrs p, const VecOp<D, K>& op, size_t i, size_t end) {
  using L = Lanes<D>;
  if (i == end) return;
  // end - i < kLanes <= 32, so the shift is in range.
  const auto m = static_cast<typename L::Mask>((1u << (end - i)) - 1);
  const size_t off = i * L::kBytes;
  const typename L::P r = L::pack(op(L::load(p.a + off, m), L::load(p.b + off, m)));
  L::store(p.dst + off, r, m);
  if constexpr (kCopy) L::store(p.dst2 + off, r, m);
}

// A large destination: plain stores up to the first 64-byte boundary of dst, then streamed full
// vectors (see streaming_head), then an SFENCE so the streamed results are ordered before any
// later store of this thread (such as a flag that tells a peer the data is ready), as plain
// stores would be. Then, or otherwise, plain full vectors and one masked vector for the rest.
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
    masked_vector<D, K, kCopy>(p, op, 0, head);
    i = full_vectors<D, K, kCopy, true>(p, op, head, n, args.stream_dst2);
    _mm_sfence();
  }
  i = full_vectors<D, K, kCopy, false>(p, op, i, n, false);
  masked_vector<D, K, kCopy>(p, op, i, n);
}

template <DataType D, Kind K>
struct Avx512Kernel {
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

void reduce_kernel_avx512(const KernelArgs& args) {
  dispatch<Avx512Kernel>(args);
}

}  // namespace kiln::comm::reduce_internal
