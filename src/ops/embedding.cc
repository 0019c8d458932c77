// Token + position embedding: validation and dispatch to cpu/pointwise.inc's kernels.
//
// Shapes (B, T, V, C, T_max as in the header): tokens (B, T) i32; wte/dwte (V, C); wpe/dwpe
// (T_max >= T, C); y/dy (B, T, C); every view contiguous. Every token id is checked against
// [0, V) before anything is written, so the kernels index wte and dwte without checks.
#include <kiln/ops/embedding.h>

#include <cstdint>
#include <initializer_list>
#include <string>

#include "ops/cpu/kernels_pointwise.h"
#include "ops/dispatch.h"
#include "ops/validate.h"

namespace kiln::ops {
namespace {

Status expect_dense(const char* op, const char* name, const TensorView& t, DType dtype,
                    std::initializer_list<int64_t> shape) {
  KILN_RETURN_IF_ERROR(expect_shape(op, name, t, dtype, shape));
  return expect_contiguous(op, name, t);
}

// Every id of tokens (B, T), already checked to be i32 and contiguous, in [0, V).
Status expect_token_ids(const char* op, const TensorView& tokens, int64_t V) {
  const int64_t T = tokens.shape[1];
  const int32_t* ids = static_cast<const int32_t*>(tokens.data);
  for (int64_t pos = 0; pos < tokens.numel(); ++pos) {
    if (ids[pos] >= 0 && ids[pos] < V) continue;
    return Status::invalid_argument(std::string(op) + ": tokens[" + std::to_string(pos / T) + "," +
                                    std::to_string(pos % T) + "] = " + std::to_string(ids[pos]) +
                                    " is outside the vocabulary [0, " + std::to_string(V) + ")");
  }
  return Status();
}

// The table `name` (rows, C): f32, contiguous; wpe's rows must cover the T positions.
Status expect_position_table(const char* op, const char* name, const TensorView& t, int64_t T,
                             int64_t C) {
  KILN_RETURN_IF_ERROR(expect_dense(op, name, t, DType::kF32, {-1, C}));
  if (t.shape[0] >= T) return Status();
  return Status::invalid_argument(std::string(op) + ": " + name + " is " + t.describe() +
                                  " but must have at least T = " + std::to_string(T) + " rows");
}

}  // namespace

Status embedding_forward(const EmbeddingParams& p, const Context& ctx) {
  constexpr const char* kOp = "embedding_forward";
  KILN_RETURN_IF_ERROR(expect_dense(kOp, "wte", p.wte, DType::kF32, {-1, -1}));
  const int64_t V = p.wte.shape[0];
  const int64_t C = p.wte.shape[1];
  KILN_RETURN_IF_ERROR(expect_dense(kOp, "tokens", p.tokens, DType::kI32, {-1, -1}));
  const int64_t B = p.tokens.shape[0];
  const int64_t T = p.tokens.shape[1];
  KILN_RETURN_IF_ERROR(expect_position_table(kOp, "wpe", p.wpe, T, C));
  KILN_RETURN_IF_ERROR(expect_dense(kOp, "y", p.y, DType::kF32, {B, T, C}));
  KILN_RETURN_IF_ERROR(expect_token_ids(kOp, p.tokens, V));
  return KILN_OPS_DISPATCH(ctx, kOp, embedding_forward, p, ctx);
}

Status embedding_backward(const EmbeddingBackwardParams& p, const Context& ctx) {
  constexpr const char* kOp = "embedding_backward";
  KILN_RETURN_IF_ERROR(expect_dense(kOp, "dwte", p.dwte, DType::kF32, {-1, -1}));
  const int64_t V = p.dwte.shape[0];
  const int64_t C = p.dwte.shape[1];
  KILN_RETURN_IF_ERROR(expect_dense(kOp, "tokens", p.tokens, DType::kI32, {-1, -1}));
  const int64_t B = p.tokens.shape[0];
  const int64_t T = p.tokens.shape[1];
  KILN_RETURN_IF_ERROR(expect_dense(kOp, "dy", p.dy, DType::kF32, {B, T, C}));
  KILN_RETURN_IF_ERROR(expect_position_table(kOp, "dwpe", p.dwpe, T, C));
  KILN_RETURN_IF_ERROR(expect_token_ids(kOp, p.tokens, V));
  return KILN_OPS_DISPATCH(ctx, kOp, embedding_backward, p, ctx);
}

}  // namespace kiln::ops
