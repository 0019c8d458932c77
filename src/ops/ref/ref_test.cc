// Closed-form checks of the references (values that can be worked out by hand), and the
// contract details finite differences cannot see: which outputs accumulate and which are
// overwritten, in-place aliasing, bad ids, and bf16 rounding bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "ops/ref/ref.h"
#include "ops/ref/ref_test_util.h"

namespace kiln::ops::ref {
namespace {

using testing::uniform;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

TensorView f32(std::vector<float>& v, std::initializer_list<int64_t> shape) {
  return TensorView::f32(v.data(), shape);
}

TEST(RefTest, MatmulWithIdentityWeightsAddsTheBias) {
  constexpr int64_t M = 3, K = 4;
  std::vector<float> x = uniform(M * K, 1);
  std::vector<float> w(K * K, 0.0f);
  for (int64_t i = 0; i < K; ++i)
    w[static_cast<size_t>(i * K + i)] = 1.0f;
  std::vector<float> bias = {1, 2, 3, 4};
  std::vector<float> y(M * K, kNan);
  ASSERT_TRUE(
      matmul_forward({f32(x, {M, K}), f32(w, {K, K}), f32(bias, {K}), f32(y, {M, K})}).ok());
  for (int64_t i = 0; i < M * K; ++i)
    EXPECT_FLOAT_EQ(y[static_cast<size_t>(i)], x[static_cast<size_t>(i)] + bias[i % K]) << i;
  // Without a bias: exactly x.
  ASSERT_TRUE(matmul_forward({f32(x, {M, K}), f32(w, {K, K}), TensorView{}, f32(y, {M, K})}).ok());
  EXPECT_EQ(y, x);
}

TEST(RefTest, MatmulBackwardAccumulatesParameterGradientsAndSkipsAbsentOnes) {
  constexpr int64_t M = 4, K = 3, N = 5;
  std::vector<float> x = uniform(M * K, 2);
  std::vector<float> w = uniform(N * K, 3);
  std::vector<float> dy = uniform(M * N, 4);
  // From zero (dx starts as NaN: it is overwritten).
  std::vector<float> dx0(M * K, kNan), dw0(N * K, 0.0f), dbias0(N, 0.0f);
  MatmulBackwardParams p{f32(dy, {M, N}),  f32(x, {M, K}),   f32(w, {N, K}),
                         f32(dx0, {M, K}), f32(dw0, {N, K}), f32(dbias0, {N})};
  ASSERT_TRUE(matmul_backward(p).ok());
  // From random values, with accumulate_dx.
  std::vector<float> dx1 = uniform(M * K, 5), dw1 = uniform(N * K, 6), dbias1 = uniform(N, 7);
  const std::vector<float> dx_before = dx1, dw_before = dw1, dbias_before = dbias1;
  p.dx = f32(dx1, {M, K});
  p.dw = f32(dw1, {N, K});
  p.dbias = f32(dbias1, {N});
  p.accumulate_dx = true;
  ASSERT_TRUE(matmul_backward(p).ok());
  for (size_t i = 0; i < dx1.size(); ++i)
    EXPECT_NEAR(dx1[i], dx_before[i] + dx0[i], 1e-6) << i;
  for (size_t i = 0; i < dw1.size(); ++i)
    EXPECT_NEAR(dw1[i], dw_before[i] + dw0[i], 1e-6) << i;
  for (size_t i = 0; i < dbias1.size(); ++i)
    EXPECT_NEAR(dbias1[i], dbias_before[i] + dbias0[i], 1e-6) << i;
  // dbias is the column sum of dy.
  for (int64_t n = 0; n < N; ++n) {
    double sum = 0;
    for (int64_t m = 0; m < M; ++m)
      sum += dy[static_cast<size_t>(m * N + n)];
    EXPECT_NEAR(dbias0[static_cast<size_t>(n)], sum, 1e-6) << n;
  }
  // Absent gradients are skipped: only dw is computed.
  std::vector<float> dw2(N * K, 0.0f);
  ASSERT_TRUE(matmul_backward({f32(dy, {M, N}), f32(x, {M, K}), f32(w, {N, K}), TensorView{},
                               f32(dw2, {N, K}), TensorView{}})
                  .ok());
  EXPECT_EQ(dw2, dw0);
}

// Attention where every key is the same: the probabilities are uniform over the keys a query
// sees, so o_i is the mean of those values and lse_i = s + log(count).
TEST(RefTest, AttentionOverIdenticalKeysAveragesTheValues) {
  constexpr int64_t T = 5, D = 3;
  std::vector<float> q = uniform(T * D, 8);
  std::vector<float> k(T * D);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t d = 0; d < D; ++d)
      k[static_cast<size_t>(t * D + d)] = 0.25f * static_cast<float>(d + 1);
  }
  std::vector<float> v = uniform(T * D, 9);
  for (bool causal : {true, false}) {
    std::vector<float> o(T * D, kNan), lse(T, kNan);
    AttentionParams p{f32(q, {1, T, 1, D}),
                      f32(k, {1, T, 1, D}),
                      f32(v, {1, T, 1, D}),
                      f32(o, {1, T, 1, D}),
                      f32(lse, {1, 1, T}),
                      causal,
                      0.0f};
    ASSERT_TRUE(attention_forward(p).ok());
    for (int64_t i = 0; i < T; ++i) {
      const int64_t seen = causal ? i + 1 : T;
      double s = 0;
      for (int64_t d = 0; d < D; ++d)
        s += static_cast<double>(q[static_cast<size_t>(i * D + d)]) * k[static_cast<size_t>(d)];
      s /= std::sqrt(static_cast<double>(D));
      EXPECT_NEAR(lse[static_cast<size_t>(i)], s + std::log(static_cast<double>(seen)), 1e-6);
      for (int64_t d = 0; d < D; ++d) {
        double mean = 0;
        for (int64_t j = 0; j < seen; ++j)
          mean += v[static_cast<size_t>(j * D + d)];
        EXPECT_NEAR(o[static_cast<size_t>(i * D + d)], mean / static_cast<double>(seen), 1e-6)
            << "causal=" << causal << " i=" << i << " d=" << d;
      }
    }
  }
}

TEST(RefTest, AttentionScaleZeroMeansOneOverSqrtD) {
  constexpr int64_t B = 2, T = 4, H = 3, D = 5;
  std::vector<float> q = uniform(B * T * H * D, 10), k = uniform(B * T * H * D, 11),
                     v = uniform(B * T * H * D, 12);
  std::vector<float> o0(q.size()), o1(q.size()), lse0(B * H * T), lse1(B * H * T);
  AttentionParams p{f32(q, {B, T, H, D}),
                    f32(k, {B, T, H, D}),
                    f32(v, {B, T, H, D}),
                    f32(o0, {B, T, H, D}),
                    f32(lse0, {B, H, T}),
                    true,
                    0.0f};
  ASSERT_TRUE(attention_forward(p).ok());
  p.o = f32(o1, {B, T, H, D});
  p.lse = f32(lse1, {B, H, T});
  p.scale = static_cast<float>(1.0 / std::sqrt(5.0));
  ASSERT_TRUE(attention_forward(p).ok());
  for (size_t i = 0; i < o0.size(); ++i)
    EXPECT_NEAR(o0[i], o1[i], 1e-6) << i;
  // With T = 1 every query sees only itself: o = v.
  for (size_t i = 0; i < o0.size() && i < static_cast<size_t>(H * D); ++i)
    EXPECT_FLOAT_EQ(o0[i], v[i]) << i;
}

TEST(RefTest, LayerNormOutputHasMeanZeroAndVarianceOneBeforeTheAffine) {
  constexpr int64_t N = 3, C = 37;
  std::vector<float> x = uniform(N * C, 13, -3.0f, 5.0f);
  std::vector<float> ones(C, 1.0f), zeros(C, 0.0f), y(N * C), mean(N), rstd(N);
  LayerNormParams p{f32(x, {N, C}),
                    f32(ones, {C}),
                    f32(zeros, {C}),
                    f32(y, {N, C}),
                    f32(mean, {N}),
                    f32(rstd, {N}),
                    0.0f};
  ASSERT_TRUE(layernorm_forward(p).ok());
  for (int64_t n = 0; n < N; ++n) {
    double sum = 0, sum_sq = 0, x_sum = 0;
    for (int64_t c = 0; c < C; ++c) {
      sum += y[static_cast<size_t>(n * C + c)];
      sum_sq += static_cast<double>(y[static_cast<size_t>(n * C + c)]) *
                y[static_cast<size_t>(n * C + c)];
      x_sum += x[static_cast<size_t>(n * C + c)];
    }
    EXPECT_NEAR(sum / C, 0.0, 1e-6) << n;
    EXPECT_NEAR(sum_sq / C, 1.0, 1e-6) << n;
    EXPECT_NEAR(mean[static_cast<size_t>(n)], x_sum / C, 1e-6) << n;
  }
  // The affine applies per channel: y = xhat * weight + bias.
  std::vector<float> weight = uniform(C, 14), bias = uniform(C, 15), y2(N * C);
  p.weight = f32(weight, {C});
  p.bias = f32(bias, {C});
  p.y = f32(y2, {N, C});
  ASSERT_TRUE(layernorm_forward(p).ok());
  for (int64_t i = 0; i < N * C; ++i) {
    EXPECT_NEAR(y2[static_cast<size_t>(i)], y[static_cast<size_t>(i)] * weight[i % C] + bias[i % C],
                1e-5);
  }
}

TEST(RefTest, RmsNormOutputHasMeanSquareOne) {
  constexpr int64_t N = 2, C = 29;
  std::vector<float> x = uniform(N * C, 16, -3.0f, 5.0f);
  std::vector<float> ones(C, 1.0f), y(N * C), rstd(N);
  ASSERT_TRUE(
      rmsnorm_forward({f32(x, {N, C}), f32(ones, {C}), f32(y, {N, C}), f32(rstd, {N}), 0.0f}).ok());
  for (int64_t n = 0; n < N; ++n) {
    double sum_sq = 0;
    for (int64_t c = 0; c < C; ++c)
      sum_sq += static_cast<double>(y[static_cast<size_t>(n * C + c)]) *
                y[static_cast<size_t>(n * C + c)];
    EXPECT_NEAR(sum_sq / C, 1.0, 1e-6) << n;
  }
}

// Runs `backward` twice: first with dx full of NaN (it must be overwritten) and the parameter
// gradients at zero, then with every one of them random and accumulate_dx set; the second must
// be the first plus the start values. REQUIRES: p.accumulate_dx is false; p's views point into
// the buffers.
template <typename Params>
void expect_accumulation(Params p, std::vector<float>* dx,
                         const std::vector<std::vector<float>*>& param_grads,
                         Status (*backward)(const Params&)) {
  std::fill(dx->begin(), dx->end(), kNan);
  for (std::vector<float>* buffer : param_grads)
    std::fill(buffer->begin(), buffer->end(), 0.0f);
  ASSERT_TRUE(backward(p).ok());
  std::vector<std::vector<float>*> all = param_grads;
  all.insert(all.begin(), dx);
  std::vector<std::vector<float>> first;
  std::vector<std::vector<float>> start;
  uint64_t seed = 100;
  for (std::vector<float>* buffer : all) {
    for (float g : *buffer)
      ASSERT_TRUE(std::isfinite(g));  // the NaN in dx did not leak in
    first.push_back(*buffer);
    const std::vector<float> values = uniform(buffer->size(), seed++);
    std::copy(values.begin(), values.end(), buffer->begin());  // the views keep pointing here
    start.push_back(values);
  }
  p.accumulate_dx = true;
  ASSERT_TRUE(backward(p).ok());
  for (size_t b = 0; b < all.size(); ++b) {
    for (size_t i = 0; i < start[b].size(); ++i)
      EXPECT_NEAR((*all[b])[i], start[b][i] + first[b][i], 1e-6) << "buffer " << b << " i " << i;
  }
}

TEST(RefTest, NormBackwardsOverwriteDxUnlessAskedAndAccumulateParameterGradients) {
  constexpr int64_t N = 3, C = 11;
  std::vector<float> x = uniform(N * C, 17), dy = uniform(N * C, 18), weight = uniform(C, 19);
  std::vector<float> bias = uniform(C, 20), y(N * C), mean(N), rstd(N);
  ASSERT_TRUE(layernorm_forward({f32(x, {N, C}), f32(weight, {C}), f32(bias, {C}), f32(y, {N, C}),
                                 f32(mean, {N}), f32(rstd, {N})})
                  .ok());
  std::vector<float> dx(N * C, kNan), dweight(C), dbias(C);
  LayerNormBackwardParams lp{f32(dy, {N, C}),   f32(x, {N, C}),  f32(weight, {C}),
                             f32(mean, {N}),    f32(rstd, {N}),  f32(dx, {N, C}),
                             f32(dweight, {C}), f32(dbias, {C}), false};
  expect_accumulation(lp, &dx, {&dweight, &dbias}, &layernorm_backward);

  ASSERT_TRUE(
      rmsnorm_forward({f32(x, {N, C}), f32(weight, {C}), f32(y, {N, C}), f32(rstd, {N})}).ok());
  RmsNormBackwardParams rp{
      f32(dy, {N, C}),   f32(x, {N, C}), f32(weight, {C}), f32(rstd, {N}), f32(dx, {N, C}),
      f32(dweight, {C}), false};
  expect_accumulation(rp, &dx, {&dweight}, &rmsnorm_backward);
}

TEST(RefTest, GeluMatchesKnownValuesAndWorksInPlace) {
  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) at x = 0, 1, -1, 2, in double.
  std::vector<float> x = {0.0f, 1.0f, -1.0f, 2.0f, 30.0f, -30.0f};
  std::vector<float> y(x.size(), kNan);
  ASSERT_TRUE(gelu_forward({f32(x, {6}), f32(y, {6})}).ok());
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_FLOAT_EQ(y[1], 0.8411919906082768f);
  EXPECT_FLOAT_EQ(y[2], -0.15880800939172324f);
  EXPECT_FLOAT_EQ(y[3], 1.954597694087775f);
  EXPECT_FLOAT_EQ(y[4], 30.0f);
  EXPECT_NEAR(y[5], 0.0f, 1e-30);
  // gelu'(0) = 1/2.
  std::vector<float> dy(6, 1.0f), dx(6, kNan);
  ASSERT_TRUE(gelu_backward({f32(x, {6}), f32(dy, {6}), f32(dx, {6})}).ok());
  EXPECT_FLOAT_EQ(dx[0], 0.5f);
  EXPECT_FLOAT_EQ(dx[4], 1.0f);
  // y may alias x, dx may alias dy.
  std::vector<float> in_place = x;
  ASSERT_TRUE(gelu_forward({f32(in_place, {6}), f32(in_place, {6})}).ok());
  EXPECT_EQ(in_place, y);
  std::vector<float> grad = dy;
  ASSERT_TRUE(gelu_backward({f32(x, {6}), f32(grad, {6}), f32(grad, {6})}).ok());
  EXPECT_EQ(grad, dx);
  // accumulate_dx adds.
  std::vector<float> acc(6, 2.0f);
  ASSERT_TRUE(gelu_backward({f32(x, {6}), f32(dy, {6}), f32(acc, {6}), true}).ok());
  for (size_t i = 0; i < acc.size(); ++i)
    EXPECT_FLOAT_EQ(acc[i], 2.0f + dx[i]) << i;
}

TEST(RefTest, ResidualAddsInPlaceAndItsBackwardAccumulates) {
  std::vector<float> a = {1, 2, 3}, b = {10, 20, 30}, y(3, kNan);
  ASSERT_TRUE(residual_forward({f32(a, {3}), f32(b, {3}), f32(y, {3})}).ok());
  EXPECT_EQ(y, (std::vector<float>{11, 22, 33}));
  ASSERT_TRUE(residual_forward({f32(a, {3}), f32(b, {3}), f32(a, {3})}).ok());
  EXPECT_EQ(a, y);
  std::vector<float> dy = {1, -1, 0.5f}, da = {1, 1, 1}, db = {0, 0, 0};
  ASSERT_TRUE(residual_backward({f32(dy, {3}), f32(da, {3}), f32(db, {3})}).ok());
  EXPECT_EQ(da, (std::vector<float>{2, 0, 1.5f}));
  EXPECT_EQ(db, dy);
}

TEST(RefTest, EmbeddingLooksUpRowsAndAccumulatesRepeatedTokens) {
  constexpr int64_t B = 1, T = 3, V = 4, C = 2, kTMax = 4;
  std::vector<int32_t> tokens = {2, 2, 0};
  std::vector<float> wte = {0, 1, 10, 11, 20, 21, 30, 31};
  std::vector<float> wpe = {100, 200, 300, 400, 500, 600, 700, 800};
  std::vector<float> y(B * T * C, kNan);
  EmbeddingParams p{TensorView::i32(tokens.data(), {B, T}), f32(wte, {V, C}), f32(wpe, {kTMax, C}),
                    f32(y, {B, T, C})};
  ASSERT_TRUE(embedding_forward(p).ok());
  EXPECT_EQ(y, (std::vector<float>{120, 221, 320, 421, 500, 601}));
  std::vector<float> dy = {1, 2, 3, 4, 5, 6};
  std::vector<float> dwte(V * C, 1.0f), dwpe(kTMax * C, 1.0f);
  ASSERT_TRUE(embedding_backward({TensorView::i32(tokens.data(), {B, T}), f32(dy, {B, T, C}),
                                  f32(dwte, {V, C}), f32(dwpe, {kTMax, C})})
                  .ok());
  EXPECT_EQ(dwte, (std::vector<float>{6, 7, 1, 1, 5, 7, 1, 1}));
  EXPECT_EQ(dwpe, (std::vector<float>{2, 3, 4, 5, 6, 7, 1, 1}));  // row 3 (t >= T) untouched
  tokens[1] = 4;
  const Status bad = embedding_forward(p);
  EXPECT_TRUE(bad.is_invalid_argument());
  EXPECT_NE(bad.message().find("token 4 at position 1"), std::string::npos) << bad.message();
}

TEST(RefTest, CrossEntropyOfEqualLogitsIsLogVocab) {
  constexpr int64_t N = 2, Vp = 8, kVocab = 5;
  // Equal logits over the vocabulary; the padding holds garbage that must not count.
  std::vector<float> logits(N * Vp, 3.0f);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t v = kVocab; v < Vp; ++v)
      logits[static_cast<size_t>(n * Vp + v)] = 1e3f;
  }
  std::vector<int32_t> targets = {0, 4};
  std::vector<float> losses(N, kNan), lse(N, kNan);
  CrossEntropyParams p{f32(logits, {N, Vp}), TensorView::i32(targets.data(), {N}), f32(losses, {N}),
                       f32(lse, {N}), kVocab};
  ASSERT_TRUE(cross_entropy_forward(p).ok());
  for (int64_t n = 0; n < N; ++n) {
    EXPECT_FLOAT_EQ(losses[static_cast<size_t>(n)], static_cast<float>(std::log(5.0)));
    EXPECT_FLOAT_EQ(lse[static_cast<size_t>(n)], static_cast<float>(3.0 + std::log(5.0)));
  }
  std::vector<float> dlosses = {0.5f, 2.0f};
  ASSERT_TRUE(cross_entropy_backward({f32(logits, {N, Vp}), TensorView::i32(targets.data(), {N}),
                                      f32(lse, {N}), f32(dlosses, {N}), kVocab})
                  .ok());
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t v = 0; v < Vp; ++v) {
      const double want = v >= kVocab ? 0.0
                                      : (0.2 - (v == targets[static_cast<size_t>(n)] ? 1.0 : 0.0)) *
                                            dlosses[static_cast<size_t>(n)];
      EXPECT_FLOAT_EQ(logits[static_cast<size_t>(n * Vp + v)], static_cast<float>(want))
          << n << "," << v;
    }
  }
  targets[1] = kVocab;  // a padding column is not a valid target
  const Status bad = cross_entropy_forward(p);
  EXPECT_TRUE(bad.is_invalid_argument());
  EXPECT_NE(bad.message().find("of row 1"), std::string::npos) << bad.message();
}

TEST(RefTest, AdamWFirstStepMovesEachParameterByLrTowardsMinusTheGradientSign) {
  // At step 1, m_hat = g and v_hat = g^2, so the update is lr (g / (|g| + eps) + wd p).
  std::vector<float> params = {1.0f, -2.0f, 0.5f}, grads = {4.0f, -0.25f, 0.0f};
  std::vector<float> m(3, 0.0f), v(3, 0.0f);
  AdamWParams p{f32(params, {3}), f32(grads, {3}), f32(m, {3}), f32(v, {3})};
  p.lr = 0.1f;
  p.weight_decay = 0.5f;
  p.eps = 0.0f;
  p.grad_scale = 0.5f;  // g = grads / 2
  ASSERT_TRUE(adamw_update(p).ok());
  EXPECT_FLOAT_EQ(params[0], 1.0f - 0.1f * (1.0f + 0.5f * 1.0f));
  EXPECT_FLOAT_EQ(params[1], -2.0f - 0.1f * (-1.0f + 0.5f * -2.0f));
  EXPECT_TRUE(std::isnan(params[2]));  // 0 / (0 + eps) with eps = 0: the formula, unguarded
  EXPECT_FLOAT_EQ(m[0], (1.0f - 0.9f) * 2.0f);
  EXPECT_FLOAT_EQ(v[0], (1.0f - 0.95f) * 4.0f);
}

TEST(RefTest, GlobalGradNormIsTheNormOfEveryBufferTogether) {
  std::vector<float> a = {3.0f, 4.0f}, b = {12.0f};
  Result<double> norm = global_grad_norm({f32(a, {2}), f32(b, {1})});
  ASSERT_TRUE(norm.ok());
  EXPECT_DOUBLE_EQ(*norm, 13.0);
  Result<double> empty = global_grad_norm({});
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, 0.0);
}

uint16_t to_bf16(float x) {
  uint16_t out = 0;
  EXPECT_TRUE(
      convert_f32_to_bf16(TensorView::f32(&x, {1}), TensorView::of(&out, DType::kBF16, {1})).ok());
  return out;
}

float bits_to_f32(uint32_t bits) {
  return std::bit_cast<float>(bits);
}

TEST(RefTest, Bf16RoundsToNearestEvenAndOverflowsToInfinity) {
  EXPECT_EQ(to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(to_bf16(-2.0f), 0xC000);
  EXPECT_EQ(to_bf16(bits_to_f32(0x3F80'8000u)), 0x3F80);          // tie, even below
  EXPECT_EQ(to_bf16(bits_to_f32(0x3F81'8000u)), 0x3F82);          // tie, even above
  EXPECT_EQ(to_bf16(bits_to_f32(0x3F80'8001u)), 0x3F81);          // just above the tie
  EXPECT_EQ(to_bf16(bits_to_f32(0x3F80'7FFFu)), 0x3F80);          // just below
  EXPECT_EQ(to_bf16(bits_to_f32(0x3FFF'FFFFu)), 0x4000);          // carries into the exponent
  EXPECT_EQ(to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds up to +inf
  EXPECT_EQ(to_bf16(bits_to_f32(0x7F7F'7FFFu)), 0x7F7F);          // stays the largest finite
  EXPECT_EQ(to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(to_bf16(bits_to_f32(0x0000'8000u)), 0x0000);  // subnormal tie, even below
  EXPECT_EQ(to_bf16(bits_to_f32(0x0001'8000u)), 0x0002);  // subnormal tie, even above
  EXPECT_EQ(to_bf16(-0.0f), 0x8000);
  const uint16_t nan = to_bf16(bits_to_f32(0x7F80'0001u));  // a signalling NaN
  EXPECT_EQ(nan & 0x7F80, 0x7F80);
  EXPECT_NE(nan & 0x0040, 0);  // quiet
}

// The same rounding by the usual bit trick, an independent derivation, for finite values: add
// 0x7FFF plus the lowest kept bit, then truncate.
uint16_t bit_trick_bf16(uint32_t bits) {
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

TEST(RefTest, Bf16AgreesWithTheBitTrickAndRoundTripsExactly) {
  std::mt19937_64 rng(42);
  constexpr int kSamples = 1 << 20;  // a million random bit patterns, every exponent
  std::vector<float> src;
  src.reserve(kSamples);
  while (src.size() < kSamples) {
    const float x = bits_to_f32(static_cast<uint32_t>(rng()));
    if (std::isfinite(x)) src.push_back(x);
  }
  std::vector<uint16_t> dst(src.size());
  ASSERT_TRUE(convert_f32_to_bf16(TensorView::f32(src.data(), {kSamples}),
                                  TensorView::of(dst.data(), DType::kBF16, {kSamples}))
                  .ok());
  for (size_t i = 0; i < src.size(); ++i)
    ASSERT_EQ(dst[i], bit_trick_bf16(std::bit_cast<uint32_t>(src[i])))
        << std::hex << std::bit_cast<uint32_t>(src[i]);
  // Every bf16 value converts to f32 exactly and back to itself (NaNs stay NaN).
  std::vector<uint16_t> all(1 << 16);
  std::iota(all.begin(), all.end(), 0);
  std::vector<float> wide(all.size());
  std::vector<uint16_t> back(all.size());
  const int64_t n = static_cast<int64_t>(all.size());
  ASSERT_TRUE(convert_bf16_to_f32(TensorView::of(all.data(), DType::kBF16, {n}),
                                  TensorView::f32(wide.data(), {n}))
                  .ok());
  ASSERT_TRUE(convert_f32_to_bf16(TensorView::f32(wide.data(), {n}),
                                  TensorView::of(back.data(), DType::kBF16, {n}))
                  .ok());
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(wide[i]), static_cast<uint32_t>(all[i]) << 16);
    if (std::isnan(wide[i])) {
      EXPECT_TRUE(std::isnan(std::bit_cast<float>(static_cast<uint32_t>(back[i]) << 16)));
    } else {
      EXPECT_EQ(back[i], all[i]);
    }
  }
}

}  // namespace
}  // namespace kiln::ops::ref
