// kiln_model_step_bench: tokens/s of one GPT-2 training step (forward, backward, gradient norm,
// AdamW) on kiln_train's Gpt2, per thread count, with the time of each phase and of each op.
//
//   kiln_model_step_bench [--model tiny|gpt2-124m] [--batch 8] [--seq 256] [--steps 5]
//                         [--threads 1,2] [--no-ops] [--precision fp32|bf16]
//                         [--packing auto|always|never]
//
// The model is configs/tiny.yaml's (6 layers, 6 heads, C = 384, block 256, V = 50257 padded to
// 50304) or gpt2-124m's (12 layers, 12 heads, C = 768). Each thread count gets its own pool, ops
// workspace and model; one untimed step warms up (page faults, OpenBLAS's buffers, the workspace's
// growth), then --steps steps are timed and the median is reported, as tokens/s = B * T / step
// time, and as GFLOP/s by the model's flops_per_token (llm.c's 6N + 6LCT).
//
// The per-op table times each op alone on the step's shapes (its own buffers, the median of a
// few calls) and multiplies by its calls per step; the sum beside the measured step shows what
// the step spends outside the ops (about nothing, if the model adds no passes of its own).
// Timings belong here, never in a unit test.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <kiln/base/thread_pool.h>
#include <kiln/ops/attention.h>
#include <kiln/ops/context.h>
#include <kiln/ops/convert.h>
#include <kiln/ops/cross_entropy.h>
#include <kiln/ops/elementwise.h>
#include <kiln/ops/embedding.h>
#include <kiln/ops/matmul.h>
#include <kiln/ops/norm.h>
#include <kiln/ops/optimizer.h>
#include <kiln/train/model.h>
#include <kiln/train/rng.h>

namespace {

using kiln::Status;
using kiln::ThreadPool;
using kiln::ops::Context;
using kiln::ops::TensorView;
using kiln::train::Gpt2;
using kiln::train::ModelConfig;

struct Options {
  int batch = 8;
  int seq = 256;
  int steps = 5;
  std::vector<int> threads = {1, 2};
  bool ops = true;
  std::string model = "tiny";  // tiny or gpt2-124m (configs/<model>.yaml's shape)
  kiln::train::Precision precision = kiln::train::Precision::kFp32;
  kiln::train::WeightPacking packing = kiln::train::WeightPacking::kAuto;  // bf16 only
};

// Timed calls per op: the median of this many, after one warm-up call.
constexpr int kOpReps = 3;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void check(const Status& st, const char* what) {
  if (st.ok()) return;
  std::fprintf(stderr, "%s: %s\n", what, st.to_string().c_str());
  std::abort();
}

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--no-ops") {
      o->ops = false;
    } else if (a == "--precision" && has_value) {
      kiln::Result<kiln::train::Precision> p = kiln::train::parse_precision(argv[++i]);
      if (!p.ok()) return false;
      o->precision = *p;
    } else if (a == "--packing" && has_value) {
      const std::string v = argv[++i];
      if (v == "auto") {
        o->packing = kiln::train::WeightPacking::kAuto;
      } else if (v == "always") {
        o->packing = kiln::train::WeightPacking::kAlways;
      } else if (v == "never") {
        o->packing = kiln::train::WeightPacking::kNever;
      } else {
        return false;
      }
    } else if (a == "--model" && has_value) {
      o->model = argv[++i];
      if (o->model != "tiny" && o->model != "gpt2-124m") return false;
    } else if (a == "--batch" && has_value) {
      o->batch = std::stoi(argv[++i]);
    } else if (a == "--seq" && has_value) {
      o->seq = std::stoi(argv[++i]);
    } else if (a == "--steps" && has_value) {
      o->steps = std::stoi(argv[++i]);
    } else if (a == "--threads" && has_value) {
      o->threads.clear();
      const std::string list = argv[++i];
      size_t start = 0;
      while (start <= list.size()) {
        const size_t comma = std::min(list.find(',', start), list.size());
        o->threads.push_back(std::stoi(list.substr(start, comma - start)));
        start = comma + 1;
      }
    } else {
      return false;
    }
  }
  return o->batch > 0 && o->seq > 0 && o->seq <= 256 && o->steps > 0 && !o->threads.empty();
}

ModelConfig tiny() {
  ModelConfig c;
  c.n_layer = 6;
  c.n_head = 6;
  c.n_embd = 384;
  c.block_size = 256;
  c.vocab_size = 50257;
  return c;
}

// configs/gpt2-124m.yaml's shape (block 256 here: the bench's --seq stops there).
ModelConfig gpt2_124m() {
  ModelConfig c;
  c.n_layer = 12;
  c.n_head = 12;
  c.n_embd = 768;
  c.block_size = 256;
  c.vocab_size = 50257;
  return c;
}

// A buffer of small random floats (normal * 0.02, like activations and weights at init).
std::vector<float> filled(size_t n, uint64_t seed) {
  kiln::train::Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v)
    x = 0.02f * rng.normal();
  return v;
}

// Median ms of kOpReps calls of fn after one warm-up call.
double op_ms(const std::function<Status()>& fn, const char* name) {
  check(fn(), name);
  std::vector<double> t;
  for (int r = 0; r < kOpReps; ++r) {
    const double t0 = now_s();
    check(fn(), name);
    t.push_back((now_s() - t0) * 1e3);
  }
  return median(t);
}

struct OpRow {
  const char* name;
  int calls;  // per step
  double ms;  // per call
};

// bf16 copies of f32 buffers (round to nearest even), for the bf16 rows.
std::vector<uint16_t> bf16_of(const std::vector<float>& v, const Context& ctx) {
  std::vector<uint16_t> out(v.size());
  const auto n = static_cast<int64_t>(v.size());
  check(
      kiln::ops::convert_f32_to_bf16(TensorView::f32(const_cast<float*>(v.data()), {n}),
                                     TensorView::of(out.data(), kiln::ops::DType::kBF16, {n}), ctx),
      "to bf16");
  return out;
}

// Every op of a step, alone, on the step's shapes; with bf16, the matmuls take bf16 inputs and
// the conversions the model makes are rows of their own.
std::vector<OpRow> time_ops(const ModelConfig& c, int64_t B, int64_t T, size_t param_floats,
                            kiln::train::Precision precision, const Context& ctx) {
  const bool bf16 = precision == kiln::train::Precision::kBf16;
  const int64_t N = B * T, C = c.n_embd, H = c.n_head, D = C / H, L = c.n_layer;
  const int64_t V = c.vocab_size, Vp = c.padded_vocab();
  auto x = filled(static_cast<size_t>(N * 4 * C), 1), y = filled(static_cast<size_t>(N * 4 * C), 2);
  auto dy = filled(static_cast<size_t>(N * 4 * C), 3),
       dx = filled(static_cast<size_t>(N * 4 * C), 4);
  auto w = filled(static_cast<size_t>(Vp * C), 5), dw = filled(static_cast<size_t>(Vp * C), 6);
  auto b = filled(static_cast<size_t>(4 * C), 7), db = filled(static_cast<size_t>(4 * C), 8);
  auto stats = filled(static_cast<size_t>(N * H), 9), stats2 = filled(static_cast<size_t>(N), 10);
  auto logits = filled(static_cast<size_t>(N * Vp), 11);
  auto qkv = filled(static_cast<size_t>(N * 3 * C), 12),
       dqkv = filled(static_cast<size_t>(N * 3 * C), 13);
  std::vector<int32_t> tokens(static_cast<size_t>(N));
  kiln::train::Rng rng(14);
  for (int32_t& t : tokens)
    t = static_cast<int32_t>(rng.next_below(static_cast<uint64_t>(V)));
  auto mat = [](std::vector<float>& v, int64_t r, int64_t k) {
    return TensorView::f32(v.data(), {r, k});
  };
  auto vec = [](std::vector<float>& v, int64_t n) { return TensorView::f32(v.data(), {n}); };
  std::vector<OpRow> rows;
  std::vector<uint16_t> x16, w16, dy16, logits16;
  if (bf16) {
    x16 = bf16_of(x, ctx), w16 = bf16_of(w, ctx), dy16 = bf16_of(dy, ctx);
    logits16 = bf16_of(logits, ctx);
  }
  // A matmul input: f32, or its bf16 copy.
  auto in = [&](std::vector<float>& v32, std::vector<uint16_t>& v16, int64_t r, int64_t k) {
    return bf16 ? TensorView::of(v16.data(), kiln::ops::DType::kBF16, {r, k}) : mat(v32, r, k);
  };

  const auto linear = [&](const char* fwd_name, const char* bwd_name, int64_t in_features,
                          int64_t out, int calls, bool bias) {
    // The head's (N, Vp) output and its gradient need the logits buffer; the rest fit in y, dy.
    std::vector<float>& out_buf = out > 4 * C ? logits : y;
    std::vector<float>& dout_buf = out > 4 * C ? logits : dy;
    std::vector<uint16_t>& dout16 = out > 4 * C ? logits16 : dy16;
    kiln::ops::MatmulParams f{in(x, x16, N, in_features), in(w, w16, out, in_features),
                              bias ? vec(b, out) : TensorView{}, mat(out_buf, N, out)};
    rows.push_back(
        {fwd_name, calls, op_ms([&] { return kiln::ops::matmul_forward(f, ctx); }, fwd_name)});
    kiln::ops::MatmulBackwardParams g{
        in(dout_buf, dout16, N, out), in(x, x16, N, in_features),
        in(w, w16, out, in_features), mat(dx, N, in_features),
        mat(dw, out, in_features),    bias ? vec(db, out) : TensorView{}};
    rows.push_back(
        {bwd_name, calls, op_ms([&] { return kiln::ops::matmul_backward(g, ctx); }, bwd_name)});
  };
  const int blocks = static_cast<int>(L);
  linear("matmul qkv fwd", "matmul qkv bwd", C, 3 * C, blocks, true);
  linear("matmul attn.proj fwd", "matmul attn.proj bwd", C, C, blocks, true);
  linear("matmul mlp.fc fwd", "matmul mlp.fc bwd", C, 4 * C, blocks, true);
  linear("matmul mlp.proj fwd", "matmul mlp.proj bwd", 4 * C, C, blocks, true);
  linear("matmul head fwd", "matmul head bwd", C, Vp, 1, false);

  const auto third = [&](std::vector<float>& base, int64_t i) {
    return TensorView::strided(base.data() + i * C, kiln::ops::DType::kF32, {B, T, H, D},
                               {T * 3 * C, 3 * C, D, 1});
  };
  // With bf16, attention reads bf16 q, k, v and dout, as the model gives it.
  std::vector<uint16_t> qkv16 = bf16 ? bf16_of(qkv, ctx) : std::vector<uint16_t>();
  const auto input_third = [&](int64_t i) {
    if (!bf16) return third(qkv, i);
    return TensorView::strided(qkv16.data() + i * C, kiln::ops::DType::kBF16, {B, T, H, D},
                               {T * 3 * C, 3 * C, D, 1});
  };
  kiln::ops::AttentionParams af{input_third(0), input_third(1), input_third(2),
                                TensorView::f32(y.data(), {B, T, H, D}),
                                TensorView::f32(stats.data(), {B, H, T})};
  rows.push_back({"attention fwd", blocks,
                  op_ms([&] { return kiln::ops::attention_forward(af, ctx); }, "attention fwd")});
  kiln::ops::AttentionBackwardParams ab{
      input_third(0),
      input_third(1),
      input_third(2),
      af.o,
      af.lse,
      bf16 ? TensorView::of(dy16.data(), kiln::ops::DType::kBF16, {B, T, H, D})
           : TensorView::f32(dy.data(), {B, T, H, D}),
      third(dqkv, 0),
      third(dqkv, 1),
      third(dqkv, 2)};
  rows.push_back({"attention bwd", blocks,
                  op_ms([&] { return kiln::ops::attention_backward(ab, ctx); }, "attention bwd")});

  // In a bf16 model LayerNorm, GELU and cross-entropy's backward write the next matmul's bf16
  // input themselves (model_forward.cc, model_backward.cc): timed so here.
  std::vector<uint16_t> out16(static_cast<size_t>(N * Vp));
  const auto out_view = [&](std::vector<float>& f32_out, int64_t r, int64_t cols) {
    return bf16 ? TensorView::of(out16.data(), kiln::ops::DType::kBF16, {r, cols})
                : mat(f32_out, r, cols);
  };
  kiln::ops::LayerNormParams lf{mat(x, N, C),      vec(b, C),     vec(db, C),
                                out_view(y, N, C), vec(stats, N), vec(stats2, N)};
  rows.push_back({"layernorm fwd", 2 * blocks + 1,
                  op_ms([&] { return kiln::ops::layernorm_forward(lf, ctx); }, "ln fwd")});
  kiln::ops::LayerNormBackwardParams lb{mat(dy, N, C), mat(x, N, C),   vec(b, C),
                                        vec(stats, N), vec(stats2, N), mat(dx, N, C),
                                        vec(w, C),     vec(db, C),     true};
  rows.push_back({"layernorm bwd", 2 * blocks + 1,
                  op_ms([&] { return kiln::ops::layernorm_backward(lb, ctx); }, "ln bwd")});
  kiln::ops::GeluParams gf{mat(x, N, 4 * C), out_view(y, N, 4 * C)};
  rows.push_back(
      {"gelu fwd", blocks, op_ms([&] { return kiln::ops::gelu_forward(gf, ctx); }, "gelu fwd")});
  kiln::ops::GeluBackwardParams gb{mat(x, N, 4 * C), mat(dy, N, 4 * C), out_view(dy, N, 4 * C)};
  rows.push_back(
      {"gelu bwd", blocks, op_ms([&] { return kiln::ops::gelu_backward(gb, ctx); }, "gelu bwd")});
  kiln::ops::ResidualParams rf{mat(x, N, C), mat(dx, N, C), mat(y, N, C)};
  rows.push_back({"residual fwd", 2 * blocks,
                  op_ms([&] { return kiln::ops::residual_forward(rf, ctx); }, "residual")});
  kiln::ops::EmbeddingParams ef{TensorView::i32(tokens.data(), {B, T}), mat(w, V, C),
                                mat(dw, c.block_size, C), TensorView::f32(y.data(), {B, T, C})};
  rows.push_back(
      {"embedding fwd", 1, op_ms([&] { return kiln::ops::embedding_forward(ef, ctx); }, "emb")});
  kiln::ops::EmbeddingBackwardParams eb{ef.tokens, TensorView::f32(dy.data(), {B, T, C}),
                                        mat(dw, V, C), mat(w, c.block_size, C)};
  rows.push_back(
      {"embedding bwd", 1, op_ms([&] { return kiln::ops::embedding_backward(eb, ctx); }, "emb")});

  kiln::ops::CrossEntropyParams cf{mat(logits, N, Vp), TensorView::i32(tokens.data(), {N}),
                                   vec(stats, N), vec(stats2, N), V};
  rows.push_back({"cross_entropy fwd", 1,
                  op_ms([&] { return kiln::ops::cross_entropy_forward(cf, ctx); }, "ce fwd")});
  std::vector<float> dlosses(static_cast<size_t>(N), 1.0f / static_cast<float>(N));
  kiln::ops::CrossEntropyBackwardParams cb{cf.logits, cf.targets, cf.lse, vec(dlosses, N), V};
  if (bf16) cb.dlogits = out_view(logits, N, Vp);
  rows.push_back({"cross_entropy bwd", 1,
                  op_ms([&] { return kiln::ops::cross_entropy_backward(cb, ctx); }, "ce bwd")});

  if (bf16) {
    // What the bf16 model still rounds in passes of their own (model_precision.cc): in the
    // forward the attention output (N x C, attn.proj's input) and qkv (N x 3C, attention's);
    // in the backward the residual gradient twice (N x C, both projections' dy), attention's
    // dout (N x C) and dqkv (N x 3C, qkv's dy). The weights' copy is AdamW's (its row below).
    const auto convert_ms = [&](std::vector<float>& src, int64_t n) {
      return op_ms(
          [&] {
            return kiln::ops::convert_f32_to_bf16(
                vec(src, n), TensorView::of(out16.data(), kiln::ops::DType::kBF16, {n}), ctx);
          },
          "to bf16");
    };
    const double nc = convert_ms(x, N * C);
    const double n3c = convert_ms(x, N * 3 * C);
    rows.push_back({"to bf16: forward inputs (per block)", blocks, nc + n3c});
    rows.push_back({"to bf16: output gradients (per block)", blocks, 3 * nc + n3c});
  }
  std::vector<float> p = filled(param_floats, 15), g = filled(param_floats, 16);
  std::vector<float> m(param_floats, 0.0f), v(param_floats, 0.0f);
  const auto n = static_cast<int64_t>(param_floats);
  const std::vector<TensorView> grads = {vec(g, n)};
  rows.push_back({"grad norm", 1,
                  op_ms([&] { return kiln::ops::global_grad_norm(grads, ctx).status(); }, "norm")});
  kiln::ops::AdamWParams ap{vec(p, n), vec(g, n), vec(m, n), vec(v, n)};
  // A bf16 model's AdamW also writes the weights' bf16 copy as it goes (model.cc).
  std::vector<uint16_t> p16(bf16 ? param_floats : 0);
  if (bf16) ap.params_bf16 = TensorView::of(p16.data(), kiln::ops::DType::kBF16, {n});
  rows.push_back({bf16 ? "adamw (+ bf16 weights)" : "adamw (whole arena)", 1,
                  op_ms([&] { return kiln::ops::adamw_update(ap, ctx); }, "adamw")});
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, &o)) {
    std::fprintf(stderr,
                 "usage: kiln_model_step_bench [--model tiny|gpt2-124m] [--batch B] [--seq T<=256] "
                 "[--steps N] "
                 "[--threads 1,2] [--no-ops] [--precision fp32|bf16] "
                 "[--packing auto|always|never]\n");
    return 2;
  }
  const ModelConfig config = o.model == "gpt2-124m" ? gpt2_124m() : tiny();
  const int64_t tokens_per_step = static_cast<int64_t>(o.batch) * o.seq;
  std::printf("GPT-2 %s (L=%d H=%d C=%d V=%d->50304), B=%d T=%d, %d timed steps\n", o.model.c_str(),
              config.n_layer, config.n_head, config.n_embd, config.vocab_size, o.batch, o.seq,
              o.steps);
  for (int threads : o.threads) {
    ThreadPool pool(threads);
    kiln::ops::Workspace workspace;  // the ops' scratch, as the trainer gives it
    kiln::Result<Context> ctx = kiln::ops::make_cpu_context(&pool);
    check(ctx.status(), "context");
    ctx->workspace = &workspace;
    kiln::Result<Gpt2> created = Gpt2::create(
        config, o.batch, o.seq, kiln::train::MomentArenas::whole(), o.precision, o.packing);
    check(created.status(), "create");
    Gpt2& model = *created;
    model.init_weights(1337);
    kiln::train::Rng rng(1);
    std::vector<int32_t> tokens(static_cast<size_t>(tokens_per_step));
    std::vector<int32_t> targets(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<int32_t>(rng.next_below(50257));
      targets[i] = static_cast<int32_t>(rng.next_below(50257));
    }
    std::vector<double> step_ms, fwd_ms, bwd_ms, norm_ms, adam_ms;
    for (int step = 0; step <= o.steps; ++step) {  // step 0: warm-up
      const double t0 = now_s();
      model.zero_grad(*ctx);
      check(model.forward(tokens, targets, *ctx).status(), "forward");
      const double t1 = now_s();
      check(model.backward(1.0f, *ctx), "backward");
      const double t2 = now_s();
      kiln::Result<double> norm = model.grad_norm(*ctx);
      check(norm.status(), "grad_norm");
      const double t3 = now_s();
      check(model.adamw_step(kiln::train::AdamWConfig{}, 6e-4f, step + 1,
                             kiln::ops::grad_clip_scale(*norm, 1.0), *ctx),
            "adamw");
      const double t4 = now_s();
      if (step == 0) continue;
      step_ms.push_back((t4 - t0) * 1e3);
      fwd_ms.push_back((t1 - t0) * 1e3);
      bwd_ms.push_back((t2 - t1) * 1e3);
      norm_ms.push_back((t3 - t2) * 1e3);
      adam_ms.push_back((t4 - t3) * 1e3);
    }
    const double ms = median(step_ms);
    const double flops = model.flops_per_token(o.seq) * static_cast<double>(tokens_per_step);
    std::printf(
        "\nthreads %d: %.0f tokens/s  step %.1f ms (min %.1f)  %.1f GFLOP/s\n"
        "  forward %.1f ms  backward %.1f ms  grad_norm %.1f ms  adamw %.1f ms\n",
        threads, static_cast<double>(tokens_per_step) / (ms * 1e-3), ms,
        *std::min_element(step_ms.begin(), step_ms.end()), flops / (ms * 1e-3) * 1e-9,
        median(fwd_ms), median(bwd_ms), median(norm_ms), median(adam_ms));
    if (!o.ops) continue;
    const std::vector<OpRow> rows =
        time_ops(config, o.batch, o.seq, model.param_data().size(), o.precision, *ctx);
    double total = 0;
    std::printf("  %-22s %6s %10s %10s %7s\n", "op", "calls", "ms/call", "ms/step", "share");
    for (const OpRow& r : rows) {
      const double per_step = r.ms * r.calls;
      total += per_step;
      std::printf("  %-22s %6d %10.3f %10.2f %6.1f%%\n", r.name, r.calls, r.ms, per_step,
                  100.0 * per_step / ms);
    }
    std::printf("  %-22s %6s %10s %10.2f %6.1f%%  (measured step %.1f ms)\n", "sum of ops", "", "",
                total, 100.0 * total / ms, ms);
  }
  return 0;
}
