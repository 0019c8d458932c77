// Gpt2's backward: the forward of model_forward.cc in reverse, accumulating into the gradients.
//
// The residual stream's gradient lives in one buffer, dres, for the whole pass: a residual add
// y = x + f(x) passes dy unchanged to x and to f's output, so f's backward reads dres as its dy
// and the LayerNorm that starts the branch adds its input gradient into dres (accumulate_dx). No
// residual_backward op and no copy is needed. With N = B * T rows and dlosses = loss_scale / N:
//   logits := dlogits (in place, pad columns 0; bf16: into the bf16 scratch instead);
//   dlnf = dlogits @ wte_padded;
//   dwte += dlogits^T @ lnf;  dres = ln_f backward (dlnf)
//   per block l = L-1 .. 0:
//     dfch = dres @ mlp.proj.w (then GELU's backward, in place; bf16: into the bf16 scratch);
//     dmlp.proj.{w,b} +=
//     dln = dfch @ fc.w;  dfc.{w,b} +=;  dres += ln_2 backward (dln)
//     datty = dres @ proj.w;  dproj.{w,b} +=
//     dq, dk, dv = attention backward (datty), written into the thirds of dqkv
//     dln = dqkv @ qkv.w;  dqkv.{w,b} +=;  dres += ln_1 backward (dln)
//     block_done(l)
//   dwte, dwpe += embedding backward (dres);  block_done(-1)
//
// In bf16 each linear's backward takes its output gradient as bf16 in the bf16 scratch
// (cross-entropy and GELU write it there; the others are rounded into it) and multiplies it by
// the bf16 weights and the forward's bf16 input (model_precision.cc); dx, dw and dbias are f32,
// and the gradients accumulate in f32.
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

TensorView mat(float* p, int64_t rows, int64_t cols) {
  return TensorView::f32(p, {rows, cols});
}
TensorView vec(float* p, int64_t n) {
  return TensorView::f32(p, {n});
}

// dy is the gradient of a Linear's output (N, out), in the matmul's dtype; fills dx
// (overwritten), adds to dw and dbias. x16 is where the forward saved x's bf16 copy (bf16
// models).
Status linear_backward(Gpt2::State& s, const TensorView& dy, float* x, size_t x16, float* w,
                       float* dx, float* dw, float* dbias, int64_t N, int64_t in, int64_t out,
                       const ops::Context& ctx) {
  ops::MatmulBackwardParams p;
  p.dy = dy;
  p.x = gpt2_saved_matmul_input(s, x, N, in, x16);
  p.w = gpt2_matmul_weight(s, w, out, in);
  p.w_packed = gpt2_packed_weight(s, w);
  p.dx = mat(dx, N, in);
  p.dw = mat(dw, out, in);
  p.dbias = vec(dbias, out);
  return ops::matmul_backward(p, ctx);
}

// dres += the gradient through a LayerNorm whose output gradient is dy.
Status layernorm_backward_into(float* dy, float* x, float* weight, float* mean, float* rstd,
                               float* dres, float* dweight, float* dbias, int64_t N, int64_t C,
                               bool accumulate, const ops::Context& ctx) {
  ops::LayerNormBackwardParams p;
  p.dy = mat(dy, N, C);
  p.x = mat(x, N, C);
  p.weight = vec(weight, C);
  p.mean = vec(mean, N);
  p.rstd = vec(rstd, N);
  p.dx = mat(dres, N, C);
  p.dweight = vec(dweight, C);
  p.dbias = vec(dbias, C);
  p.accumulate_dx = accumulate;
  return ops::layernorm_backward(p, ctx);
}

Status block_backward(Gpt2::State& s, int l, const ops::Context& ctx) {
  const int64_t B = s.batch, T = s.seq, N = B * T;
  const int64_t C = s.config.n_embd;
  const int64_t H = s.config.n_head;
  const int64_t D = C / H;
  const LayerActs& a = s.layer_acts[static_cast<size_t>(l)];
  const LayerActs16 a16 = s.bf16() ? s.layer_acts16[static_cast<size_t>(l)] : LayerActs16{};
  float* x = l == 0 ? s.act(s.acts.encoded) : s.act(s.layer_acts[static_cast<size_t>(l - 1)].res3);
  float* dres = s.act(s.acts.dres);
  float* dln = s.act(s.acts.dln);
  float* dfch = s.act(s.acts.dfch);

  // MLP: res3 = res2 + mlp.proj(gelu(fc(ln_2(res2)))).
  KILN_ASSIGN_OR_RETURN(const TensorView dres_in,
                        gpt2_matmul_input(s, dres, N, C, s.acts16.dy, ctx));
  KILN_RETURN_IF_ERROR(linear_backward(
      s, dres_in, s.act(a.fch_gelu), a16.fch_gelu, s.block_param(l, kMlpProjWeight), dfch,
      s.block_grad(l, kMlpProjWeight), s.block_grad(l, kMlpProjBias), N, 4 * C, C, ctx));
  // GELU's input gradient: in place in f32; in a bf16 model written as fc's bf16 dy into the
  // scratch mlp.proj's backward is done with.
  ops::GeluBackwardParams gelu;
  gelu.x = mat(s.act(a.fch), N, 4 * C);
  gelu.dy = mat(dfch, N, 4 * C);
  gelu.dx = gpt2_saved_matmul_input(s, dfch, N, 4 * C, s.acts16.dy);
  KILN_RETURN_IF_ERROR(ops::gelu_backward(gelu, ctx));
  KILN_RETURN_IF_ERROR(linear_backward(s, gelu.dx, s.act(a.ln2), a16.ln2,
                                       s.block_param(l, kFcWeight), dln, s.block_grad(l, kFcWeight),
                                       s.block_grad(l, kFcBias), N, C, 4 * C, ctx));
  KILN_RETURN_IF_ERROR(layernorm_backward_into(
      dln, s.act(a.res2), s.block_param(l, kLn2Weight), s.act(a.ln2_mean), s.act(a.ln2_rstd), dres,
      s.block_grad(l, kLn2Weight), s.block_grad(l, kLn2Bias), N, C, true, ctx));

  // Attention: res2 = x + proj(attention(qkv(ln_1(x)))).
  float* datty = s.act(s.acts.datty);
  KILN_ASSIGN_OR_RETURN(const TensorView dres_attn,
                        gpt2_matmul_input(s, dres, N, C, s.acts16.dy, ctx));
  KILN_RETURN_IF_ERROR(
      linear_backward(s, dres_attn, s.act(a.atty), a16.atty, s.block_param(l, kProjWeight), datty,
                      s.block_grad(l, kProjWeight), s.block_grad(l, kProjBias), N, C, C, ctx));
  float* qkv = s.act(a.qkv);
  float* dqkv = s.act(s.acts.dqkv);
  const TensorView dqkv_all = mat(dqkv, N, 3 * C);
  // In a bf16 model: q, k, v from the forward's bf16 copy, dout rounded now (the bf16 scratch
  // is free again: attn.proj's backward is done with it).
  const TensorView qkv_in = gpt2_saved_matmul_input(s, qkv, N, 3 * C, a16.qkv);
  KILN_ASSIGN_OR_RETURN(const TensorView dout, gpt2_matmul_input(s, datty, N, C, s.acts16.dy, ctx));
  ops::AttentionBackwardParams att;
  att.q = gpt2_qkv_third(qkv_in, 0, B, T, H, D);
  att.k = gpt2_qkv_third(qkv_in, 1, B, T, H, D);
  att.v = gpt2_qkv_third(qkv_in, 2, B, T, H, D);
  att.o = TensorView::f32(s.act(a.atty), {B, T, H, D});
  att.lse = TensorView::f32(s.act(a.att_lse), {B, H, T});
  att.dout = TensorView::of(dout.data, dout.dtype, {B, T, H, D});
  att.dq = gpt2_qkv_third(dqkv_all, 0, B, T, H, D);
  att.dk = gpt2_qkv_third(dqkv_all, 1, B, T, H, D);
  att.dv = gpt2_qkv_third(dqkv_all, 2, B, T, H, D);
  att.causal = true;
  KILN_RETURN_IF_ERROR(ops::attention_backward(att, ctx));
  KILN_ASSIGN_OR_RETURN(const TensorView dqkv_in,
                        gpt2_matmul_input(s, dqkv, N, 3 * C, s.acts16.dy, ctx));
  KILN_RETURN_IF_ERROR(
      linear_backward(s, dqkv_in, s.act(a.ln1), a16.ln1, s.block_param(l, kQkvWeight), dln,
                      s.block_grad(l, kQkvWeight), s.block_grad(l, kQkvBias), N, C, 3 * C, ctx));
  return layernorm_backward_into(dln, x, s.block_param(l, kLn1Weight), s.act(a.ln1_mean),
                                 s.act(a.ln1_rstd), dres, s.block_grad(l, kLn1Weight),
                                 s.block_grad(l, kLn1Bias), N, C, true, ctx);
}

}  // namespace

Status Gpt2::backward(float loss_scale, const ops::Context& ctx,
                      const std::function<void(int)>& block_done) {
  State& s = *s_;
  if (s.phase != ForwardPhase::kWithTargets) {
    return Status::invalid_argument(
        "gpt2 backward: needs a forward with targets just before it (each backward consumes "
        "the logits of one forward)");
  }
  s.phase = ForwardPhase::kBackwardDone;
  const int L = s.config.n_layer;
  const int64_t B = s.batch, T = s.seq, N = B * T;
  const int64_t C = s.config.n_embd;
  const int64_t V = s.config.vocab_size;
  const int64_t Vp = s.config.padded_vocab();

  float* dlosses = s.act(s.acts.dlosses);
  const float dloss = loss_scale / static_cast<float>(N);
  for (int64_t i = 0; i < N; ++i)
    dlosses[i] = dloss;
  ops::CrossEntropyBackwardParams ce;
  ce.logits = mat(s.act(s.acts.logits), N, Vp);
  ce.targets = TensorView::i32(s.targets.data(), {N});
  ce.lse = vec(s.act(s.acts.ce_lse), N);
  ce.dlosses = vec(dlosses, N);
  ce.vocab = V;
  // dlogits: over the logits in f32; in a bf16 model written as the head's bf16 dy.
  const TensorView dlogits = gpt2_saved_matmul_input(s, s.act(s.acts.logits), N, Vp, s.acts16.dy);
  if (s.bf16()) ce.dlogits = dlogits;
  KILN_RETURN_IF_ERROR(ops::cross_entropy_backward(ce, ctx).with_context("gpt2 backward"));

  // The head: logits = lnf @ wte_padded^T.
  float* dln = s.act(s.acts.dln);
  ops::MatmulBackwardParams head;
  head.dy = dlogits;
  head.x = gpt2_saved_matmul_input(s, s.act(s.acts.lnf), N, C, s.acts16.lnf);
  head.w = gpt2_matmul_weight(s, s.param(kWteParam), Vp, C);
  head.w_packed = gpt2_packed_weight(s, s.param(kWteParam));
  head.dx = mat(dln, N, C);
  head.dw = mat(s.grad(kWteParam), Vp, C);
  KILN_RETURN_IF_ERROR(ops::matmul_backward(head, ctx).with_context("gpt2 backward head"));
  const int lnf = s.ln_f_weight_index();
  KILN_RETURN_IF_ERROR(
      layernorm_backward_into(dln, s.act(s.layer_acts[static_cast<size_t>(L - 1)].res3),
                              s.param(lnf), s.act(s.acts.lnf_mean), s.act(s.acts.lnf_rstd),
                              s.act(s.acts.dres), s.grad(lnf), s.grad(lnf + 1), N, C, false, ctx)
          .with_context("gpt2 backward ln_f"));

  for (int l = L - 1; l >= 0; --l) {
    KILN_RETURN_IF_ERROR(gpt2_in_block(block_backward(s, l, ctx), "backward", l));
    if (block_done) block_done(l);
  }

  ops::EmbeddingBackwardParams emb;
  emb.tokens = TensorView::i32(s.tokens.data(), {B, T});
  emb.dy = TensorView::f32(s.act(s.acts.dres), {B, T, C});
  emb.dwte = mat(s.grad(kWteParam), V, C);
  emb.dwpe = mat(s.grad(kWpeParam), s.config.block_size, C);
  KILN_RETURN_IF_ERROR(ops::embedding_backward(emb, ctx).with_context("gpt2 backward"));
  if (block_done) block_done(-1);
  return Status();
}

}  // namespace kiln::train
