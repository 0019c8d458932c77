// LayerNorm and RMSNorm: validation, the row split, and dispatch to cpu/norm.inc's kernels.
// The backwards' per-task partials come from the context's workspace when it has one.
//
// Every view is checked before anything is written, so an invalid call leaves every buffer as
// it was. The split of rows into tasks depends only on (N, C), never on the thread count, which
// is what makes the backward's parameter gradients identical for any pool size.
#include <kiln/ops/norm.h>

#include <cstdint>
#include <string>

#include "ops/cpu/kernels_norm.h"
#include "ops/dispatch.h"
#include "ops/validate.h"

namespace kiln::ops {
namespace {

// A task is at least this many elements (64 Ki floats: 256 KiB per operand, tens of
// microseconds of work), so claiming it from the pool (well under a microsecond) is noise.
constexpr int64_t kTaskElementsMin = int64_t{1} << 16;
// At most this many tasks: enough to balance two to a few dozen threads, and it bounds the
// backward's scratch at kTasksMax x 2C floats (0.4 MiB for C = 768).
constexpr int64_t kTasksMax = 64;

cpu::NormSplit split_rows(int64_t N, int64_t C) {
  cpu::NormSplit split;
  const int64_t by_size = (kTaskElementsMin + C - 1) / C;
  const int64_t by_count = (N + kTasksMax - 1) / kTasksMax;
  split.rows_per_task = by_size > by_count ? by_size : by_count;
  split.tasks = (N + split.rows_per_task - 1) / split.rows_per_task;
  return split;
}

// The (N, C) input that fixes the shape: f32, two dimensions, C >= 1.
Status expect_matrix(const char* op, const char* name, const TensorView& t) {
  KILN_RETURN_IF_ERROR(expect_shape(op, name, t, DType::kF32, {-1, -1}));
  if (t.shape[1] >= 1) return Status();
  return Status::invalid_argument(std::string(op) + ": " + name + " is " + t.describe() +
                                  " but needs at least one column");
}

// `dtype` (N, C), unit stride along C, rows that do not overlap (row stride >= C).
Status expect_rows(const char* op, const char* name, const TensorView& t, int64_t N, int64_t C,
                   DType dtype = DType::kF32) {
  KILN_RETURN_IF_ERROR(expect_shape(op, name, t, dtype, {N, C}));
  KILN_RETURN_IF_ERROR(expect_unit_inner_stride(op, name, t));
  if (N <= 1 || t.stride[0] >= C) return Status();
  return Status::invalid_argument(std::string(op) + ": " + name + " (" + t.describe() +
                                  ") has a row stride of " + std::to_string(t.stride[0]) +
                                  ", less than its " + std::to_string(C) + " columns");
}

// The per-task parameter-gradient partials of a backward (floats_per_task each) into
// split->partials: from the caller's workspace, or `own` when the context has none.
Status take_partials(const char* op, const Context& ctx, int64_t floats_per_task, Workspace* own,
                     cpu::NormSplit* split) {
  Workspace& workspace = ctx.workspace != nullptr ? *ctx.workspace : *own;
  const int64_t bytes = split->tasks * floats_per_task * static_cast<int64_t>(sizeof(float));
  split->partials = static_cast<float*>(workspace.reserve(static_cast<size_t>(bytes)));
  if (split->partials == nullptr) return scratch_unavailable(op, bytes);
  return Status();
}

// f32 (n), contiguous.
Status expect_vector(const char* op, const char* name, const TensorView& t, int64_t n) {
  KILN_RETURN_IF_ERROR(expect_shape(op, name, t, DType::kF32, {n}));
  return expect_contiguous(op, name, t);
}

}  // namespace

Status layernorm_forward(const LayerNormParams& p, const Context& ctx) {
  constexpr const char* kOp = "layernorm_forward";
  KILN_RETURN_IF_ERROR(expect_matrix(kOp, "x", p.x));
  const int64_t N = p.x.shape[0];
  const int64_t C = p.x.shape[1];
  KILN_RETURN_IF_ERROR(expect_rows(kOp, "x", p.x, N, C));
  KILN_RETURN_IF_ERROR(expect_vector(kOp, "weight", p.weight, C));
  KILN_RETURN_IF_ERROR(expect_vector(kOp, "bias", p.bias, C));
  // y is f32, or bf16: the rounding of what an f32 y would hold (a bf16 matmul's input). An
  // f32 y may be x itself (each row read before it is written); a bf16 one must not overlap x.
  if (p.y.dtype == DType::kBF16) {
    KILN_RETURN_IF_ERROR(expect_rows(kOp, "y", p.y, N, C, DType::kBF16));
    KILN_RETURN_IF_ERROR(expect_disjoint(kOp, "y", p.y, "x", p.x));
  } else if (p.y.data != nullptr && p.y.dtype != DType::kF32) {
    return Status::invalid_argument(std::string(kOp) + ": y is " + p.y.describe() +
                                    " but must be f32 or bf16");
  } else {
    KILN_RETURN_IF_ERROR(expect_rows(kOp, "y", p.y, N, C));
  }
  KILN_RETURN_IF_ERROR(expect_vector(kOp, "mean", p.mean, N));
  KILN_RETURN_IF_ERROR(expect_vector(kOp, "rstd", p.rstd, N));
  const cpu::NormSplit split = split_rows(N, C);
  return KILN_OPS_DISPATCH(ctx, kOp, layernorm_forward, p, ctx, split);
}

Status layernorm_backward(const LayerNormBackwardParams& p, const Context& ctx) {
  constexpr const char* kOp = "layernorm_backward";
  KILN_RETURN_IF_ERROR(expect_matrix(kOp, "x", p.x));
  const int64_t N = p.x.shape[0];
  const int64_t C = p.x.shape[1];
  KILN_RETURN_IF_ERROR(expect_rows(kOp, "dy", p.dy, N, C));
  KILN_RETURN_IF_ERROR(expect_rows(kOp, "x", p.x, N, C));
  KILN_RETURN_IF_ERROR(expect_vector(kOp, "weight", p.weight, C));
  KILN_RETURN_IF_ERROR(expect_vector(kOp, "mean", p.mean, N));
  KILN_RETURN_IF_ERROR(expect_vector(kOp, "rstd", p.rstd, N));
  KILN_RETURN_IF_ERROR(expect_rows(kOp, "dx", p.dx, N, C));
  KILN_RETURN_IF_ERROR(expect_vector(kOp, "dweight", p.dweight, C));
  KILN_RETURN_IF_ERROR(expect_vector(kOp, "dbias", p.dbias, C));
  cpu::NormSplit split = split_rows(N, C);
  Workspace own;
  KILN_RETURN_IF_ERROR(take_partials(kOp, ctx, 2 * C, &own, &split));  // dweight (C), dbias (C)
  return KILN_OPS_DISPATCH(ctx, kOp, layernorm_backward, p, ctx, split);
}

Status rmsnorm_forward(const RmsNormParams& p, const Context& ctx) {
  constexpr const char* kOp = "rmsnorm_forward";
  KILN_RETURN_IF_ERROR(expect_matrix(kOp, "x", p.x));
  const int64_t N = p.x.shape[0];
  const int64_t C = p.x.shape[1];
  KILN_RETURN_IF_ERROR(expect_rows(kOp, "x", p.x, N, C));
  KILN_RETURN_IF_ERROR(expect_vector(kOp, "weight", p.weight, C));
  KILN_RETURN_IF_ERROR(expect_rows(kOp, "y", p.y, N, C));
  KILN_RETURN_IF_ERROR(expect_vector(kOp, "rstd", p.rstd, N));
  const cpu::NormSplit split = split_rows(N, C);
  return KILN_OPS_DISPATCH(ctx, kOp, rmsnorm_forward, p, ctx, split);
}

Status rmsnorm_backward(const RmsNormBackwardParams& p, const Context& ctx) {
  constexpr const char* kOp = "rmsnorm_backward";
  KILN_RETURN_IF_ERROR(expect_matrix(kOp, "x", p.x));
  const int64_t N = p.x.shape[0];
  const int64_t C = p.x.shape[1];
  KILN_RETURN_IF_ERROR(expect_rows(kOp, "dy", p.dy, N, C));
  KILN_RETURN_IF_ERROR(expect_rows(kOp, "x", p.x, N, C));
  KILN_RETURN_IF_ERROR(expect_vector(kOp, "weight", p.weight, C));
  KILN_RETURN_IF_ERROR(expect_vector(kOp, "rstd", p.rstd, N));
  KILN_RETURN_IF_ERROR(expect_rows(kOp, "dx", p.dx, N, C));
  KILN_RETURN_IF_ERROR(expect_vector(kOp, "dweight", p.dweight, C));
  cpu::NormSplit split = split_rows(N, C);
  Workspace own;
  KILN_RETURN_IF_ERROR(take_partials(kOp, ctx, C, &own, &split));  // dweight (C)
  return KILN_OPS_DISPATCH(ctx, kOp, rmsnorm_backward, p, ctx, split);
}

}  // namespace kiln::ops
