#include <kiln/comm/types.h>

#include <gtest/gtest.h>

namespace kiln::comm {
namespace {

TEST(CommTypesTest, NamesRoundTripAndSizesAreRight) {
  for (int i = 0; i < kDataTypeCount; ++i) {
    const auto dtype = static_cast<DataType>(i);
    EXPECT_EQ(*parse_dtype(dtype_name(dtype)), dtype);
  }
  for (int i = 0; i < kReduceOpCount; ++i) {
    const auto op = static_cast<ReduceOp>(i);
    EXPECT_EQ(*parse_reduce_op(reduce_op_name(op)), op);
  }
  EXPECT_EQ(dtype_size(DataType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DataType::kF64), 8u);
  EXPECT_EQ(dtype_size(DataType::kI32), 4u);
  EXPECT_TRUE(parse_dtype("f16").status().is_invalid_argument());
  EXPECT_TRUE(parse_reduce_op("prod").status().is_invalid_argument());
}

}  // namespace
}  // namespace kiln::comm
