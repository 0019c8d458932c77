// See include/kiln/ops/attention.h. The kernels are in cpu/attention.inc.
#include <kiln/ops/attention.h>

#include <cmath>
#include <string>

#include <kiln/ops/matmul.h>

#include "ops/cpu/kernels_linear.h"
#include "ops/dispatch.h"
#include "ops/validate.h"

namespace kiln::ops {
namespace {

// A (B, T, H, D) operand shaped like q, of `dtype`, with a unit stride in D.
Status check_like_q(const char* op, const char* name, const TensorView& t, const TensorView& q,
                    DType dtype = DType::kF32) {
  KILN_RETURN_IF_ERROR(
      expect_shape(op, name, t, dtype, {q.shape[0], q.shape[1], q.shape[2], q.shape[3]}));
  return expect_unit_inner_stride(op, name, t);
}

// q's own checks (f32 or bf16), the head dimension's range and
// the scale; fills in nothing.
Status check_q(const char* op, const TensorView& q, float scale) {
  KILN_RETURN_IF_ERROR(expect_shape(
      op, "q", q, q.dtype == DType::kBF16 ? DType::kBF16 : DType::kF32, {-1, -1, -1, -1}));
  KILN_RETURN_IF_ERROR(expect_unit_inner_stride(op, "q", q));
  if (q.shape[3] < 1 || q.shape[3] > kAttentionHeadDimMax) {
    return Status::invalid_argument(std::string(op) + ": q (" + q.describe() +
                                    ") has head dimension " + std::to_string(q.shape[3]) +
                                    ", must be in [1, " + std::to_string(kAttentionHeadDimMax) +
                                    "]");
  }
  if (!std::isfinite(scale) || scale < 0) {
    return Status::invalid_argument(std::string(op) + ": scale " + std::to_string(scale) +
                                    " must be finite and positive (0 for 1/sqrt(D))");
  }
  return Status();
}

Status check_lse(const char* op, const TensorView& lse, const TensorView& q) {
  KILN_RETURN_IF_ERROR(
      expect_shape(op, "lse", lse, DType::kF32, {q.shape[0], q.shape[2], q.shape[1]}));
  return expect_contiguous(op, "lse", lse);
}

}  // namespace

Status attention_forward(const AttentionParams& p, const Context& ctx) {
  constexpr const char* kOp = "attention_forward";
  KILN_RETURN_IF_ERROR(check_q(kOp, p.q, p.scale));
  KILN_RETURN_IF_ERROR(check_like_q(kOp, "k", p.k, p.q, p.q.dtype));
  KILN_RETURN_IF_ERROR(check_like_q(kOp, "v", p.v, p.q, p.q.dtype));
  KILN_RETURN_IF_ERROR(check_like_q(kOp, "o", p.o, p.q));
  KILN_RETURN_IF_ERROR(check_lse(kOp, p.lse, p.q));
  if (p.q.dtype == DType::kBF16) {
    return KILN_OPS_DISPATCH(ctx, kOp, attention_forward_bf16, p, ctx);
  }
  return KILN_OPS_DISPATCH(ctx, kOp, attention_forward, p, ctx);
}

Status attention_backward(const AttentionBackwardParams& p, const Context& ctx) {
  constexpr const char* kOp = "attention_backward";
  KILN_RETURN_IF_ERROR(check_q(kOp, p.q, p.scale));
  KILN_RETURN_IF_ERROR(check_like_q(kOp, "k", p.k, p.q, p.q.dtype));
  KILN_RETURN_IF_ERROR(check_like_q(kOp, "v", p.v, p.q, p.q.dtype));
  KILN_RETURN_IF_ERROR(check_like_q(kOp, "o", p.o, p.q));
  KILN_RETURN_IF_ERROR(check_lse(kOp, p.lse, p.q));
  KILN_RETURN_IF_ERROR(check_like_q(kOp, "dout", p.dout, p.q, p.q.dtype));
  KILN_RETURN_IF_ERROR(check_like_q(kOp, "dq", p.dq, p.q));
  KILN_RETURN_IF_ERROR(check_like_q(kOp, "dk", p.dk, p.q));
  KILN_RETURN_IF_ERROR(check_like_q(kOp, "dv", p.dv, p.q));
  if (p.q.dtype == DType::kBF16) {
    return KILN_OPS_DISPATCH(ctx, kOp, attention_backward_bf16, p, ctx);
  }
  return KILN_OPS_DISPATCH(ctx, kOp, attention_backward, p, ctx);
}

}  // namespace kiln::ops
