// Gpt2's forward: embeddings, n_layer pre-norm blocks, ln_f, the tied head, cross-entropy.
//
// Per block l, over N = B * T rows (every tensor a block of the activation arena, so nothing is
// allocated and nothing is copied):
//   ln1      = layernorm(x; ln_1)                      x = encoded (l = 0) or res3 of l - 1
//   qkv      = ln1 @ qkv.w^T + qkv.b                   (N, 3C) = (B, T, 3, H, D)
//   atty     = attention(q, k, v)                      strided views of qkv's thirds, causal
//   proj_out = atty @ proj.w^T + proj.b;  res2 = x + proj_out
//   ln2      = layernorm(res2; ln_2)
//   fch      = ln2 @ fc.w^T + fc.b;  fch_gelu = gelu(fch)
//   proj_out = fch_gelu @ mlp.proj.w^T + mlp.proj.b;  res3 = res2 + proj_out
// then lnf = layernorm(res3 of L - 1; ln_f), logits = lnf @ wte_padded^T (N, Vp; the pad rows of
// wte are zero, so are the pad logits), losses = cross_entropy(logits[:, :V], targets).
// proj_out is shared by both projections of every block: the backward never reads it.
//
// In bf16 (model.h, Precision) each matmul reads the bf16 weights (refreshed first when stale,
// and packed for the matrix units: ops::PackedWeight) and a bf16 copy of its input in the bf16
// activation arena, where the backward reads it again for the weight gradient: LayerNorm and GELU
// write theirs there directly (their f32 buffers stay unused), the attention output and qkv are
// rounded into it after their f32 op. The outputs of the matmuls stay f32.
#include <cstring>
#include <string>

#include <kiln/ops/attention.h>
#include <kiln/ops/cross_entropy.h>
#include <kiln/ops/elementwise.h>
#include <kiln/ops/embedding.h>
#include <kiln/ops/matmul.h>
#include <kiln/ops/norm.h>

#include "train/model_state.h"

namespace kiln::train {
namespace {

using ops::TensorView;

// (rows, cols) contiguous.
TensorView mat(float* p, int64_t rows, int64_t cols) {
  return TensorView::f32(p, {rows, cols});
}
TensorView vec(float* p, int64_t n) {
  return TensorView::f32(p, {n});
}

// Runs block `l` of the forward over (B, T) rows.
Status block_forward(Gpt2::State& s, int l, int64_t B, int64_t T, const ops::Context& ctx) {
  const int64_t N = B * T;
  const int64_t C = s.config.n_embd;
  const int64_t H = s.config.n_head;
  const int64_t D = C / H;
  const LayerActs& a = s.layer_acts[static_cast<size_t>(l)];
  const LayerActs16 a16 = s.bf16() ? s.layer_acts16[static_cast<size_t>(l)] : LayerActs16{};
  float* x = l == 0 ? s.act(s.acts.encoded) : s.act(s.layer_acts[static_cast<size_t>(l - 1)].res3);
  float* proj_out = s.act(s.acts.proj_out);

  ops::LayerNormParams ln1;
  ln1.x = mat(x, N, C);
  ln1.weight = vec(s.block_param(l, kLn1Weight), C);
  ln1.bias = vec(s.block_param(l, kLn1Bias), C);
  ln1.y = gpt2_saved_matmul_input(s, s.act(a.ln1), N, C, a16.ln1);
  ln1.mean = vec(s.act(a.ln1_mean), N);
  ln1.rstd = vec(s.act(a.ln1_rstd), N);
  KILN_RETURN_IF_ERROR(ops::layernorm_forward(ln1, ctx));

  ops::MatmulParams qkv;
  qkv.x = ln1.y;
  qkv.w = gpt2_matmul_weight(s, s.block_param(l, kQkvWeight), 3 * C, C);
  qkv.w_packed = gpt2_packed_weight(s, s.block_param(l, kQkvWeight));
  qkv.bias = vec(s.block_param(l, kQkvBias), 3 * C);
  qkv.y = mat(s.act(a.qkv), N, 3 * C);
  KILN_RETURN_IF_ERROR(ops::matmul_forward(qkv, ctx));

  // q, k, v: (B, T, H, D) views of the thirds of qkv (its bf16 copy in a bf16 model), whose
  // rows are 3C apart.
  KILN_ASSIGN_OR_RETURN(const TensorView qkv_in,
                        gpt2_matmul_input(s, s.act(a.qkv), N, 3 * C, a16.qkv, ctx));
  ops::AttentionParams att;
  att.q = gpt2_qkv_third(qkv_in, 0, B, T, H, D);
  att.k = gpt2_qkv_third(qkv_in, 1, B, T, H, D);
  att.v = gpt2_qkv_third(qkv_in, 2, B, T, H, D);
  att.o = TensorView::f32(s.act(a.atty), {B, T, H, D});
  att.lse = TensorView::f32(s.act(a.att_lse), {B, H, T});
  att.causal = true;
  KILN_RETURN_IF_ERROR(ops::attention_forward(att, ctx));

  ops::MatmulParams proj;
  KILN_ASSIGN_OR_RETURN(proj.x, gpt2_matmul_input(s, s.act(a.atty), N, C, a16.atty, ctx));
  proj.w = gpt2_matmul_weight(s, s.block_param(l, kProjWeight), C, C);
  proj.w_packed = gpt2_packed_weight(s, s.block_param(l, kProjWeight));
  proj.bias = vec(s.block_param(l, kProjBias), C);
  proj.y = mat(proj_out, N, C);
  KILN_RETURN_IF_ERROR(ops::matmul_forward(proj, ctx));

  ops::ResidualParams res2;
  res2.a = mat(x, N, C);
  res2.b = proj.y;
  res2.y = mat(s.act(a.res2), N, C);
  KILN_RETURN_IF_ERROR(ops::residual_forward(res2, ctx));

  ops::LayerNormParams ln2;
  ln2.x = res2.y;
  ln2.weight = vec(s.block_param(l, kLn2Weight), C);
  ln2.bias = vec(s.block_param(l, kLn2Bias), C);
  ln2.y = gpt2_saved_matmul_input(s, s.act(a.ln2), N, C, a16.ln2);
  ln2.mean = vec(s.act(a.ln2_mean), N);
  ln2.rstd = vec(s.act(a.ln2_rstd), N);
  KILN_RETURN_IF_ERROR(ops::layernorm_forward(ln2, ctx));

  ops::MatmulParams fc;
  fc.x = ln2.y;
  fc.w = gpt2_matmul_weight(s, s.block_param(l, kFcWeight), 4 * C, C);
  fc.w_packed = gpt2_packed_weight(s, s.block_param(l, kFcWeight));
  fc.bias = vec(s.block_param(l, kFcBias), 4 * C);
  fc.y = mat(s.act(a.fch), N, 4 * C);
  KILN_RETURN_IF_ERROR(ops::matmul_forward(fc, ctx));

  ops::GeluParams gelu;
  gelu.x = fc.y;
  gelu.y = gpt2_saved_matmul_input(s, s.act(a.fch_gelu), N, 4 * C, a16.fch_gelu);
  KILN_RETURN_IF_ERROR(ops::gelu_forward(gelu, ctx));

  ops::MatmulParams mlp_proj;
  mlp_proj.x = gelu.y;
  mlp_proj.w = gpt2_matmul_weight(s, s.block_param(l, kMlpProjWeight), C, 4 * C);
  mlp_proj.w_packed = gpt2_packed_weight(s, s.block_param(l, kMlpProjWeight));
  mlp_proj.bias = vec(s.block_param(l, kMlpProjBias), C);
  mlp_proj.y = mat(proj_out, N, C);
  KILN_RETURN_IF_ERROR(ops::matmul_forward(mlp_proj, ctx));

  ops::ResidualParams res3;
  res3.a = res2.y;
  res3.b = mlp_proj.y;
  res3.y = mat(s.act(a.res3), N, C);
  return ops::residual_forward(res3, ctx);
}

// Embeddings, every block, ln_f and the head, over (B, T) tokens already in s.tokens.
Status forward_to_logits(Gpt2::State& s, int64_t B, int64_t T, const ops::Context& ctx) {
  const int64_t N = B * T;
  const int64_t C = s.config.n_embd;
  const int64_t V = s.config.vocab_size;
  const int64_t Vp = s.config.padded_vocab();
  KILN_RETURN_IF_ERROR(gpt2_refresh_weight16(s, ctx));

  ops::EmbeddingParams emb;
  emb.tokens = TensorView::i32(s.tokens.data(), {B, T});
  emb.wte = mat(s.param(kWteParam), V, C);
  emb.wpe = mat(s.param(kWpeParam), s.config.block_size, C);
  emb.y = TensorView::f32(s.act(s.acts.encoded), {B, T, C});
  KILN_RETURN_IF_ERROR(ops::embedding_forward(emb, ctx).with_context("gpt2 forward"));

  for (int l = 0; l < s.config.n_layer; ++l)
    KILN_RETURN_IF_ERROR(gpt2_in_block(block_forward(s, l, B, T, ctx), "forward", l));

  const int L = s.config.n_layer;
  ops::LayerNormParams lnf;
  lnf.x = mat(s.act(s.layer_acts[static_cast<size_t>(L - 1)].res3), N, C);
  lnf.weight = vec(s.param(s.ln_f_weight_index()), C);
  lnf.bias = vec(s.param(s.ln_f_weight_index() + 1), C);
  lnf.y = gpt2_saved_matmul_input(s, s.act(s.acts.lnf), N, C, s.acts16.lnf);
  lnf.mean = vec(s.act(s.acts.lnf_mean), N);
  lnf.rstd = vec(s.act(s.acts.lnf_rstd), N);
  KILN_RETURN_IF_ERROR(ops::layernorm_forward(lnf, ctx).with_context("gpt2 forward ln_f"));

  ops::MatmulParams head;
  head.x = lnf.y;
  head.w = gpt2_matmul_weight(s, s.param(kWteParam), Vp, C);  // the pad rows included: zero logits
  head.w_packed = gpt2_packed_weight(s, s.param(kWteParam));
  head.y = mat(s.act(s.acts.logits), N, Vp);
  return ops::matmul_forward(head, ctx).with_context("gpt2 forward head");
}

Status check_rows(const char* what, size_t got, int64_t B, int64_t T) {
  if (static_cast<int64_t>(got) == B * T) return Status();
  return Status::invalid_argument(
      "gpt2 forward: " + std::string(what) + " has " + std::to_string(got) +
      " ids, expected batch * seq = " + std::to_string(B) + " * " + std::to_string(T));
}

}  // namespace

Result<float> Gpt2::forward(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                            const ops::Context& ctx) {
  State& s = *s_;
  const int64_t B = s.batch, T = s.seq, N = B * T;
  KILN_RETURN_IF_ERROR(check_rows("tokens", tokens.size(), B, T));
  if (!targets.empty()) KILN_RETURN_IF_ERROR(check_rows("targets", targets.size(), B, T));
  s.phase = ForwardPhase::kNone;
  s.fwd_batch = s.batch;
  s.fwd_seq = s.seq;
  std::memcpy(s.tokens.data(), tokens.data(), tokens.size_bytes());
  KILN_RETURN_IF_ERROR(forward_to_logits(s, B, T, ctx));
  if (targets.empty()) {
    s.phase = ForwardPhase::kLogitsOnly;
    return 0.0f;
  }
  std::memcpy(s.targets.data(), targets.data(), targets.size_bytes());
  ops::CrossEntropyParams ce;
  ce.logits = mat(s.act(s.acts.logits), N, s.config.padded_vocab());
  ce.targets = TensorView::i32(s.targets.data(), {N});
  ce.losses = vec(s.act(s.acts.losses), N);
  ce.lse = vec(s.act(s.acts.ce_lse), N);
  ce.vocab = s.config.vocab_size;
  KILN_RETURN_IF_ERROR(ops::cross_entropy_forward(ce, ctx).with_context("gpt2 forward"));
  // The mean in double: N terms of about ln(V) each would lose about log2(N) bits in float.
  const float* losses = s.act(s.acts.losses);
  double sum = 0;
  for (int64_t i = 0; i < N; ++i)
    sum += losses[i];
  s.phase = ForwardPhase::kWithTargets;
  return static_cast<float>(sum / static_cast<double>(N));
}

Status Gpt2::forward_logits(std::span<const int32_t> tokens, int batch, int seq,
                            const ops::Context& ctx) {
  State& s = *s_;
  if (batch < 1 || seq < 1 || seq > s.config.block_size ||
      static_cast<int64_t>(batch) * seq > static_cast<int64_t>(s.batch) * s.seq) {
    return Status::invalid_argument("gpt2 forward_logits: batch " + std::to_string(batch) +
                                    " x seq " + std::to_string(seq) +
                                    " must be >= 1, within create()'s " + std::to_string(s.batch) +
                                    " x " + std::to_string(s.seq) + " rows and seq <= block_size " +
                                    std::to_string(s.config.block_size));
  }
  KILN_RETURN_IF_ERROR(check_rows("tokens", tokens.size(), batch, seq));
  s.phase = ForwardPhase::kNone;
  s.fwd_batch = batch;
  s.fwd_seq = seq;
  std::memcpy(s.tokens.data(), tokens.data(), tokens.size_bytes());
  KILN_RETURN_IF_ERROR(forward_to_logits(s, batch, seq, ctx));
  s.phase = ForwardPhase::kLogitsOnly;
  return Status();
}

}  // namespace kiln::train
