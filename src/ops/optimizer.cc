// AdamW, the global gradient norm and the clipping factor: validation and dispatch to
// cpu/pointwise.inc's kernels.
//
// The gradient norm is a sum of squares over every element of every buffer, in double. The
// buffers are cut into chunks of kSquareSumChunkElements; each chunk's sum is one task of the
// pool, and the chunk sums are added here in chunk order, so the result depends only on the
// buffers, never on the thread count. The chunk list and the chunk sums are the only scratch,
// taken from the context's workspace when it has one.
#include <kiln/ops/optimizer.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "ops/cpu/kernels_pointwise.h"
#include "ops/dispatch.h"
#include "ops/validate.h"

namespace kiln::ops {
namespace {

// 64 Ki floats (256 KiB) per chunk: about 13 us of memory traffic per thread, far above the
// cost of claiming a task, and GPT-2 small's 124M parameters make about 1900 chunks, whose list
// and sums (16 + 8 bytes each, 45 KiB) are the only scratch.
constexpr int64_t kSquareSumChunkElements = int64_t{1} << 16;

// Added to the norm before dividing, as in the header (and PyTorch's clip_grad_norm_), so a
// max_norm of 0 cannot divide by zero.
constexpr double kClipEpsilon = 1e-6;

// f32, contiguous, `numel` elements.
Status expect_flat_f32(const char* op, const std::string& name, const TensorView& t,
                       int64_t numel) {
  KILN_RETURN_IF_ERROR(expect_same_numel(op, name.c_str(), t, numel));
  if (t.dtype != DType::kF32) {
    return Status::invalid_argument(std::string(op) + ": " + name + " is " + t.describe() +
                                    " but must be f32");
  }
  return expect_contiguous(op, name.c_str(), t);
}

}  // namespace

Status adamw_update(const AdamWParams& p, const Context& ctx) {
  constexpr const char* kOp = "adamw_update";
  KILN_RETURN_IF_ERROR(expect_present(kOp, "params", p.params));
  const int64_t n = p.params.numel();
  KILN_RETURN_IF_ERROR(expect_flat_f32(kOp, "params", p.params, n));
  KILN_RETURN_IF_ERROR(expect_flat_f32(kOp, "grads", p.grads, n));
  KILN_RETURN_IF_ERROR(expect_flat_f32(kOp, "m", p.m, n));
  KILN_RETURN_IF_ERROR(expect_flat_f32(kOp, "v", p.v, n));
  if (p.params_bf16.present()) {
    KILN_RETURN_IF_ERROR(expect_shape(kOp, "params_bf16", p.params_bf16, DType::kBF16, {n}));
    KILN_RETURN_IF_ERROR(expect_contiguous(kOp, "params_bf16", p.params_bf16));
  }
  if (p.step < 1) {
    return Status::invalid_argument(std::string(kOp) + ": step is " + std::to_string(p.step) +
                                    " but counts from 1");
  }
  return KILN_OPS_DISPATCH(ctx, kOp, adamw_update, p, ctx);
}

Result<double> global_grad_norm(const std::vector<TensorView>& grads, const Context& ctx) {
  constexpr const char* kOp = "global_grad_norm";
  int64_t count = 0;  // chunks over every buffer
  for (size_t i = 0; i < grads.size(); ++i) {
    const TensorView& g = grads[i];
    const std::string name = "grads[" + std::to_string(i) + "]";
    KILN_RETURN_IF_ERROR(expect_present(kOp, name.c_str(), g));
    const int64_t n = g.numel();
    KILN_RETURN_IF_ERROR(expect_flat_f32(kOp, name, g, n));
    count += (n + kSquareSumChunkElements - 1) / kSquareSumChunkElements;
  }
  // The chunk list, then its sums (a SquareSumChunk's 16 bytes keep the doubles aligned), from
  // the caller's workspace or one of this call's own.
  static_assert(sizeof(cpu::SquareSumChunk) % alignof(double) == 0);
  const int64_t bytes = count * static_cast<int64_t>(sizeof(cpu::SquareSumChunk) + sizeof(double));
  Workspace own;
  Workspace& workspace = ctx.workspace != nullptr ? *ctx.workspace : own;
  void* scratch = workspace.reserve(static_cast<size_t>(bytes));
  if (scratch == nullptr) return scratch_unavailable(kOp, bytes);
  auto* chunks = static_cast<cpu::SquareSumChunk*>(scratch);
  auto* sums = reinterpret_cast<double*>(chunks + count);
  int64_t next = 0;
  for (const TensorView& g : grads) {
    const int64_t n = g.numel();
    const float* data = static_cast<const float*>(g.data);
    for (int64_t begin = 0; begin < n; begin += kSquareSumChunkElements) {
      const int64_t size =
          n - begin < kSquareSumChunkElements ? n - begin : kSquareSumChunkElements;
      chunks[next++] = {data + begin, size};
    }
  }
  const Status status = KILN_OPS_DISPATCH(ctx, kOp, sum_squares, chunks, count, sums, ctx);
  if (!status.ok()) return status;
  double total = 0;
  for (int64_t i = 0; i < count; ++i)
    total += sums[i];
  return std::sqrt(total);
}

float grad_clip_scale(double norm, double max_norm) {
  if (!(norm > max_norm)) return 1.0f;
  return static_cast<float>(max_norm / (norm + kClipEpsilon));
}

}  // namespace kiln::ops
