// Double-precision references of every public kiln_ops op: the specification, never optimized.
//
// The references' outputs are f32. The bf16 outputs some ops can write instead (LayerNorm's y,
// GELU's y and dx, cross-entropy's dlogits) are specified as the f32 output rounded by
// convert_f32_to_bf16, and checked that way against the kernels' own f32 path
// (bf16_outputs_test.cc), which these references check; given one, a reference refuses it.
//
// One function per public op, with the same name and params struct and no Context. Each is a
// plain loop over the views, honouring their strides, computing in double and rounding once to
// f32 on the way out, and following the public header's contract exactly: which outputs are
// overwritten and which accumulate, absent optional operands, padding columns, in-place
// aliasing. They are what ops-check, the kernel tests and the PyTorch parity test compare the
// optimized kernels with, so each must be right by inspection; speed does not matter (attention
// materialises the T x T scores).
//
// The references validate only what they must to stay in bounds (a token or target id out of
// range is kInvalidArgument); shapes, dtypes and strides are the public functions' job. Where an
// op's inputs include something the forward saved only for speed (attention's o and lse, cross
// entropy's lse), the reference recomputes it in double from the primary inputs instead of
// trusting it, so the reference backward is exactly the derivative of the reference forward.
// Saved statistics that carry information the backward cannot recompute (the norms' mean and
// rstd, which depend on an eps the backward does not receive) are used as given.
#ifndef KILN_OPS_REF_REF_H_
#define KILN_OPS_REF_REF_H_

#include <kiln/base/result.h>
#include <kiln/base/status.h>
#include <kiln/ops/attention.h>
#include <kiln/ops/convert.h>
#include <kiln/ops/cross_entropy.h>
#include <kiln/ops/elementwise.h>
#include <kiln/ops/embedding.h>
#include <kiln/ops/matmul.h>
#include <kiln/ops/norm.h>
#include <kiln/ops/optimizer.h>
#include <kiln/ops/tensor.h>

#include <cstdint>
#include <vector>

namespace kiln::ops::ref {

Status matmul_forward(const MatmulParams& p);
Status matmul_backward(const MatmulBackwardParams& p);

Status attention_forward(const AttentionParams& p);
Status attention_backward(const AttentionBackwardParams& p);

Status layernorm_forward(const LayerNormParams& p);
Status layernorm_backward(const LayerNormBackwardParams& p);
Status rmsnorm_forward(const RmsNormParams& p);
Status rmsnorm_backward(const RmsNormBackwardParams& p);

Status gelu_forward(const GeluParams& p);
Status gelu_backward(const GeluBackwardParams& p);
Status residual_forward(const ResidualParams& p);
Status residual_backward(const ResidualBackwardParams& p);

Status embedding_forward(const EmbeddingParams& p);
Status embedding_backward(const EmbeddingBackwardParams& p);

Status cross_entropy_forward(const CrossEntropyParams& p);
Status cross_entropy_backward(const CrossEntropyBackwardParams& p);

Status adamw_update(const AdamWParams& p);
Result<double> global_grad_norm(const std::vector<TensorView>& grads);

Status convert_f32_to_bf16(const TensorView& src, const TensorView& dst);
Status convert_bf16_to_f32(const TensorView& src, const TensorView& dst);

// Element access for the references: the element at the given indices, through the view's
// strides. REQUIRES: the view is f32 (f32_ptr checks) and the indices are in range.
inline float& at(const TensorView& t, int64_t i0) {
  return t.f32_ptr()[i0 * t.stride[0]];
}
inline float& at(const TensorView& t, int64_t i0, int64_t i1) {
  return t.f32_ptr()[i0 * t.stride[0] + i1 * t.stride[1]];
}
inline float& at(const TensorView& t, int64_t i0, int64_t i1, int64_t i2) {
  return t.f32_ptr()[i0 * t.stride[0] + i1 * t.stride[1] + i2 * t.stride[2]];
}
inline float& at(const TensorView& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return t.f32_ptr()[i0 * t.stride[0] + i1 * t.stride[1] + i2 * t.stride[2] + i3 * t.stride[3]];
}

}  // namespace kiln::ops::ref

#endif  // KILN_OPS_REF_REF_H_
