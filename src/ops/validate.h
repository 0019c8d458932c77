// Checks of an op's views, with errors that name the op and the operand:
//   "layernorm_forward: weight is f32[384] but must be f32[768]"
#ifndef KILN_OPS_VALIDATE_H_
#define KILN_OPS_VALIDATE_H_

#include <kiln/base/status.h>
#include <kiln/ops/tensor.h>

#include <cstdint>
#include <initializer_list>

namespace kiln::ops {

// `t` has this dtype and exactly these sizes (-1 matches any size).
Status expect_shape(const char* op, const char* name, const TensorView& t, DType dtype,
                    std::initializer_list<int64_t> shape);
// `t` is present (data != nullptr).
Status expect_present(const char* op, const char* name, const TensorView& t);
// The last dimension has stride 1.
Status expect_unit_inner_stride(const char* op, const char* name, const TensorView& t);
// Fully contiguous.
Status expect_contiguous(const char* op, const char* name, const TensorView& t);
// Same numel (for element-wise ops).
Status expect_same_numel(const char* op, const char* name, const TensorView& t, int64_t numel);
// No byte of `t` lies within the bytes `other` spans (from its first element to its last): an
// output an op writes in another dtype than its input's, which must not overwrite input still
// to be read.
Status expect_disjoint(const char* op, const char* name, const TensorView& t,
                       const char* other_name, const TensorView& other);

}  // namespace kiln::ops

#endif  // KILN_OPS_VALIDATE_H_
