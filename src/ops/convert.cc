// bf16 <-> f32 conversion: validation and dispatch to cpu/pointwise.inc's kernels (round to
// nearest even, quiet NaNs; see include/kiln/ops/convert.h). Both views contiguous, of equal
// numel, any shape.
#include <kiln/ops/convert.h>

#include <cstdint>
#include <string>

#include "ops/cpu/kernels_pointwise.h"
#include "ops/dispatch.h"
#include "ops/validate.h"

namespace kiln::ops {
namespace {

Status expect_flat(const char* op, const char* name, const TensorView& t, DType dtype,
                   int64_t numel) {
  KILN_RETURN_IF_ERROR(expect_same_numel(op, name, t, numel));
  if (t.dtype != dtype) {
    return Status::invalid_argument(std::string(op) + ": " + name + " is " + t.describe() +
                                    " but must be " + std::string(dtype_name(dtype)));
  }
  return expect_contiguous(op, name, t);
}

}  // namespace

Status convert_f32_to_bf16(const TensorView& src, const TensorView& dst, const Context& ctx) {
  constexpr const char* kOp = "convert_f32_to_bf16";
  KILN_RETURN_IF_ERROR(expect_present(kOp, "src", src));
  KILN_RETURN_IF_ERROR(expect_flat(kOp, "src", src, DType::kF32, src.numel()));
  KILN_RETURN_IF_ERROR(expect_flat(kOp, "dst", dst, DType::kBF16, src.numel()));
  return KILN_OPS_DISPATCH(ctx, kOp, convert_f32_to_bf16, src, dst, ctx);
}

Status convert_bf16_to_f32(const TensorView& src, const TensorView& dst, const Context& ctx) {
  constexpr const char* kOp = "convert_bf16_to_f32";
  KILN_RETURN_IF_ERROR(expect_present(kOp, "src", src));
  KILN_RETURN_IF_ERROR(expect_flat(kOp, "src", src, DType::kBF16, src.numel()));
  KILN_RETURN_IF_ERROR(expect_flat(kOp, "dst", dst, DType::kF32, src.numel()));
  return KILN_OPS_DISPATCH(ctx, kOp, convert_bf16_to_f32, src, dst, ctx);
}

}  // namespace kiln::ops
