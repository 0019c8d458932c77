// The element types and reductions that kiln_comm's collectives understand.
#ifndef KILN_COMM_TYPES_H_
#define KILN_COMM_TYPES_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include <kiln/base/result.h>

namespace kiln::comm {

// Values are stable: they travel in frame headers.
enum class DataType : uint8_t {
  kF32 = 0,
  kF64 = 1,
  kBF16 = 2,  // bfloat16; reduced in fp32 and rounded to nearest even
  kI32 = 3,
  kI64 = 4,
};
inline constexpr int kDataTypeCount = 5;

// Values are stable: they travel in frame headers.
enum class ReduceOp : uint8_t {
  kSum = 0,
  kMin = 1,
  kMax = 2,
  // The sum divided by the world size. Integers divide with truncation toward zero after the sum
  // (as NCCL does); floats divide in their own precision (bf16 in fp32).
  kAvg = 3,
};
inline constexpr int kReduceOpCount = 4;

// Bytes per element: 4, 8, 2, 4, 8.
size_t dtype_size(DataType dtype);
std::string_view dtype_name(DataType dtype);  // "f32", "f64", "bf16", "i32", "i64"
Result<DataType> parse_dtype(std::string_view name);
std::string_view reduce_op_name(ReduceOp op);  // "sum", "min", "max", "avg"
Result<ReduceOp> parse_reduce_op(std::string_view name);

}  // namespace kiln::comm

#endif  // KILN_COMM_TYPES_H_
