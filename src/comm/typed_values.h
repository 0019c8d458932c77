// Typed element access and the analytic expectations of collectives, shared by the
// correctness tests and `kiln comm-bench` (which checks the result of every op).
//
// Inputs are small integers, value(rank, i) = ((7 i + 13 rank) mod (2a + 1)) - a with the
// amplitude a = min(30, 240 / world size), so every partial sum over the ranks stays within
// [-240, 240] and is exact in bf16 (8 significant bits), f32, f64 and the integer types: any
// order of reduction gives the same bits, and the expected result is computed independently here
// in double precision (then rounded once to the output type, as the reduction does).
#ifndef KILN_COMM_TYPED_VALUES_H_
#define KILN_COMM_TYPED_VALUES_H_

#include <kiln/comm/types.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace kiln::comm {

inline int64_t value_amplitude(int world_size) {
  return std::max<int64_t>(1, std::min<int64_t>(30, 240 / std::max(world_size, 1)));
}

inline double input_value(int rank, size_t i, int world_size = 8) {
  const int64_t a = value_amplitude(world_size);
  const size_t modulus = static_cast<size_t>(2 * a + 1);
  return static_cast<double>(
      static_cast<int64_t>((i * 7 + static_cast<size_t>(rank) * 13) % modulus) - a);
}

// float -> bf16 with round-to-nearest-even, written independently of the kernels under test.
inline uint16_t float_to_bf16_rne(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  const uint32_t lsb = (bits >> 16) & 1;
  bits += 0x7fff + lsb;
  return static_cast<uint16_t>(bits >> 16);
}

inline float bf16_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline void store(void* buf, DataType dtype, size_t i, double v) {
  switch (dtype) {
    case DataType::kF32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DataType::kF64: static_cast<double*>(buf)[i] = v; break;
    case DataType::kBF16:
      static_cast<uint16_t*>(buf)[i] = float_to_bf16_rne(static_cast<float>(v));
      break;
    case DataType::kI32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case DataType::kI64: static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v); break;
  }
}

inline double load(const void* buf, DataType dtype, size_t i) {
  switch (dtype) {
    case DataType::kF32: return static_cast<const float*>(buf)[i];
    case DataType::kF64: return static_cast<const double*>(buf)[i];
    case DataType::kBF16: return bf16_to_float(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kI32: return static_cast<const int32_t*>(buf)[i];
    case DataType::kI64: return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
  }
  return 0;
}

// The reduction over ranks 0..n-1 of value(rank, i), as the output type holds it.
inline double expected_reduction(DataType dtype, ReduceOp op, int n, size_t i) {
  double sum = 0;
  double lo = input_value(0, i, n);
  double hi = lo;
  for (int r = 0; r < n; ++r) {
    const double v = input_value(r, i, n);
    sum += v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  switch (op) {
    case ReduceOp::kSum: return sum;
    case ReduceOp::kMin: return lo;
    case ReduceOp::kMax: return hi;
    case ReduceOp::kAvg:
      switch (dtype) {
        case DataType::kI32:
        case DataType::kI64: return std::trunc(sum / n);
        case DataType::kF64: return sum / n;
        case DataType::kF32: return static_cast<float>(sum) / static_cast<float>(n);
        case DataType::kBF16:
          return bf16_to_float(float_to_bf16_rne(static_cast<float>(sum) / static_cast<float>(n)));
      }
  }
  return 0;
}

// A buffer of `count` elements of `dtype`.
inline std::vector<char> make_buffer(DataType dtype, size_t count) {
  return std::vector<char>(count * dtype_size(dtype) + 1);  // +1: never zero-sized
}

}  // namespace kiln::comm

#endif  // KILN_COMM_TYPED_VALUES_H_
