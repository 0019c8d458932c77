// GELU and residual add: validation and dispatch to cpu/pointwise.inc's kernels.
//
// Every view must be f32 (GELU's y and dx may be bf16), contiguous and of the same numel (any
// shape); outputs may alias inputs exactly where the header allows (y with x, dx with dy, y with a
// or b), which the kernels support because each element is read before it is written. Invalid views
// are reported before anything is written.
#include <kiln/ops/elementwise.h>

#include <cstdint>
#include <string>

#include "ops/cpu/kernels_pointwise.h"
#include "ops/dispatch.h"
#include "ops/validate.h"

namespace kiln::ops {
namespace {

// f32, contiguous, `numel` elements.
Status expect_flat_f32(const char* op, const char* name, const TensorView& t, int64_t numel) {
  KILN_RETURN_IF_ERROR(expect_same_numel(op, name, t, numel));
  if (t.dtype != DType::kF32) {
    return Status::invalid_argument(std::string(op) + ": " + name + " is " + t.describe() +
                                    " but must be f32");
  }
  return expect_contiguous(op, name, t);
}

// f32 or bf16 (an output the kernel rounds to bf16), contiguous, `numel` elements.
Status expect_flat_f32_or_bf16(const char* op, const char* name, const TensorView& t,
                               int64_t numel) {
  KILN_RETURN_IF_ERROR(expect_same_numel(op, name, t, numel));
  if (t.dtype != DType::kF32 && t.dtype != DType::kBF16) {
    return Status::invalid_argument(std::string(op) + ": " + name + " is " + t.describe() +
                                    " but must be f32 or bf16");
  }
  return expect_contiguous(op, name, t);
}

}  // namespace

Status gelu_forward(const GeluParams& p, const Context& ctx) {
  constexpr const char* kOp = "gelu_forward";
  KILN_RETURN_IF_ERROR(expect_present(kOp, "x", p.x));
  const int64_t n = p.x.numel();
  KILN_RETURN_IF_ERROR(expect_flat_f32(kOp, "x", p.x, n));
  KILN_RETURN_IF_ERROR(expect_flat_f32_or_bf16(kOp, "y", p.y, n));
  // An f32 y may be x itself (each element read before it is written); a bf16 y, half the
  // bytes, would overwrite x ahead of the reads.
  if (p.y.dtype == DType::kBF16) KILN_RETURN_IF_ERROR(expect_disjoint(kOp, "y", p.y, "x", p.x));
  return KILN_OPS_DISPATCH(ctx, kOp, gelu_forward, p, ctx);
}

Status gelu_backward(const GeluBackwardParams& p, const Context& ctx) {
  constexpr const char* kOp = "gelu_backward";
  KILN_RETURN_IF_ERROR(expect_present(kOp, "x", p.x));
  const int64_t n = p.x.numel();
  KILN_RETURN_IF_ERROR(expect_flat_f32(kOp, "x", p.x, n));
  KILN_RETURN_IF_ERROR(expect_flat_f32(kOp, "dy", p.dy, n));
  KILN_RETURN_IF_ERROR(expect_flat_f32_or_bf16(kOp, "dx", p.dx, n));
  if (p.dx.dtype == DType::kBF16) {
    if (p.accumulate_dx) {
      return Status::invalid_argument(std::string(kOp) + ": dx is " + p.dx.describe() +
                                      ": a bf16 dx cannot be accumulated into (accumulate_dx)");
    }
    KILN_RETURN_IF_ERROR(expect_disjoint(kOp, "dx", p.dx, "x", p.x));
    KILN_RETURN_IF_ERROR(expect_disjoint(kOp, "dx", p.dx, "dy", p.dy));
  }
  return KILN_OPS_DISPATCH(ctx, kOp, gelu_backward, p, ctx);
}

Status residual_forward(const ResidualParams& p, const Context& ctx) {
  constexpr const char* kOp = "residual_forward";
  KILN_RETURN_IF_ERROR(expect_present(kOp, "a", p.a));
  const int64_t n = p.a.numel();
  KILN_RETURN_IF_ERROR(expect_flat_f32(kOp, "a", p.a, n));
  KILN_RETURN_IF_ERROR(expect_flat_f32(kOp, "b", p.b, n));
  KILN_RETURN_IF_ERROR(expect_flat_f32(kOp, "y", p.y, n));
  return KILN_OPS_DISPATCH(ctx, kOp, residual_forward, p, ctx);
}

Status residual_backward(const ResidualBackwardParams& p, const Context& ctx) {
  constexpr const char* kOp = "residual_backward";
  KILN_RETURN_IF_ERROR(expect_present(kOp, "dy", p.dy));
  const int64_t n = p.dy.numel();
  KILN_RETURN_IF_ERROR(expect_flat_f32(kOp, "dy", p.dy, n));
  KILN_RETURN_IF_ERROR(expect_flat_f32(kOp, "da", p.da, n));
  KILN_RETURN_IF_ERROR(expect_flat_f32(kOp, "db", p.db, n));
  return KILN_OPS_DISPATCH(ctx, kOp, residual_backward, p, ctx);
}

}  // namespace kiln::ops
