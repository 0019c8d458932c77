// Gpt2's mixed precision: the bf16 copies of the weights and of the matmul inputs (model.h,
// Precision). Every function is the identity on an fp32 model, so the forward and backward are
// written once for both precisions.
#include <kiln/ops/convert.h>

#include "train/model_state.h"

namespace kiln::train {

using ops::TensorView;

Status gpt2_refresh_weight16(Gpt2::State& s, const ops::Context& ctx) {
  // After adamw_step the copy is current (AdamW wrote it); after anything else that may have
  // changed the parameters (init, a load, a resume, ShardedAdamW) it is rounded here.
  if (!s.bf16() || !s.weight16_stale) return Status();
  // The whole arena in one pass: the Linear weights and wte are nearly all of it (the rest,
  // wpe, norms and biases, is under 1% for GPT-2 small and costs less than skipping it would).
  const auto n = static_cast<int64_t>(s.param_floats);
  KILN_RETURN_IF_ERROR(
      ops::convert_f32_to_bf16(TensorView::f32(s.param_arena.get(), {n}),
                               TensorView::of(s.weight16_arena.get(), ops::DType::kBF16, {n}), ctx)
          .with_context("gpt2 bf16 weights"));
  s.weight16_stale = false;
  return Status();
}

TensorView gpt2_matmul_weight(Gpt2::State& s, float* w, int64_t rows, int64_t cols) {
  if (!s.bf16()) return TensorView::f32(w, {rows, cols});
  const size_t offset = static_cast<size_t>(w - s.param_arena.get());
  return TensorView::of(s.weight16_arena.get() + offset, ops::DType::kBF16, {rows, cols});
}

TensorView gpt2_qkv_third(const TensorView& qkv, int64_t i, int64_t B, int64_t T, int64_t H,
                          int64_t D) {
  const int64_t C = H * D;
  void* base =
      static_cast<char*>(qkv.data) + static_cast<size_t>(i * C) * ops::dtype_bytes(qkv.dtype);
  return TensorView::strided(base, qkv.dtype, {B, T, H, D}, {T * 3 * C, 3 * C, D, 1});
}

TensorView gpt2_saved_matmul_input(Gpt2::State& s, float* x, int64_t rows, int64_t cols,
                                   size_t offset16) {
  if (!s.bf16()) return TensorView::f32(x, {rows, cols});
  return TensorView::of(s.act16(offset16), ops::DType::kBF16, {rows, cols});
}

Result<TensorView> gpt2_matmul_input(Gpt2::State& s, float* x, int64_t rows, int64_t cols,
                                     size_t offset16, const ops::Context& ctx) {
  const TensorView out = gpt2_saved_matmul_input(s, x, rows, cols, offset16);
  if (!s.bf16()) return out;
  KILN_RETURN_IF_ERROR(
      ops::convert_f32_to_bf16(TensorView::f32(x, {rows * cols}),
                               TensorView::of(out.data, ops::DType::kBF16, {rows * cols}), ctx));
  return out;
}

}  // namespace kiln::train
