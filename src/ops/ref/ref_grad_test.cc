// Every reference backward against central finite differences of its reference forward.
//
// For an op with output `out`, the loss is L = sum(out * r) with r random (ref_test_util.h), so
// the backward fed dout = r must return dL/dinput, which numeric_gradient() estimates by
// Richardson-extrapolated central differences (steps 5e-2 and 2.5e-2) on each f32 input element.
// Shapes are small and odd (attention T = 7, D = 6) so every input element is perturbed. Parameter
// gradients start at zero here; that they accumulate, and that overwritten outputs ignore what was
// there, is checked separately.
//
// Tolerance: kGradTolerance = 2e-3 relative to max(|grad|, kGradFloor = 3e-2). The estimate is
// off by up to about 7e-6 absolute (the f32 rounding of the outputs, see kFiniteDifferenceStep),
// which the floor turns into at most 2.2e-4 (measured: the largest, cross-entropy's dlogits);
// the gradients here are of order 0.1 to 1, so the floor only matters for near-zero ones. A
// wrong term in a backward (a missing mean subtraction, a transposed index, an unmasked key) is
// off by 1e-2 or more.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "ops/ref/ref.h"
#include "ops/ref/ref_test_util.h"

namespace kiln::ops::ref {
namespace {

using testing::gather_rows;
using testing::max_rel_err;
using testing::numeric_gradient;
using testing::uniform;
using testing::weighted_sum;

constexpr double kGradTolerance = 2e-3;
constexpr double kGradFloor = 3e-2;
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

void expect_gradient(const char* what, const std::vector<float>& analytic,
                     const std::vector<double>& numeric) {
  ASSERT_EQ(analytic.size(), numeric.size()) << what;
  EXPECT_LE(max_rel_err(analytic, numeric, kGradFloor), kGradTolerance) << what;
}

TEST(RefGradientTest, MatmulBackwardIsTheGradientOfTheForward) {
  constexpr int64_t M = 5, K = 7, N = 3;
  constexpr int64_t kXRowStride = 9;  // x is a slice of a wider buffer
  std::vector<float> x = uniform(M * kXRowStride, 1);
  std::vector<float> w = uniform(N * K, 2);
  std::vector<float> bias = uniform(N, 3);
  std::vector<float> r = uniform(M * N, 4);
  std::vector<float> y(M * N);
  const TensorView x_view = TensorView::strided(x.data(), DType::kF32, {M, K}, {kXRowStride, 1});
  auto loss = [&] {
    MatmulParams p{x_view, TensorView::f32(w.data(), {N, K}), TensorView::f32(bias.data(), {N}),
                   TensorView::f32(y.data(), {M, N})};
    EXPECT_TRUE(matmul_forward(p).ok());
    return weighted_sum(y, r);
  };
  std::vector<float> dx(M * K, kNan);  // overwritten
  std::vector<float> dw(N * K, 0.0f);
  std::vector<float> dbias(N, 0.0f);
  MatmulBackwardParams b;
  b.dy = TensorView::f32(r.data(), {M, N});
  b.x = x_view;
  b.w = TensorView::f32(w.data(), {N, K});
  b.dx = TensorView::f32(dx.data(), {M, K});
  b.dw = TensorView::f32(dw.data(), {N, K});
  b.dbias = TensorView::f32(dbias.data(), {N});
  ASSERT_TRUE(matmul_backward(b).ok());
  expect_gradient("dx", dx, gather_rows(numeric_gradient(x, loss), M, K, kXRowStride));
  expect_gradient("dw", dw, numeric_gradient(w, loss));
  expect_gradient("dbias", dbias, numeric_gradient(bias, loss));
}

// q, k and v are the thirds of one fused (B, T, 3, H, D) buffer, as a qkv projection writes
// them, so the views are strided; dq, dk and dv are written into the same layout.
struct FusedQkv {
  int64_t B, T, H, D;
  TensorView third(float* base, int which) const {
    return TensorView::strided(base + which * H * D, DType::kF32, {B, T, H, D},
                               {T * 3 * H * D, 3 * H * D, D, 1});
  }
};

void check_attention_gradient(bool causal, float scale) {
  constexpr int64_t B = 2, T = 7, H = 2, D = 6;
  std::vector<float> qkv = uniform(B * T * 3 * H * D, causal ? 5 : 6, -1.5f, 1.5f);
  const FusedQkv fused{B, T, H, D};
  std::vector<float> r = uniform(B * T * H * D, 7);
  std::vector<float> o(B * T * H * D);
  std::vector<float> lse(B * H * T);
  auto forward_params = [&] {
    AttentionParams p;
    p.q = fused.third(qkv.data(), 0);
    p.k = fused.third(qkv.data(), 1);
    p.v = fused.third(qkv.data(), 2);
    p.o = TensorView::f32(o.data(), {B, T, H, D});
    p.lse = TensorView::f32(lse.data(), {B, H, T});
    p.causal = causal;
    p.scale = scale;
    return p;
  };
  auto loss = [&] {
    EXPECT_TRUE(attention_forward(forward_params()).ok());
    return weighted_sum(o, r);
  };
  loss();
  std::vector<float> dqkv(qkv.size(), kNan);  // overwritten
  const AttentionParams f = forward_params();
  AttentionBackwardParams b;
  b.q = f.q;
  b.k = f.k;
  b.v = f.v;
  b.o = f.o;
  b.lse = f.lse;
  b.dout = TensorView::f32(r.data(), {B, T, H, D});
  b.dq = fused.third(dqkv.data(), 0);
  b.dk = fused.third(dqkv.data(), 1);
  b.dv = fused.third(dqkv.data(), 2);
  b.causal = causal;
  b.scale = scale;
  ASSERT_TRUE(attention_backward(b).ok());
  expect_gradient(causal ? "dqkv causal" : "dqkv", dqkv, numeric_gradient(qkv, loss));
}

TEST(RefGradientTest, AttentionBackwardIsTheGradientOfTheForward) {
  check_attention_gradient(/*causal=*/true, /*scale=*/0.0f);
  check_attention_gradient(/*causal=*/false, /*scale=*/0.0f);
  check_attention_gradient(/*causal=*/true, /*scale=*/0.7f);
}

TEST(RefGradientTest, LayerNormBackwardIsTheGradientOfTheForward) {
  constexpr int64_t N = 3, C = 9;
  constexpr int64_t kRowStride = 11;  // rows strided, as the header allows
  std::vector<float> x = uniform(N * kRowStride, 8, -2.0f, 2.0f);
  std::vector<float> weight = uniform(C, 9, 0.5f, 1.5f);
  std::vector<float> bias = uniform(C, 10);
  std::vector<float> r = uniform(N * C, 11);
  std::vector<float> y(N * C);
  std::vector<float> mean(N);
  std::vector<float> rstd(N);
  const TensorView x_view = TensorView::strided(x.data(), DType::kF32, {N, C}, {kRowStride, 1});
  auto loss = [&] {
    LayerNormParams p{x_view,
                      TensorView::f32(weight.data(), {C}),
                      TensorView::f32(bias.data(), {C}),
                      TensorView::f32(y.data(), {N, C}),
                      TensorView::f32(mean.data(), {N}),
                      TensorView::f32(rstd.data(), {N})};
    EXPECT_TRUE(layernorm_forward(p).ok());
    return weighted_sum(y, r);
  };
  loss();
  std::vector<float> dx(N * C, kNan);
  std::vector<float> dweight(C, 0.0f);
  std::vector<float> dbias(C, 0.0f);
  LayerNormBackwardParams b;
  b.dy = TensorView::f32(r.data(), {N, C});
  b.x = x_view;
  b.weight = TensorView::f32(weight.data(), {C});
  b.mean = TensorView::f32(mean.data(), {N});
  b.rstd = TensorView::f32(rstd.data(), {N});
  b.dx = TensorView::f32(dx.data(), {N, C});
  b.dweight = TensorView::f32(dweight.data(), {C});
  b.dbias = TensorView::f32(dbias.data(), {C});
  ASSERT_TRUE(layernorm_backward(b).ok());
  expect_gradient("dx", dx, gather_rows(numeric_gradient(x, loss), N, C, kRowStride));
  expect_gradient("dweight", dweight, numeric_gradient(weight, loss));
  expect_gradient("dbias", dbias, numeric_gradient(bias, loss));
}

TEST(RefGradientTest, RmsNormBackwardIsTheGradientOfTheForward) {
  constexpr int64_t N = 4, C = 7;
  constexpr int64_t kRowStride = 10;
  std::vector<float> x = uniform(N * kRowStride, 12, -2.0f, 2.0f);
  std::vector<float> weight = uniform(C, 13, 0.5f, 1.5f);
  std::vector<float> r = uniform(N * C, 14);
  std::vector<float> y(N * C);
  std::vector<float> rstd(N);
  const TensorView x_view = TensorView::strided(x.data(), DType::kF32, {N, C}, {kRowStride, 1});
  auto loss = [&] {
    RmsNormParams p{x_view, TensorView::f32(weight.data(), {C}), TensorView::f32(y.data(), {N, C}),
                    TensorView::f32(rstd.data(), {N})};
    EXPECT_TRUE(rmsnorm_forward(p).ok());
    return weighted_sum(y, r);
  };
  loss();
  std::vector<float> dx(N * C, kNan);
  std::vector<float> dweight(C, 0.0f);
  RmsNormBackwardParams b;
  b.dy = TensorView::f32(r.data(), {N, C});
  b.x = x_view;
  b.weight = TensorView::f32(weight.data(), {C});
  b.rstd = TensorView::f32(rstd.data(), {N});
  b.dx = TensorView::f32(dx.data(), {N, C});
  b.dweight = TensorView::f32(dweight.data(), {C});
  ASSERT_TRUE(rmsnorm_backward(b).ok());
  expect_gradient("dx", dx, gather_rows(numeric_gradient(x, loss), N, C, kRowStride));
  expect_gradient("dweight", dweight, numeric_gradient(weight, loss));
}

TEST(RefGradientTest, GeluBackwardIsTheGradientOfTheForward) {
  constexpr int64_t n = 41;
  // Covers the tails, where tanh saturates, and the bend around zero.
  std::vector<float> x = uniform(n, 15, -5.0f, 5.0f);
  std::vector<float> r = uniform(n, 16);
  std::vector<float> y(n);
  auto loss = [&] {
    EXPECT_TRUE(
        gelu_forward({TensorView::f32(x.data(), {n}), TensorView::f32(y.data(), {n})}).ok());
    return weighted_sum(y, r);
  };
  std::vector<float> dx(n, kNan);
  GeluBackwardParams b{TensorView::f32(x.data(), {n}), TensorView::f32(r.data(), {n}),
                       TensorView::f32(dx.data(), {n})};
  ASSERT_TRUE(gelu_backward(b).ok());
  expect_gradient("dx", dx, numeric_gradient(x, loss));
}

TEST(RefGradientTest, ResidualBackwardIsTheGradientOfTheForward) {
  constexpr int64_t n = 13;
  std::vector<float> a = uniform(n, 17);
  std::vector<float> bb = uniform(n, 18);
  std::vector<float> r = uniform(n, 19);
  std::vector<float> y(n);
  auto loss = [&] {
    ResidualParams p{TensorView::f32(a.data(), {n}), TensorView::f32(bb.data(), {n}),
                     TensorView::f32(y.data(), {n})};
    EXPECT_TRUE(residual_forward(p).ok());
    return weighted_sum(y, r);
  };
  std::vector<float> da(n, 0.0f);
  std::vector<float> db(n, 0.0f);
  ResidualBackwardParams b{TensorView::f32(r.data(), {n}), TensorView::f32(da.data(), {n}),
                           TensorView::f32(db.data(), {n})};
  ASSERT_TRUE(residual_backward(b).ok());
  expect_gradient("da", da, numeric_gradient(a, loss));
  expect_gradient("db", db, numeric_gradient(bb, loss));
}

TEST(RefGradientTest, EmbeddingBackwardIsTheGradientOfTheForward) {
  constexpr int64_t B = 2, T = 5, V = 7, C = 3, kTMax = 6;
  // Token 3 repeats within and across sequences; tokens 0 and 6 (the ends) appear.
  std::vector<int32_t> tokens = {3, 0, 3, 6, 1, 2, 3, 5, 3, 6};
  std::vector<float> wte = uniform(V * C, 20);
  std::vector<float> wpe = uniform(kTMax * C, 21);
  std::vector<float> r = uniform(B * T * C, 22);
  std::vector<float> y(B * T * C);
  auto loss = [&] {
    EmbeddingParams p{TensorView::i32(tokens.data(), {B, T}), TensorView::f32(wte.data(), {V, C}),
                      TensorView::f32(wpe.data(), {kTMax, C}),
                      TensorView::f32(y.data(), {B, T, C})};
    EXPECT_TRUE(embedding_forward(p).ok());
    return weighted_sum(y, r);
  };
  std::vector<float> dwte(V * C, 0.0f);
  std::vector<float> dwpe(kTMax * C, 0.0f);
  EmbeddingBackwardParams b{
      TensorView::i32(tokens.data(), {B, T}), TensorView::f32(r.data(), {B, T, C}),
      TensorView::f32(dwte.data(), {V, C}), TensorView::f32(dwpe.data(), {kTMax, C})};
  ASSERT_TRUE(embedding_backward(b).ok());
  expect_gradient("dwte", dwte, numeric_gradient(wte, loss));
  expect_gradient("dwpe", dwpe, numeric_gradient(wpe, loss));
}

TEST(RefGradientTest, CrossEntropyBackwardIsTheGradientOfTheForward) {
  constexpr int64_t N = 4, Vp = 13, kVocab = 11;  // two padding columns
  constexpr int64_t kRowStride = 15;              // and strided rows
  std::vector<float> logits = uniform(N * kRowStride, 23, -3.0f, 3.0f);
  std::vector<int32_t> targets = {0, 10, 4, 4};
  std::vector<float> r = uniform(N, 24, 0.2f, 1.0f);  // dlosses
  std::vector<float> losses(N);
  std::vector<float> lse(N);
  auto view = [&](std::vector<float>& v) {
    return TensorView::strided(v.data(), DType::kF32, {N, Vp}, {kRowStride, 1});
  };
  auto loss = [&] {
    CrossEntropyParams p{view(logits), TensorView::i32(targets.data(), {N}),
                         TensorView::f32(losses.data(), {N}), TensorView::f32(lse.data(), {N}),
                         kVocab};
    EXPECT_TRUE(cross_entropy_forward(p).ok());
    return weighted_sum(losses, r);
  };
  loss();
  std::vector<float> dlogits = logits;  // the backward works in place
  CrossEntropyBackwardParams b{view(dlogits), TensorView::i32(targets.data(), {N}),
                               TensorView::f32(lse.data(), {N}), TensorView::f32(r.data(), {N}),
                               kVocab};
  ASSERT_TRUE(cross_entropy_backward(b).ok());
  // The padding columns do not affect the loss, so their finite differences are 0, which is
  // what the backward must write there.
  expect_gradient("dlogits", gather_rows(dlogits, N, Vp, kRowStride),
                  gather_rows(numeric_gradient(logits, loss), N, Vp, kRowStride));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t v = kVocab; v < Vp; ++v)
      EXPECT_EQ(dlogits[static_cast<size_t>(n * kRowStride + v)], 0.0f) << n << "," << v;
  }
}

}  // namespace
}  // namespace kiln::ops::ref
