// Names and sizes of kiln_comm's element types and reductions. See include/kiln/comm/types.h.
#include <kiln/comm/types.h>

#include <array>
#include <string>

namespace kiln::comm {
namespace {
constexpr std::array<std::string_view, kDataTypeCount> kDtypeNames = {"f32", "f64", "bf16", "i32",
                                                                      "i64"};
constexpr std::array<size_t, kDataTypeCount> kDtypeSizes = {4, 8, 2, 4, 8};
constexpr std::array<std::string_view, kReduceOpCount> kOpNames = {"sum", "min", "max", "avg"};
}  // namespace

size_t dtype_size(DataType dtype) {
  return kDtypeSizes[static_cast<int>(dtype)];
}
std::string_view dtype_name(DataType dtype) {
  return kDtypeNames[static_cast<int>(dtype)];
}
std::string_view reduce_op_name(ReduceOp op) {
  return kOpNames[static_cast<int>(op)];
}

Result<DataType> parse_dtype(std::string_view name) {
  for (int i = 0; i < kDataTypeCount; ++i) {
    if (kDtypeNames[i] == name) return static_cast<DataType>(i);
  }
  return Status::invalid_argument("unknown dtype '" + std::string(name) +
                                  "' (expected f32, f64, bf16, i32 or i64)");
}

Result<ReduceOp> parse_reduce_op(std::string_view name) {
  for (int i = 0; i < kReduceOpCount; ++i) {
    if (kOpNames[i] == name) return static_cast<ReduceOp>(i);
  }
  return Status::invalid_argument("unknown reduce op '" + std::string(name) +
                                  "' (expected sum, min, max or avg)");
}

}  // namespace kiln::comm
