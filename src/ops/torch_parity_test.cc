// PyTorch parity: Kiln's optimized ops (the public functions on this CPU's best ISA) against
// PyTorch 1.13 in float64, on one or two shapes per op: every op of include/kiln/ops/. Matmul
// with a bias, attention causal and not with D = 64, LayerNorm, RMSNorm (1.13 has no RMSNorm
// module: the formula in torch ops, differentiated by autograd), GELU, the residual add (its
// backward accumulating), cross-entropy with a padded vocabulary, three AdamW steps, the global
// gradient norm and clipping factor (torch.nn.utils.clip_grad_norm_), the embedding, and f32 <->
// bf16 conversion (Tensor.to(torch.bfloat16): ties, subnormals, overflow, infinities, NaN).
// ops-check compares the kernels with our own references; this test checks those references'
// reading of each op's semantics against an independent implementation, through the kernels.
//
// The test writes every input as raw little-endian f32/i32 plus manifest.json into a fresh
// directory, runs `/usr/bin/python3 tests/ops/torch_reference.py <dir>` (which computes the
// forward and, by autograd, the backward in float64 and writes f64 outputs and results.json),
// and compares each output with op_tolerance() of its op, the table ops-check uses. Inputs are
// drawn at the scales of ops-check's cases, so the floors mean the same.
//
// python3-torch and python3-numpy are declared dependencies: when the script cannot import them
// the test fails with the script's message; it never skips.
#include <kiln/ops/attention.h>
#include <kiln/ops/context.h>
#include <kiln/ops/convert.h>
#include <kiln/ops/cross_entropy.h>
#include <kiln/ops/elementwise.h>
#include <kiln/ops/embedding.h>
#include <kiln/ops/matmul.h>
#include <kiln/ops/norm.h>
#include <kiln/ops/optimizer.h>

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/testing/temp_path.h"
#include "ops/check/ops_check.h"

namespace kiln::ops {
namespace {

static_assert(std::endian::native == std::endian::little, "the files are little-endian");

// Importing torch takes a few seconds; the cases take well under a second. A minute means the
// interpreter hangs.
constexpr int kScriptTimeoutS = 120;

std::string script_path() {
  const char* source_dir = std::getenv("KILN_SOURCE_DIR");
  const std::filesystem::path root = source_dir != nullptr && *source_dir != '\0'
                                         ? std::filesystem::path(source_dir)
                                         : std::filesystem::path(KILN_SOURCE_DIR_AT_BUILD);
  return (root / "tests" / "ops" / "torch_reference.py").string();
}

// One case: its inputs (written for PyTorch), Kiln's outputs, and the op whose tolerance each
// output is judged by.
struct ParityCase {
  std::string name;
  std::string op;
  nlohmann::json params = nlohmann::json::object();
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> f32_inputs;
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<int32_t>>> i32_inputs;
  std::map<std::string, std::vector<float>> outputs;
  std::map<std::string, std::string> tolerance_of;  // output -> op name in op_tolerance()
};

ParityCase named_case(std::string name, std::string op) {
  ParityCase c;
  c.name = std::move(name);
  c.op = std::move(op);
  return c;
}

class Inputs {
 public:
  explicit Inputs(uint64_t seed) : rng_(seed) {}
  std::vector<float> uniform(int64_t n, float lo, float hi) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> out(static_cast<size_t>(n));
    for (float& x : out)
      x = dist(rng_);
    return out;
  }
  std::vector<int32_t> ids(int64_t n, int32_t bound) {
    std::uniform_int_distribution<int32_t> dist(0, bound - 1);
    std::vector<int32_t> out(static_cast<size_t>(n));
    for (int32_t& x : out)
      x = dist(rng_);
    return out;
  }

 private:
  std::mt19937_64 rng_;
};

Context best_context() {
  Context ctx;
  ctx.isa = supported_isas().back();
  return ctx;
}

ParityCase matmul_case(Inputs& in) {
  constexpr int64_t M = 67, K = 129, N = 95;
  ParityCase c = named_case("matmul", "matmul");
  const float w_scale = 1.0f / std::sqrt(static_cast<float>(K));
  auto x = in.uniform(M * K, -1, 1), w = in.uniform(N * K, -w_scale, w_scale);
  auto bias = in.uniform(N, -1, 1), dy = in.uniform(M * N, -1, 1);
  std::vector<float> y(M * N), dx(M * K), dw(N * K, 0.0f), dbias(N, 0.0f);
  const Context ctx = best_context();
  EXPECT_TRUE(matmul_forward({TensorView::f32(x.data(), {M, K}), TensorView::f32(w.data(), {N, K}),
                              TensorView::f32(bias.data(), {N}), TensorView::f32(y.data(), {M, N})},
                             ctx)
                  .ok());
  EXPECT_TRUE(
      matmul_backward({TensorView::f32(dy.data(), {M, N}), TensorView::f32(x.data(), {M, K}),
                       TensorView::f32(w.data(), {N, K}), TensorView::f32(dx.data(), {M, K}),
                       TensorView::f32(dw.data(), {N, K}), TensorView::f32(dbias.data(), {N})},
                      ctx)
          .ok());
  c.f32_inputs = {
      {"x", {{M, K}, x}}, {"w", {{N, K}, w}}, {"bias", {{N}, bias}}, {"dy", {{M, N}, dy}}};
  c.outputs = {{"y", y}, {"dx", dx}, {"dw", dw}, {"dbias", dbias}};
  c.tolerance_of = {{"y", "matmul_forward"},
                    {"dx", "matmul_backward"},
                    {"dw", "matmul_backward"},
                    {"dbias", "matmul_backward"}};
  return c;
}

ParityCase attention_case(Inputs& in, const std::string& name, int64_t B, int64_t T, int64_t H,
                          bool causal) {
  constexpr int64_t D = 64;
  ParityCase c = named_case(name, "attention");
  const int64_t n = B * T * H * D;
  auto q = in.uniform(n, -2, 2), k = in.uniform(n, -2, 2), v = in.uniform(n, -2, 2);
  auto dout = in.uniform(n, -1, 1);
  std::vector<float> o(n), lse(B * H * T), dq(n), dk(n), dv(n);
  auto view = [&](std::vector<float>& t) { return TensorView::f32(t.data(), {B, T, H, D}); };
  const Context ctx = best_context();
  AttentionParams f{view(q), view(k), view(v), view(o), TensorView::f32(lse.data(), {B, H, T}),
                    causal,  0.0f};
  EXPECT_TRUE(attention_forward(f, ctx).ok());
  AttentionBackwardParams b{view(q),  view(k),  view(v),  view(o), f.lse, view(dout),
                            view(dq), view(dk), view(dv), causal,  0.0f};
  EXPECT_TRUE(attention_backward(b, ctx).ok());
  c.params = {{"causal", causal}, {"scale", 0.0}};
  c.f32_inputs = {{"q", {{B, T, H, D}, q}},
                  {"k", {{B, T, H, D}, k}},
                  {"v", {{B, T, H, D}, v}},
                  {"dout", {{B, T, H, D}, dout}}};
  c.outputs = {{"o", o}, {"lse", lse}, {"dq", dq}, {"dk", dk}, {"dv", dv}};
  c.tolerance_of = {{"o", "attention_forward"},
                    {"lse", "attention_forward"},
                    {"dq", "attention_backward"},
                    {"dk", "attention_backward"},
                    {"dv", "attention_backward"}};
  return c;
}

ParityCase layernorm_case(Inputs& in) {
  constexpr int64_t N = 67, C = 129;
  ParityCase c = named_case("layernorm", "layernorm");
  auto x = in.uniform(N * C, -2, 3), weight = in.uniform(C, 0.5f, 1.5f);
  auto bias = in.uniform(C, -1, 1), dy = in.uniform(N * C, -1, 1);
  std::vector<float> y(N * C), mean(N), rstd(N), dx(N * C), dweight(C, 0.0f), dbias(C, 0.0f);
  const Context ctx = best_context();
  constexpr float kEps = 1e-5f;
  EXPECT_TRUE(layernorm_forward(
                  {TensorView::f32(x.data(), {N, C}), TensorView::f32(weight.data(), {C}),
                   TensorView::f32(bias.data(), {C}), TensorView::f32(y.data(), {N, C}),
                   TensorView::f32(mean.data(), {N}), TensorView::f32(rstd.data(), {N}), kEps},
                  ctx)
                  .ok());
  EXPECT_TRUE(
      layernorm_backward({TensorView::f32(dy.data(), {N, C}), TensorView::f32(x.data(), {N, C}),
                          TensorView::f32(weight.data(), {C}), TensorView::f32(mean.data(), {N}),
                          TensorView::f32(rstd.data(), {N}), TensorView::f32(dx.data(), {N, C}),
                          TensorView::f32(dweight.data(), {C}), TensorView::f32(dbias.data(), {C})},
                         ctx)
          .ok());
  c.params = {{"eps", static_cast<double>(kEps)}};
  c.f32_inputs = {
      {"x", {{N, C}, x}}, {"weight", {{C}, weight}}, {"bias", {{C}, bias}}, {"dy", {{N, C}, dy}}};
  c.outputs = {{"y", y},   {"mean", mean},       {"rstd", rstd},
               {"dx", dx}, {"dweight", dweight}, {"dbias", dbias}};
  for (const char* fwd : {"y", "mean", "rstd"})
    c.tolerance_of[fwd] = "layernorm_forward";
  for (const char* bwd : {"dx", "dweight", "dbias"})
    c.tolerance_of[bwd] = "layernorm_backward";
  return c;
}

ParityCase gelu_case(Inputs& in) {
  constexpr int64_t n = 1037;
  ParityCase c = named_case("gelu", "gelu");
  auto x = in.uniform(n, -5, 5), dy = in.uniform(n, -1, 1);
  std::vector<float> y(n), dx(n);
  const Context ctx = best_context();
  EXPECT_TRUE(
      gelu_forward({TensorView::f32(x.data(), {n}), TensorView::f32(y.data(), {n})}, ctx).ok());
  EXPECT_TRUE(gelu_backward({TensorView::f32(x.data(), {n}), TensorView::f32(dy.data(), {n}),
                             TensorView::f32(dx.data(), {n})},
                            ctx)
                  .ok());
  c.f32_inputs = {{"x", {{n}, x}}, {"dy", {{n}, dy}}};
  c.outputs = {{"y", y}, {"dx", dx}};
  c.tolerance_of = {{"y", "gelu_forward"}, {"dx", "gelu_backward"}};
  return c;
}

ParityCase cross_entropy_case(Inputs& in) {
  constexpr int64_t N = 33, Vp = 136, kVocab = 129;
  ParityCase c = named_case("cross_entropy", "cross_entropy");
  auto logits = in.uniform(N * Vp, -4, 4);
  auto targets = in.ids(N, kVocab);
  auto dlosses = in.uniform(N, 0.5f, 1.5f);
  std::vector<float> losses(N), lse(N), dlogits = logits;
  const Context ctx = best_context();
  EXPECT_TRUE(cross_entropy_forward(
                  {TensorView::f32(logits.data(), {N, Vp}), TensorView::i32(targets.data(), {N}),
                   TensorView::f32(losses.data(), {N}), TensorView::f32(lse.data(), {N}), kVocab},
                  ctx)
                  .ok());
  EXPECT_TRUE(cross_entropy_backward(
                  {TensorView::f32(dlogits.data(), {N, Vp}), TensorView::i32(targets.data(), {N}),
                   TensorView::f32(lse.data(), {N}), TensorView::f32(dlosses.data(), {N}), kVocab},
                  ctx)
                  .ok());
  c.params = {{"vocab", kVocab}};
  c.f32_inputs = {{"logits", {{N, Vp}, logits}}, {"dlosses", {{N}, dlosses}}};
  c.i32_inputs = {{"targets", {{N}, targets}}};
  c.outputs = {{"losses", losses}, {"lse", lse}, {"dlogits", dlogits}};
  c.tolerance_of = {{"losses", "cross_entropy_forward"},
                    {"lse", "cross_entropy_forward"},
                    {"dlogits", "cross_entropy_backward"}};
  return c;
}

ParityCase adamw_case(Inputs& in) {
  constexpr int64_t n = 1037;
  constexpr int kSteps = 3;
  ParityCase c = named_case("adamw", "adamw");
  auto params = in.uniform(n, -1, 1);
  c.f32_inputs["params"] = {{n}, params};
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  AdamWParams p{TensorView::f32(params.data(), {n}), TensorView{}, TensorView::f32(m.data(), {n}),
                TensorView::f32(v.data(), {n})};
  p.lr = 1e-2f;
  p.weight_decay = 0.1f;
  const Context ctx = best_context();
  for (int step = 1; step <= kSteps; ++step) {
    auto grads = in.uniform(n, -1, 1);
    c.f32_inputs["grads" + std::to_string(step - 1)] = {{n}, grads};
    p.grads = TensorView::f32(grads.data(), {n});
    p.step = step;
    EXPECT_TRUE(adamw_update(p, ctx).ok());
  }
  // PyTorch gets the f32 hyper-parameters' exact values.
  c.params = {{"lr", static_cast<double>(p.lr)},
              {"beta1", static_cast<double>(p.beta1)},
              {"beta2", static_cast<double>(p.beta2)},
              {"eps", static_cast<double>(p.eps)},
              {"weight_decay", static_cast<double>(p.weight_decay)},
              {"steps", kSteps}};
  c.outputs = {{"params", params}, {"m", m}, {"v", v}};
  c.tolerance_of = {{"params", "adamw_update"}, {"m", "adamw_update"}, {"v", "adamw_update"}};
  return c;
}

ParityCase embedding_case(Inputs& in) {
  constexpr int64_t B = 2, T = 67, V = 101, C = 65, kTMax = 80;
  ParityCase c = named_case("embedding", "embedding");
  auto tokens = in.ids(B * T, V);
  auto wte = in.uniform(V * C, -1, 1), wpe = in.uniform(kTMax * C, -1, 1);
  auto dy = in.uniform(B * T * C, -1, 1);
  std::vector<float> y(B * T * C), dwte(V * C, 0.0f), dwpe(kTMax * C, 0.0f);
  const Context ctx = best_context();
  EXPECT_TRUE(embedding_forward(
                  {TensorView::i32(tokens.data(), {B, T}), TensorView::f32(wte.data(), {V, C}),
                   TensorView::f32(wpe.data(), {kTMax, C}), TensorView::f32(y.data(), {B, T, C})},
                  ctx)
                  .ok());
  EXPECT_TRUE(embedding_backward(
                  {TensorView::i32(tokens.data(), {B, T}), TensorView::f32(dy.data(), {B, T, C}),
                   TensorView::f32(dwte.data(), {V, C}), TensorView::f32(dwpe.data(), {kTMax, C})},
                  ctx)
                  .ok());
  c.f32_inputs = {{"wte", {{V, C}, wte}}, {"wpe", {{kTMax, C}, wpe}}, {"dy", {{B, T, C}, dy}}};
  c.i32_inputs = {{"tokens", {{B, T}, tokens}}};
  c.outputs = {{"y", y}, {"dwte", dwte}, {"dwpe", dwpe}};
  c.tolerance_of = {
      {"y", "embedding_forward"}, {"dwte", "embedding_backward"}, {"dwpe", "embedding_backward"}};
  return c;
}

ParityCase rmsnorm_case(Inputs& in) {
  constexpr int64_t N = 67, C = 129;
  ParityCase c = named_case("rmsnorm", "rmsnorm");
  auto x = in.uniform(N * C, -2, 3), weight = in.uniform(C, 0.5f, 1.5f);
  auto dy = in.uniform(N * C, -1, 1);
  std::vector<float> y(N * C), rstd(N), dx(N * C), dweight(C, 0.0f);
  const Context ctx = best_context();
  constexpr float kEps = 1e-5f;
  EXPECT_TRUE(
      rmsnorm_forward({TensorView::f32(x.data(), {N, C}), TensorView::f32(weight.data(), {C}),
                       TensorView::f32(y.data(), {N, C}), TensorView::f32(rstd.data(), {N}), kEps},
                      ctx)
          .ok());
  EXPECT_TRUE(
      rmsnorm_backward({TensorView::f32(dy.data(), {N, C}), TensorView::f32(x.data(), {N, C}),
                        TensorView::f32(weight.data(), {C}), TensorView::f32(rstd.data(), {N}),
                        TensorView::f32(dx.data(), {N, C}), TensorView::f32(dweight.data(), {C})},
                       ctx)
          .ok());
  c.params = {{"eps", static_cast<double>(kEps)}};
  c.f32_inputs = {{"x", {{N, C}, x}}, {"weight", {{C}, weight}}, {"dy", {{N, C}, dy}}};
  c.outputs = {{"y", y}, {"rstd", rstd}, {"dx", dx}, {"dweight", dweight}};
  c.tolerance_of = {{"y", "rmsnorm_forward"},
                    {"rstd", "rmsnorm_forward"},
                    {"dx", "rmsnorm_backward"},
                    {"dweight", "rmsnorm_backward"}};
  return c;
}

// y = a + b; the backward accumulates dy into da and db, which hold earlier gradients.
ParityCase residual_case(Inputs& in) {
  constexpr int64_t n = 1037;
  ParityCase c = named_case("residual", "residual");
  auto a = in.uniform(n, -1, 1), b = in.uniform(n, -1, 1), dy = in.uniform(n, -1, 1);
  auto da0 = in.uniform(n, -1, 1), db0 = in.uniform(n, -1, 1);
  std::vector<float> y(n), da = da0, db = db0;
  const Context ctx = best_context();
  EXPECT_TRUE(residual_forward({TensorView::f32(a.data(), {n}), TensorView::f32(b.data(), {n}),
                                TensorView::f32(y.data(), {n})},
                               ctx)
                  .ok());
  EXPECT_TRUE(residual_backward({TensorView::f32(dy.data(), {n}), TensorView::f32(da.data(), {n}),
                                 TensorView::f32(db.data(), {n})},
                                ctx)
                  .ok());
  c.f32_inputs = {{"a", {{n}, a}},
                  {"b", {{n}, b}},
                  {"dy", {{n}, dy}},
                  {"da0", {{n}, da0}},
                  {"db0", {{n}, db0}}};
  c.outputs = {{"y", y}, {"da", da}, {"db", db}};
  c.tolerance_of = {
      {"y", "residual_forward"}, {"da", "residual_backward"}, {"db", "residual_backward"}};
  return c;
}

// The global norm over several gradient buffers, and the clipping factor for a max_norm below it
// and one above it. The last buffer is one gradient of 1.0: the factor torch's clip_grad_norm_
// multiplies it by is the factor itself.
ParityCase grad_norm_case(Inputs& in) {
  ParityCase c = named_case("grad_norm", "grad_norm");
  const std::vector<int64_t> sizes = {1037, 67 * 129, 5};
  std::vector<std::vector<float>> grads;
  for (int64_t n : sizes)
    grads.push_back(in.uniform(n, -1, 1));
  grads.push_back({1.0f});
  std::vector<TensorView> views;
  for (size_t i = 0; i < grads.size(); ++i) {
    views.push_back(TensorView::f32(grads[i].data(), {static_cast<int64_t>(grads[i].size())}));
    c.f32_inputs["g" + std::to_string(i)] = {{static_cast<int64_t>(grads[i].size())}, grads[i]};
  }
  const Context ctx = best_context();
  Result<double> norm = global_grad_norm(views, ctx);
  EXPECT_TRUE(norm.ok());
  // The norm is about 57 (9685 uniform(-1, 1) squares of mean 1/3): 1.0 clips, 1000 does not.
  constexpr double kClipping = 1.0, kNotClipping = 1000.0;
  c.params = {{"buffers", grads.size()}, {"max_norms", {kClipping, kNotClipping}}};
  c.outputs = {{"norm", {static_cast<float>(norm.ok() ? *norm : 0.0)}},
               {"scale_clipping", {grad_clip_scale(norm.ok() ? *norm : 0.0, kClipping)}},
               {"scale_not_clipping", {grad_clip_scale(norm.ok() ? *norm : 0.0, kNotClipping)}}};
  c.tolerance_of = {{"norm", "global_grad_norm"},
                    {"scale_clipping", "global_grad_norm"},
                    {"scale_not_clipping", "global_grad_norm"}};
  return c;
}

// f32 -> bf16 on the values where rounding has a rule (ties to even both ways, the largest
// finite values and overflow, subnormals, signed zero, infinities, NaN) and random ones; bf16 ->
// f32 on every kind of bit pattern. Kiln's bf16 outputs are compared widened to f32 (exact).
ParityCase bf16_case(Inputs& in) {
  ParityCase c = named_case("bf16", "bf16");
  const std::vector<uint32_t> special = {
      0x00000000u, 0x80000000u,  // +-0
      0x3F808000u,               // 1 + 2^-8: a tie, stays at 1 (even)
      0x3F818000u,               // a tie whose lower neighbour is odd: rounds up
      0x3F808001u, 0x3F807FFFu,  // just above and below a tie
      0x7F7F7FFFu,               // rounds down to bf16's largest finite value 0x7F7F
      0x7F7F8000u,               // a tie above 0x7F7F: rounds to even, which is infinity
      0x7F7FFFFFu, 0xFF7FFFFFu,  // f32's largest magnitudes: overflow to +-infinity
      0x00000001u, 0x00008000u,  // the smallest subnormal; a subnormal tie (to even: 0)
      0x00018000u, 0x807FFFFFu,  // a subnormal tie rounding up; the largest negative subnormal
      0x7F800000u, 0xFF800000u,  // +-infinity
      0x7FC00000u, 0x7F800001u,  // a quiet NaN; a signalling NaN whose payload is all low bits
  };
  std::vector<float> x;
  for (uint32_t bits : special)
    x.push_back(std::bit_cast<float>(bits));
  for (float v : in.uniform(1000, -1e3f, 1e3f))
    x.push_back(v);
  const auto n = static_cast<int64_t>(x.size());
  std::vector<uint16_t> y_bits(x.size());
  const Context ctx = best_context();
  EXPECT_TRUE(convert_f32_to_bf16(TensorView::f32(x.data(), {n}),
                                  TensorView::of(y_bits.data(), DType::kBF16, {n}), ctx)
                  .ok());
  std::vector<float> y;
  for (uint16_t b : y_bits)
    y.push_back(std::bit_cast<float>(static_cast<uint32_t>(b) << 16));

  // bf16 -> f32: every exponent and both signs, with random mantissas (NaNs and infinities
  // included), as i32 holding the 16 bits.
  std::vector<int32_t> bits;
  for (int32_t b : in.ids(2048, 1 << 16))
    bits.push_back(b);
  std::vector<uint16_t> src(bits.begin(), bits.end());
  const auto m = static_cast<int64_t>(src.size());
  std::vector<float> widened(src.size());
  EXPECT_TRUE(convert_bf16_to_f32(TensorView::of(src.data(), DType::kBF16, {m}),
                                  TensorView::f32(widened.data(), {m}), ctx)
                  .ok());
  c.f32_inputs = {{"x", {{n}, x}}};
  c.i32_inputs = {{"bits", {{m}, bits}}};
  c.outputs = {{"to_bf16", y}, {"to_f32", widened}};
  c.tolerance_of = {{"to_bf16", "convert_f32_to_bf16"}, {"to_f32", "convert_bf16_to_f32"}};
  return c;
}

template <typename T>
void write_raw(const std::string& path, const std::vector<T>& values) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(values.data()),
            static_cast<std::streamsize>(values.size() * sizeof(T)));
  ASSERT_TRUE(out.good()) << "writing " << path;
}

void write_manifest(const std::string& dir, const std::vector<ParityCase>& cases) {
  nlohmann::json manifest = {{"cases", nlohmann::json::array()}};
  for (const ParityCase& c : cases) {
    nlohmann::json inputs = nlohmann::json::object();
    for (const auto& [name, input] : c.f32_inputs) {
      const std::string file = c.name + "." + name + ".bin";
      write_raw(dir + "/" + file, input.second);
      inputs[name] = {{"file", file}, {"dtype", "f32"}, {"shape", input.first}};
    }
    for (const auto& [name, input] : c.i32_inputs) {
      const std::string file = c.name + "." + name + ".bin";
      write_raw(dir + "/" + file, input.second);
      inputs[name] = {{"file", file}, {"dtype", "i32"}, {"shape", input.first}};
    }
    manifest["cases"].push_back(
        {{"name", c.name}, {"op", c.op}, {"params", c.params}, {"inputs", inputs}});
  }
  std::ofstream(dir + "/manifest.json") << manifest.dump(1);
}

// Runs the script on `dir`; returns its exit code and everything it printed.
std::pair<int, std::string> run_script(const std::string& dir) {
  const std::string command = "timeout " + std::to_string(kScriptTimeoutS) + " /usr/bin/python3 " +
                              script_path() + " " + dir + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed: " + command};
  std::string output;
  char chunk[4096];
  size_t n = 0;
  while ((n = fread(chunk, 1, sizeof(chunk), pipe)) > 0)
    output.append(chunk, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, command + "\n" + output};
}

std::vector<double> read_f64(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  std::vector<double> values(static_cast<size_t>(in.tellg()) / sizeof(double));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(values.data()),
          static_cast<std::streamsize>(values.size() * sizeof(double)));
  return values;
}

TEST(TorchParityTest, OptimizedOpsMatchPyTorchInFloat64) {
  Inputs in(20240601);
  std::vector<ParityCase> cases;
  cases.push_back(matmul_case(in));
  cases.push_back(attention_case(in, "attention_causal", 2, 67, 3, /*causal=*/true));
  cases.push_back(attention_case(in, "attention_full", 1, 100, 2, /*causal=*/false));
  cases.push_back(layernorm_case(in));
  cases.push_back(gelu_case(in));
  cases.push_back(cross_entropy_case(in));
  cases.push_back(adamw_case(in));
  cases.push_back(embedding_case(in));
  cases.push_back(rmsnorm_case(in));
  cases.push_back(residual_case(in));
  cases.push_back(grad_norm_case(in));
  cases.push_back(bf16_case(in));

  const std::string dir = kiln::testing::unique_temp_dir("torch");
  write_manifest(dir, cases);
  const auto [code, output] = run_script(dir);
  ASSERT_EQ(code, 0) << "the PyTorch reference failed (exit " << code
                     << "; 3 means torch or numpy is missing: python3-torch and python3-numpy "
                        "are dependencies of the tests, see scripts/install-deps):\n"
                     << output;
  std::ifstream results_file(dir + "/results.json");
  const nlohmann::json results = nlohmann::json::parse(results_file, nullptr, false);
  ASSERT_FALSE(results.is_discarded()) << dir << "/results.json is not JSON";

  for (const ParityCase& c : cases) {
    for (const auto& [name, got] : c.outputs) {
      ASSERT_TRUE(results.contains(c.name) && results[c.name].contains(name))
          << c.name << "." << name;
      const std::vector<double> want =
          read_f64(dir + "/" + results[c.name][name]["file"].get<std::string>());
      ASSERT_EQ(got.size(), want.size()) << c.name << "." << name;
      const OpTolerance tol = op_tolerance(c.tolerance_of.at(name));
      double worst = 0;
      size_t worst_index = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        // Kiln's outputs are f32: compare with PyTorch's answer rounded to f32, what an exact
        // f32 kernel would return (so the exact ops, with tolerance 0, compare exactly).
        // Non-finite values must match in kind: the same infinity, or NaN for NaN (bf16).
        const double rounded = static_cast<float>(want[i]);
        double err = 0;
        if (got[i] == rounded || (std::isnan(got[i]) && std::isnan(rounded))) {
          err = 0;
        } else if (!std::isfinite(got[i]) || !std::isfinite(rounded)) {
          err = std::numeric_limits<double>::infinity();
        } else {
          err = std::fabs(got[i] - rounded) / std::max(std::fabs(rounded), tol.floor);
        }
        if (err > worst) {
          worst = err;
          worst_index = i;
        }
      }
      EXPECT_LE(worst, tol.max_rel_err)
          << c.name << "." << name << ": element " << worst_index << " is " << got[worst_index]
          << ", PyTorch says " << want[worst_index] << " (floor " << tol.floor << ")";
    }
  }
  std::filesystem::remove_all(dir);
}

// FlashAttention's rule for a low-precision kernel: its error against the exact answer is at most
// 2x that of the same-precision PyTorch computation. Kiln's attention with bf16 q, k, v and dout
// (products on the bf16 units through oneDNN, and widened to f32: each path this CPU has; softmax
// in f32) against PyTorch 1.13's explicit
// math path on bfloat16 tensors, both measured against float64 on the same bf16 inputs, as the
// largest error over the largest magnitude of each output (o, dq, dk, dv).
TEST(TorchParityTest, Bf16AttentionErrsAtMostTwiceAsMuchAsPyTorchInBf16) {
  Inputs in(20261206);
  std::vector<ParityCase> cases;
  struct Shape {
    const char* name;
    int64_t B, T, H;
    bool causal;
  };
  for (const Shape& s : {Shape{"attention_bf16_causal", 2, 200, 3, true},
                         Shape{"attention_bf16_full", 1, 100, 2, false}}) {
    constexpr int64_t D = 64;
    const int64_t n = s.B * s.T * s.H * D;
    // Inputs rounded to bf16 (values both sides take exactly); Kiln reads the bf16 copies.
    auto rounded = [&](std::vector<float> v, std::vector<uint16_t>* half) {
      half->resize(v.size());
      const auto m = static_cast<int64_t>(v.size());
      EXPECT_TRUE(convert_f32_to_bf16(TensorView::f32(v.data(), {m}),
                                      TensorView::of(half->data(), DType::kBF16, {m}),
                                      best_context())
                      .ok());
      EXPECT_TRUE(convert_bf16_to_f32(TensorView::of(half->data(), DType::kBF16, {m}),
                                      TensorView::f32(v.data(), {m}), best_context())
                      .ok());
      return v;
    };
    std::vector<uint16_t> q16, k16, v16, dout16;
    auto q = rounded(in.uniform(n, -2, 2), &q16), k = rounded(in.uniform(n, -2, 2), &k16);
    auto v = rounded(in.uniform(n, -2, 2), &v16), dout = rounded(in.uniform(n, -1, 1), &dout16);
    auto half = [&](std::vector<uint16_t>& t) {
      return TensorView::of(t.data(), DType::kBF16, {s.B, s.T, s.H, D});
    };
    auto full = [&](std::vector<float>& t) {
      return TensorView::f32(t.data(), {s.B, s.T, s.H, D});
    };
    // Each bf16 GEMM path this CPU has (matmul.h): the best ISA's, and, where that is oneDNN's,
    // the widened one of AVX2 too.
    std::vector<CpuIsa> paths{supported_isas().back()};
    if (bf16_matmul_kernel(paths[0]) != kBf16WidenedKernel) paths.push_back(CpuIsa::kAvx2);
    for (const CpuIsa isa : paths) {
      const bool widened = bf16_matmul_kernel(isa) == kBf16WidenedKernel;
      ParityCase c =
          named_case(std::string(s.name) + (widened ? "_widened" : "_onednn"), "attention_bf16");
      std::vector<float> o(n), lse(s.B * s.H * s.T), dq(n), dk(n), dv(n);
      Context ctx;
      ctx.isa = isa;
      AttentionParams f{
          half(q16), half(k16), half(v16), full(o), TensorView::f32(lse.data(), {s.B, s.H, s.T}),
          s.causal,  0.0f};
      EXPECT_TRUE(attention_forward(f, ctx).ok());
      AttentionBackwardParams b{half(q16), half(k16), half(v16), full(o),  f.lse, half(dout16),
                                full(dq),  full(dk),  full(dv),  s.causal, 0.0f};
      EXPECT_TRUE(attention_backward(b, ctx).ok());
      c.params = {{"causal", s.causal}, {"scale", 0.0}};
      c.f32_inputs = {{"q", {{s.B, s.T, s.H, D}, q}},
                      {"k", {{s.B, s.T, s.H, D}, k}},
                      {"v", {{s.B, s.T, s.H, D}, v}},
                      {"dout", {{s.B, s.T, s.H, D}, dout}}};
      c.outputs = {{"o", o}, {"dq", dq}, {"dk", dk}, {"dv", dv}};
      cases.push_back(std::move(c));
    }
  }
  const std::string dir = kiln::testing::unique_temp_dir("torch-bf16");
  write_manifest(dir, cases);
  const auto [code, output] = run_script(dir);
  ASSERT_EQ(code, 0) << "the PyTorch reference failed (exit " << code << "):\n" << output;
  std::ifstream results_file(dir + "/results.json");
  const nlohmann::json results = nlohmann::json::parse(results_file, nullptr, false);
  ASSERT_FALSE(results.is_discarded()) << dir << "/results.json is not JSON";
  const auto load = [&](const std::string& name, const std::string& out) {
    return read_f64(dir + "/" + results[name][out]["file"].get<std::string>());
  };
  for (const ParityCase& c : cases) {
    for (const auto& [name, got] : c.outputs) {
      const std::vector<double> exact = load(c.name, name);
      const std::vector<double> torch_bf16 = load(c.name, "torch_bf16_" + name);
      ASSERT_EQ(got.size(), exact.size());
      ASSERT_EQ(torch_bf16.size(), exact.size());
      double scale = 0, kiln_err = 0, torch_err = 0;
      for (size_t i = 0; i < exact.size(); ++i) {
        scale = std::max(scale, std::fabs(exact[i]));
        kiln_err = std::max(kiln_err, std::fabs(got[i] - exact[i]));
        torch_err = std::max(torch_err, std::fabs(torch_bf16[i] - exact[i]));
      }
      kiln_err /= scale;
      torch_err /= scale;
      std::printf("%s.%s: Kiln bf16 %.3e, PyTorch bf16 %.3e (max error / max |exact|)\n",
                  c.name.c_str(), name.c_str(), kiln_err, torch_err);
      EXPECT_LE(kiln_err, 2 * torch_err) << c.name << "." << name;
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln::ops
