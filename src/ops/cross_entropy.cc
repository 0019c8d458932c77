// Fused softmax + cross-entropy: validation and dispatch to cpu/pointwise.inc's kernels.
//
// logits (N, Vp) f32 with a unit inner stride and row stride >= Vp; targets (N) i32; losses,
// lse, dlosses (N) f32; all (N) views contiguous. vocab 0 means Vp, otherwise 1 <= vocab <= Vp.
// Every target is checked against [0, vocab) before anything is written: the backward works in
// place (or into a bf16 dlogits that shares no byte with the logits), so a late error would
// leave the logits half overwritten.
#include <kiln/ops/cross_entropy.h>

#include <cstdint>
#include <string>

#include "ops/cpu/kernels_pointwise.h"
#include "ops/dispatch.h"
#include "ops/validate.h"

namespace kiln::ops {
namespace {

// The logits' shape and strides; on success *vocab is the resolved vocabulary.
Status expect_logits(const char* op, const TensorView& logits, int64_t requested_vocab,
                     int64_t* vocab) {
  KILN_RETURN_IF_ERROR(expect_shape(op, "logits", logits, DType::kF32, {-1, -1}));
  KILN_RETURN_IF_ERROR(expect_unit_inner_stride(op, "logits", logits));
  const int64_t N = logits.shape[0];
  const int64_t Vp = logits.shape[1];
  if (N > 1 && logits.stride[0] < Vp) {
    return Status::invalid_argument(std::string(op) + ": logits (" + logits.describe() +
                                    ") has a row stride of " + std::to_string(logits.stride[0]) +
                                    ", less than its " + std::to_string(Vp) + " columns");
  }
  *vocab = requested_vocab == 0 ? Vp : requested_vocab;
  if (*vocab >= 1 && *vocab <= Vp) return Status();
  return Status::invalid_argument(std::string(op) + ": vocab " + std::to_string(requested_vocab) +
                                  " is outside [1, " + std::to_string(Vp) + "] for logits " +
                                  logits.describe() + " (0 means all columns)");
}

Status expect_row_vector(const char* op, const char* name, const TensorView& t, DType dtype,
                         int64_t N) {
  KILN_RETURN_IF_ERROR(expect_shape(op, name, t, dtype, {N}));
  return expect_contiguous(op, name, t);
}

// The backward's optional bf16 dlogits: logits' shape, unit inner stride, rows that do not
// overlap, and no byte shared with logits (the kernel reads a row of logits after writing
// earlier rows of dlogits).
Status expect_bf16_dlogits(const char* op, const TensorView& dlogits, const TensorView& logits) {
  const int64_t N = logits.shape[0];
  const int64_t Vp = logits.shape[1];
  KILN_RETURN_IF_ERROR(expect_shape(op, "dlogits", dlogits, DType::kBF16, {N, Vp}));
  KILN_RETURN_IF_ERROR(expect_unit_inner_stride(op, "dlogits", dlogits));
  if (N > 1 && dlogits.stride[0] < Vp) {
    return Status::invalid_argument(std::string(op) + ": dlogits (" + dlogits.describe() +
                                    ") has a row stride of " + std::to_string(dlogits.stride[0]) +
                                    ", less than its " + std::to_string(Vp) + " columns");
  }
  return expect_disjoint(op, "dlogits", dlogits, "logits", logits);
}

Status expect_targets(const char* op, const TensorView& targets, int64_t vocab) {
  const int32_t* ids = static_cast<const int32_t*>(targets.data);
  for (int64_t n = 0; n < targets.shape[0]; ++n) {
    if (ids[n] >= 0 && ids[n] < vocab) continue;
    return Status::invalid_argument(
        std::string(op) + ": targets[" + std::to_string(n) + "] = " + std::to_string(ids[n]) +
        " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  }
  return Status();
}

}  // namespace

Status cross_entropy_forward(const CrossEntropyParams& p, const Context& ctx) {
  constexpr const char* kOp = "cross_entropy_forward";
  int64_t vocab = 0;
  KILN_RETURN_IF_ERROR(expect_logits(kOp, p.logits, p.vocab, &vocab));
  const int64_t N = p.logits.shape[0];
  KILN_RETURN_IF_ERROR(expect_row_vector(kOp, "targets", p.targets, DType::kI32, N));
  KILN_RETURN_IF_ERROR(expect_row_vector(kOp, "losses", p.losses, DType::kF32, N));
  KILN_RETURN_IF_ERROR(expect_row_vector(kOp, "lse", p.lse, DType::kF32, N));
  KILN_RETURN_IF_ERROR(expect_targets(kOp, p.targets, vocab));
  return KILN_OPS_DISPATCH(ctx, kOp, cross_entropy_forward, p, vocab, ctx);
}

Status cross_entropy_backward(const CrossEntropyBackwardParams& p, const Context& ctx) {
  constexpr const char* kOp = "cross_entropy_backward";
  int64_t vocab = 0;
  KILN_RETURN_IF_ERROR(expect_logits(kOp, p.logits, p.vocab, &vocab));
  const int64_t N = p.logits.shape[0];
  KILN_RETURN_IF_ERROR(expect_row_vector(kOp, "targets", p.targets, DType::kI32, N));
  KILN_RETURN_IF_ERROR(expect_row_vector(kOp, "lse", p.lse, DType::kF32, N));
  KILN_RETURN_IF_ERROR(expect_row_vector(kOp, "dlosses", p.dlosses, DType::kF32, N));
  if (p.dlogits.present()) KILN_RETURN_IF_ERROR(expect_bf16_dlogits(kOp, p.dlogits, p.logits));
  KILN_RETURN_IF_ERROR(expect_targets(kOp, p.targets, vocab));
  return KILN_OPS_DISPATCH(ctx, kOp, cross_entropy_backward, p, vocab, ctx);
}

}  // namespace kiln::ops
