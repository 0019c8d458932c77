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
  if (!s.bf16()) return Status();
  if (s.weight16_stale) {
    // The whole arena in one pass: the Linear weights and wte are nearly all of it (the rest,
    // wpe, norms and biases, is under 1% for GPT-2 small and costs less than skipping it would).
    const auto n = static_cast<int64_t>(s.param_floats);
    KILN_RETURN_IF_ERROR(ops::convert_f32_to_bf16(
                             TensorView::f32(s.param_arena.get(), {n}),
                             TensorView::of(s.weight16_arena.get(), ops::DType::kBF16, {n}), ctx)
                             .with_context("gpt2 bf16 weights"));
    s.weight16_stale = false;
    s.packed_stale = true;
  }
  if (s.packed_stale && !s.packed.empty()) {
    KILN_RETURN_IF_ERROR(ops::pack_bf16_weights(s.packed_views, s.packed, ctx)
                             .with_context("gpt2 packed bf16 weights"));
    s.packed_stale = false;
  }
  return Status();
}

Status gpt2_init_packed_weights(Gpt2::State& s, WeightPacking packing) {
  const bool pack =
      packing == WeightPacking::kAlways ||
      (packing == WeightPacking::kAuto && int64_t{s.batch} * s.seq >= kPackedWeightsMinTokens);
  if (!pack) return Status();
  const int64_t C = s.config.n_embd;
  const auto add = [&](float* w, int64_t rows, int64_t cols) {
    s.packed_sources.push_back(w);
    s.packed_views.push_back(gpt2_matmul_weight(s, w, rows, cols));
  };
  for (int l = 0; l < s.config.n_layer; ++l) {
    add(s.block_param(l, kQkvWeight), 3 * C, C);
    add(s.block_param(l, kProjWeight), C, C);
    add(s.block_param(l, kFcWeight), 4 * C, C);
    add(s.block_param(l, kMlpProjWeight), C, 4 * C);
  }
  add(s.param(kWteParam), s.config.padded_vocab(), C);  // the head's, pad rows included
  s.packed.resize(s.packed_views.size());
  s.packed_stale = true;
  // Single-threaded (create() has no pool): one pass over the bf16 weights, which allocates the
  // packs. Laid out for the path of the ISA a training Context takes (make_cpu_context's): the
  // first forward packs again with its own Context (packed_stale), in the same memory when its
  // path is this one (gemm_bf16.h: oneDNN's layout at AVX-512, widened f32 below); a Context of
  // another path lays out anew, and a larger layout grows the memory (it never shrinks).
  ops::Context ctx;
  const Result<CpuIsa> isa = ops::ops_isa_from_environment();
  ctx.isa = isa.ok() ? *isa : ops::supported_isas().back();
  return ops::pack_bf16_weights(s.packed_views, s.packed, ctx)
      .with_context("gpt2 packed bf16 weights");
}

const ops::PackedWeight* gpt2_packed_weight(const Gpt2::State& s, const float* w) {
  for (size_t i = 0; i < s.packed_sources.size(); ++i) {
    if (s.packed_sources[i] == w) return &s.packed[i];
  }
  return nullptr;
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
