// The element-wise semantics of every DataType x Kind, one element at a time: the specification
// the vector kernels must match bit for bit, and the code they run for their tails.
//
// Included only by the kernel TUs (reduce_kernels_{scalar,avx2,avx512}.cc), which are compiled
// with different -m flags. Everything here therefore has internal linkage (an unnamed namespace):
// an inline function or template with external linkage would be emitted by each TU and the linker
// would keep one copy, possibly the AVX-512 one, for the scalar path of a CPU without AVX-512.
// For the same reason this file calls no std:: function templates (bit_cast, min, max): only
// compiler builtins, which are expanded in place.
//
// Memory is accessed through __builtin_memcpy on byte pointers, so no pointer needs the alignment
// of its element type, and exact aliasing of dst with a or b is harmless (each element is read
// before it is written).
#ifndef KILN_COMM_REDUCE_REDUCE_SCALAR_OPS_H_
#define KILN_COMM_REDUCE_REDUCE_SCALAR_OPS_H_

#include <cstddef>
#include <cstdint>

#include "comm/reduce/reduce_kernels_internal.h"

namespace kiln::comm::reduce_internal {
namespace {

// A quiet NaN has the top mantissa bit set; in bf16 (7 mantissa bits) that is bit 6.
constexpr uint16_t kBf16QuietBit = 0x0040;
// Rounding fp32 to bf16 drops the low 16 bits: adding 0x7FFF plus the lowest kept bit before the
// shift rounds to nearest with ties to even.
constexpr uint32_t kBf16RoundBias = 0x7FFF;

inline uint32_t f32_bits(float x) {
  uint32_t u;
  __builtin_memcpy(&u, &x, sizeof(u));
  return u;
}

inline float f32_from_bits(uint32_t u) {
  float x;
  __builtin_memcpy(&x, &u, sizeof(x));
  return x;
}

// Exact: every bf16 value is an fp32 value.
inline float bf16_to_f32(uint16_t h) {
  return f32_from_bits(static_cast<uint32_t>(h) << 16);
}

// Round to nearest even; NaN becomes a quiet NaN with the same sign and top payload bits. Cannot
// overflow the 32-bit add: only NaNs lie above 0xFF800000 and they take the other branch.
inline uint16_t f32_to_bf16(float x) {
  const uint32_t u = f32_bits(x);
  if (x != x) return static_cast<uint16_t>((u >> 16) | kBf16QuietBit);
  return static_cast<uint16_t>((u + kBf16RoundBias + ((u >> 16) & 1)) >> 16);
}

template <typename T>
inline T load_at(const unsigned char* p, size_t index) {
  T v;
  __builtin_memcpy(&v, p + index * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
inline void store_at(unsigned char* p, size_t index, T v) {
  __builtin_memcpy(p + index * sizeof(T), &v, sizeof(T));
}

// NaN-propagating min and max with x86's MINPS/MAXPS operand order: when neither operand is NaN
// this is exactly `a < b ? a : b` (so min(-0, +0) is +0, the second operand), which is what the
// vector kernels compute with min(a, b) followed by "take a where a is NaN".
template <typename F>
inline F nan_min(F a, F b) {
  if (a != a) return a;
  return a < b ? a : b;
}
template <typename F>
inline F nan_max(F a, F b) {
  if (a != a) return a;
  return a > b ? a : b;
}

// One element of a float reduction (F is float or double), in F's precision. `divisor` is
// divide_by converted to F once, exactly as the vector kernels broadcast it.
template <typename F, Kind K>
inline F float_op(F a, F b, F divisor) {
  if constexpr (K == Kind::kSum) {
    return a + b;
  } else if constexpr (K == Kind::kMin) {
    return nan_min(a, b);
  } else if constexpr (K == Kind::kMax) {
    return nan_max(a, b);
  } else {
    return (a + b) / divisor;
  }
}

// a + b modulo 2^bits, computed in the unsigned type U (signed overflow would be undefined); the
// conversion back to T is modular since C++20.
template <typename T, typename U>
inline T wrapping_add(T a, T b) {
  return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
}

// One element of an integer reduction: the sum wraps (computed in the unsigned type U), the
// division of an avg truncates toward zero (C++ integer division).
template <typename T, typename U, Kind K>
inline T int_op(T a, T b, T divisor) {
  if constexpr (K == Kind::kSum) {
    return wrapping_add<T, U>(a, b);
  } else if constexpr (K == Kind::kMin) {
    return a < b ? a : b;
  } else if constexpr (K == Kind::kMax) {
    return a > b ? a : b;
  } else {
    return static_cast<T>(wrapping_add<T, U>(a, b) / divisor);
  }
}

// ScalarOp<D, K>: the element type T as stored, and T operator()(T a, T b).
template <DataType D, Kind K>
struct ScalarOp;

template <Kind K>
struct ScalarOp<DataType::kF32, K> {
  using T = float;
  explicit ScalarOp(int divide_by) : divisor(static_cast<float>(divide_by)) {}
  T operator()(T a, T b) const { return float_op<float, K>(a, b, divisor); }
  float divisor;
};

template <Kind K>
struct ScalarOp<DataType::kF64, K> {
  using T = double;
  explicit ScalarOp(int divide_by) : divisor(static_cast<double>(divide_by)) {}
  T operator()(T a, T b) const { return float_op<double, K>(a, b, divisor); }
  double divisor;
};

template <Kind K>
struct ScalarOp<DataType::kBF16, K> {
  using T = uint16_t;
  explicit ScalarOp(int divide_by) : divisor(static_cast<float>(divide_by)) {}
  T operator()(T a, T b) const {
    return f32_to_bf16(float_op<float, K>(bf16_to_f32(a), bf16_to_f32(b), divisor));
  }
  float divisor;
};

template <Kind K>
struct ScalarOp<DataType::kI32, K> {
  using T = int32_t;
  explicit ScalarOp(int divide_by) : divisor(divide_by) {}
  T operator()(T a, T b) const { return int_op<int32_t, uint32_t, K>(a, b, divisor); }
  int32_t divisor;
};

template <Kind K>
struct ScalarOp<DataType::kI64, K> {
  using T = int64_t;
  explicit ScalarOp(int divide_by) : divisor(divide_by) {}
  T operator()(T a, T b) const { return int_op<int64_t, uint64_t, K>(a, b, divisor); }
  int64_t divisor;
};

// Elements [begin, end) one at a time. The dst2 test is hoisted out of the loop, and the pointers
// are copied to locals: the stores may alias anything, including `args`.
template <DataType D, Kind K>
inline void scalar_loop(const KernelArgs& args, size_t begin, size_t end) {
  using T = typename ScalarOp<D, K>::T;
  const ScalarOp<D, K> op(args.divide_by);
  const unsigned char* const a = args.a;
  const unsigned char* const b = args.b;
  unsigned char* const dst = args.dst;
  unsigned char* const dst2 = args.dst2;
  if (dst2 == nullptr) {
    for (size_t i = begin; i < end; ++i) {
      store_at<T>(dst, i, op(load_at<T>(a, i), load_at<T>(b, i)));
    }
  } else {
    for (size_t i = begin; i < end; ++i) {
      const T r = op(load_at<T>(a, i), load_at<T>(b, i));
      store_at<T>(dst, i, r);
      store_at<T>(dst2, i, r);
    }
  }
}

// streaming_head's answer when a reduction should use plain stores throughout.
constexpr size_t kNoStreaming = SIZE_MAX;

// How a vector kernel with `vec_bytes`-wide aligned streaming stores should run: kNoStreaming
// (plain stores throughout), or the number of leading elements to store plainly before dst
// reaches a `vec_bytes` boundary, after which full vectors are streamed. Streams only when
// args.stream says so, dst is aligned to its element (else no element boundary is a vector
// boundary) and a dst2 that is streamed too reaches a vector boundary at the same element.
inline size_t streaming_head(const KernelArgs& args, size_t elem_bytes, size_t vec_bytes) {
  if (!args.stream) return kNoStreaming;
  const auto d = reinterpret_cast<uintptr_t>(args.dst);
  if (d % elem_bytes != 0) return kNoStreaming;
  if (args.stream_dst2 && args.dst2 != nullptr &&
      (reinterpret_cast<uintptr_t>(args.dst2) - d) % vec_bytes != 0) {
    return kNoStreaming;
  }
  const size_t head = (vec_bytes - d % vec_bytes) % vec_bytes / elem_bytes;
  // A call too short to reach a vector boundary has nothing to stream (a small call asked to
  // stream: ReduceArgs::stream_dst); the head must never run past its count.
  return head < args.count ? head : kNoStreaming;
}

// Turns the run-time (dtype, kind) into Kernel<D, K>::run(args): the one place where they become
// template parameters.
template <template <DataType, Kind> class Kernel, DataType D>
inline void dispatch_kind(const KernelArgs& args) {
  switch (args.kind) {
    case Kind::kSum: return Kernel<D, Kind::kSum>::run(args);
    case Kind::kMin: return Kernel<D, Kind::kMin>::run(args);
    case Kind::kMax: return Kernel<D, Kind::kMax>::run(args);
    case Kind::kAvg: return Kernel<D, Kind::kAvg>::run(args);
  }
}

template <template <DataType, Kind> class Kernel>
inline void dispatch(const KernelArgs& args) {
  switch (args.dtype) {
    case DataType::kF32: return dispatch_kind<Kernel, DataType::kF32>(args);
    case DataType::kF64: return dispatch_kind<Kernel, DataType::kF64>(args);
    case DataType::kBF16: return dispatch_kind<Kernel, DataType::kBF16>(args);
    case DataType::kI32: return dispatch_kind<Kernel, DataType::kI32>(args);
    case DataType::kI64: return dispatch_kind<Kernel, DataType::kI64>(args);
  }
}

}  // namespace
}  // namespace kiln::comm::reduce_internal

#endif  // KILN_COMM_REDUCE_REDUCE_SCALAR_OPS_H_
