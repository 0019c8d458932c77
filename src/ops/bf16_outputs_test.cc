// Tests of the ops that can write a bf16 output for a bf16 matmul (LayerNorm's y, GELU's y and
// dx, cross-entropy's dlogits), on every ISA this CPU runs (the others skip, visibly): each bf16
// value is bit for bit the f32 op's value rounded by convert_f32_to_bf16, the f32 path being the
// one the double references check (norm_test.cc, elementwise_test.cc, cross_entropy_test.cc).
// Sizes cross the kernels' 1,024-float staging buffer, a vector tail and the task split; guard
// elements after each output must stay untouched; cross-entropy leaves the logits as they were;
// invalid combinations are refused naming the operand, before anything is written.
//
// Tolerance: none. Rounding is an exact function of the f32 value, and the f32 value is
// computed by the same instructions whichever dtype the output has.
#include <gtest/gtest.h>

#include <kiln/base/cpu.h>
#include <kiln/base/thread_pool.h>
#include <kiln/ops/context.h>
#include <kiln/ops/convert.h>
#include <kiln/ops/cross_entropy.h>
#include <kiln/ops/elementwise.h>
#include <kiln/ops/norm.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "ops/ref/ref.h"
#include "ops/ref/ref_test_util.h"

namespace kiln::ops {
namespace {

using ref::testing::uniform;

// bf16 elements after the end of every bf16 output, which must keep this value.
constexpr size_t kGuard = 40;
constexpr uint16_t kGuardBits = 0xA5A5;

bool cpu_has(CpuIsa isa) {
  return static_cast<int>(isa) <= static_cast<int>(detect_cpu_features().best_isa());
}

// n bf16 elements followed by kGuard guard elements.
std::vector<uint16_t> guarded(int64_t n) {
  std::vector<uint16_t> v(static_cast<size_t>(n) + kGuard, 0);
  for (size_t i = static_cast<size_t>(n); i < v.size(); ++i)
    v[i] = kGuardBits;
  return v;
}

TensorView bf16_view(std::vector<uint16_t>& v, std::initializer_list<int64_t> shape) {
  return TensorView::of(v.data(), DType::kBF16, shape);
}

class Bf16OutputsTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  void SetUp() override {
    if (!cpu_has(GetParam())) {
      GTEST_SKIP() << "this CPU lacks " << cpu_isa_name(GetParam())
                   << " (best: " << cpu_isa_name(detect_cpu_features().best_isa()) << ")";
    }
  }
  Context context() {
    Context ctx;
    ctx.isa = GetParam();
    ctx.pool = &pool_;
    return ctx;
  }
  // The f32 values rounded by the conversion op (the same ISA).
  std::vector<uint16_t> rounded(std::vector<float>& f32) {
    const auto n = static_cast<int64_t>(f32.size());
    std::vector<uint16_t> out(f32.size());
    EXPECT_TRUE(
        convert_f32_to_bf16(TensorView::f32(f32.data(), {n}), bf16_view(out, {n}), context()).ok());
    return out;
  }
  // got (n values and its guard) is want bit for bit, and the guard is untouched.
  static void expect_rounding_of(const std::vector<uint16_t>& got,
                                 const std::vector<uint16_t>& want, const std::string& what) {
    ASSERT_EQ(got.size(), want.size() + kGuard) << what;
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(got[i], want[i]) << what << ": element " << i;
    for (size_t i = want.size(); i < got.size(); ++i)
      ASSERT_EQ(got[i], kGuardBits) << what << ": guard element " << i - want.size() << " written";
  }

 private:
  ThreadPool pool_{2};
};

INSTANTIATE_TEST_SUITE_P(Isa, Bf16OutputsTest,
                         ::testing::Values(CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512),
                         [](const ::testing::TestParamInfo<CpuIsa>& param_info) {
                           return std::string(cpu_isa_name(param_info.param));
                         });

TEST_P(Bf16OutputsTest, LayerNormBf16YIsTheF32YRounded) {
  // C = 2,500: two full stages and a tail; C = 37: one partial stage and a vector tail.
  for (const int64_t C : {int64_t{2500}, int64_t{37}}) {
    const int64_t N = 9;
    std::vector<float> x = uniform(static_cast<size_t>(N * C), 1, -3.0f, 5.0f);
    std::vector<float> w = uniform(static_cast<size_t>(C), 2, 0.5f, 1.5f);
    std::vector<float> b = uniform(static_cast<size_t>(C), 3, -0.2f, 0.2f);
    std::vector<float> y(static_cast<size_t>(N * C)), mean(N), rstd(N), mean16(N), rstd16(N);
    std::vector<uint16_t> y16 = guarded(N * C);
    LayerNormParams p{TensorView::f32(x.data(), {N, C}), TensorView::f32(w.data(), {C}),
                      TensorView::f32(b.data(), {C}),    TensorView::f32(y.data(), {N, C}),
                      TensorView::f32(mean.data(), {N}), TensorView::f32(rstd.data(), {N})};
    ASSERT_TRUE(layernorm_forward(p, context()).ok());
    p.y = bf16_view(y16, {N, C});
    p.mean = TensorView::f32(mean16.data(), {N});
    p.rstd = TensorView::f32(rstd16.data(), {N});
    ASSERT_TRUE(layernorm_forward(p, context()).ok());
    expect_rounding_of(y16, rounded(y), "layernorm y, C = " + std::to_string(C));
    EXPECT_EQ(mean16, mean);
    EXPECT_EQ(rstd16, rstd);
  }
}

TEST_P(Bf16OutputsTest, LayerNormBf16YWithStridedRowsWritesOnlyItsColumns) {
  // Rows of y 40 elements apart for C = 33: the 7 between rows must stay as they were.
  const int64_t N = 6, C = 33, stride = 40;
  std::vector<float> x = uniform(static_cast<size_t>(N * C), 7, -2.0f, 2.0f);
  std::vector<float> w(C, 1.25f), b(C, -0.5f), y(static_cast<size_t>(N * C)), mean(N), rstd(N);
  LayerNormParams p{TensorView::f32(x.data(), {N, C}), TensorView::f32(w.data(), {C}),
                    TensorView::f32(b.data(), {C}),    TensorView::f32(y.data(), {N, C}),
                    TensorView::f32(mean.data(), {N}), TensorView::f32(rstd.data(), {N})};
  ASSERT_TRUE(layernorm_forward(p, context()).ok());
  const std::vector<uint16_t> want = rounded(y);
  std::vector<uint16_t> y16 = guarded(N * stride);
  std::fill(y16.begin(), y16.begin() + N * stride, kGuardBits);
  p.y = TensorView::strided(y16.data(), DType::kBF16, {N, C}, {stride, 1});
  ASSERT_TRUE(layernorm_forward(p, context()).ok());
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t col = 0; col < stride; ++col) {
      const uint16_t got = y16[static_cast<size_t>(r * stride + col)];
      if (col < C) {
        ASSERT_EQ(got, want[static_cast<size_t>(r * C + col)]) << "row " << r << " col " << col;
      } else {
        ASSERT_EQ(got, kGuardBits) << "the gap after row " << r << " written at " << col;
      }
    }
  }
}

TEST_P(Bf16OutputsTest, GeluBf16OutputsAreTheF32OnesRounded) {
  // Past one task chunk (32 Ki elements) with a tail, so several tasks and stages.
  const int64_t n = 70001;
  std::vector<float> x = uniform(static_cast<size_t>(n), 4, -8.0f, 8.0f);
  std::vector<float> dy = uniform(static_cast<size_t>(n), 5, -1.0f, 1.0f);
  std::vector<float> y(static_cast<size_t>(n)), dx(static_cast<size_t>(n));
  std::vector<uint16_t> y16 = guarded(n), dx16 = guarded(n);
  const TensorView xv = TensorView::f32(x.data(), {n});
  ASSERT_TRUE(gelu_forward({xv, TensorView::f32(y.data(), {n})}, context()).ok());
  ASSERT_TRUE(gelu_forward({xv, bf16_view(y16, {n})}, context()).ok());
  expect_rounding_of(y16, rounded(y), "gelu y");
  GeluBackwardParams bp{xv, TensorView::f32(dy.data(), {n}), TensorView::f32(dx.data(), {n})};
  ASSERT_TRUE(gelu_backward(bp, context()).ok());
  bp.dx = bf16_view(dx16, {n});
  ASSERT_TRUE(gelu_backward(bp, context()).ok());
  expect_rounding_of(dx16, rounded(dx), "gelu dx");
}

TEST_P(Bf16OutputsTest, CrossEntropyBf16DlogitsAreTheF32OnesRoundedAndLogitsStay) {
  // vocab 2,050 of 2,100 padded columns (the pad must be written as 0), targets at the edges.
  const int64_t N = 5, Vp = 2100, V = 2050;
  std::vector<float> logits = uniform(static_cast<size_t>(N * Vp), 6, -6.0f, 6.0f);
  std::vector<int32_t> targets = {0, 2049, 1024, 7, 1023};
  std::vector<float> losses(N), lse(N), dlosses(N, 0.2f);
  ASSERT_TRUE(cross_entropy_forward(
                  {TensorView::f32(logits.data(), {N, Vp}), TensorView::i32(targets.data(), {N}),
                   TensorView::f32(losses.data(), {N}), TensorView::f32(lse.data(), {N}), V},
                  context())
                  .ok());
  const std::vector<float> logits_before = logits;
  std::vector<uint16_t> dlogits16 = guarded(N * Vp);
  std::fill(dlogits16.begin(), dlogits16.begin() + N * Vp, uint16_t{0x3F80});  // pad must be 0
  CrossEntropyBackwardParams p{TensorView::f32(logits.data(), {N, Vp}),
                               TensorView::i32(targets.data(), {N}),
                               TensorView::f32(lse.data(), {N}),
                               TensorView::f32(dlosses.data(), {N}),
                               V,
                               bf16_view(dlogits16, {N, Vp})};
  ASSERT_TRUE(cross_entropy_backward(p, context()).ok());
  EXPECT_EQ(logits, logits_before) << "a bf16 dlogits must leave the logits as they were";
  p.dlogits = TensorView();  // the f32 gradient, in place
  ASSERT_TRUE(cross_entropy_backward(p, context()).ok());
  expect_rounding_of(dlogits16, rounded(logits), "dlogits");
}

TEST(Bf16OutputsReferenceTest, TheReferencesRefuseBf16Outputs) {
  // ref.h: their outputs are f32; a bf16 one is the kernel's f32 output rounded.
  const int64_t n = 8;
  std::vector<float> x(n, 0.5f), dy(n, 1.0f), w(n, 1.0f), b(n, 0.0f), mean(1), rstd(1);
  std::vector<uint16_t> out(n);
  const TensorView out16 = TensorView::of(out.data(), DType::kBF16, {n});
  EXPECT_FALSE(ref::gelu_forward({TensorView::f32(x.data(), {n}), out16}).ok());
  EXPECT_FALSE(ref::gelu_backward(
                   {TensorView::f32(x.data(), {n}), TensorView::f32(dy.data(), {n}), out16, false})
                   .ok());
  EXPECT_FALSE(
      ref::layernorm_forward({TensorView::f32(x.data(), {1, n}), TensorView::f32(w.data(), {n}),
                              TensorView::f32(b.data(), {n}),
                              TensorView::of(out.data(), DType::kBF16, {1, n}),
                              TensorView::f32(mean.data(), {1}), TensorView::f32(rstd.data(), {1})})
          .ok());
  std::vector<int32_t> targets = {3};
  std::vector<float> lse(1, 2.0f), dl(1, 1.0f);
  const Status st = ref::cross_entropy_backward(
      {TensorView::f32(x.data(), {1, n}), TensorView::i32(targets.data(), {1}),
       TensorView::f32(lse.data(), {1}), TensorView::f32(dl.data(), {1}), n,
       TensorView::of(out.data(), DType::kBF16, {1, n})});
  EXPECT_NE(st.message().find("ref::cross_entropy_backward"), std::string::npos) << st.message();
  EXPECT_EQ(x, std::vector<float>(n, 0.5f)) << "the reference wrote the logits";
}

TEST_P(Bf16OutputsTest, InvalidBf16OutputsAreRefusedNamingTheOperand) {
  const int64_t n = 64;
  std::vector<float> x(n, 1.0f), dy(n, 1.0f);
  std::vector<uint16_t> out = guarded(n);
  const std::vector<uint16_t> untouched = out;
  GeluBackwardParams gb{TensorView::f32(x.data(), {n}), TensorView::f32(dy.data(), {n}),
                        bf16_view(out, {n}), /*accumulate_dx=*/true};
  Status st = gelu_backward(gb, context());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("gelu_backward: dx"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("accumulate_dx"), std::string::npos) << st.message();

  GeluParams gf{TensorView::f32(x.data(), {n}), TensorView::of(out.data(), DType::kI32, {n / 2})};
  st = gelu_forward(gf, context());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("gelu_forward: y"), std::string::npos) << st.message();

  // dlogits over the logits' own bytes, and dlogits in f32.
  const int64_t N = 2, Vp = 32;
  std::vector<float> logits(N * Vp, 0.5f), lse(N, 4.0f), dl(N, 1.0f);
  std::vector<int32_t> targets = {1, 2};
  CrossEntropyBackwardParams ce{TensorView::f32(logits.data(), {N, Vp}),
                                TensorView::i32(targets.data(), {N}),
                                TensorView::f32(lse.data(), {N}),
                                TensorView::f32(dl.data(), {N}),
                                Vp,
                                TensorView::of(logits.data() + 8, DType::kBF16, {N, Vp})};
  const std::vector<float> logits_before = logits;
  st = cross_entropy_backward(ce, context());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("cross_entropy_backward: dlogits"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("overlaps logits"), std::string::npos) << st.message();
  ce.dlogits = TensorView::f32(logits.data(), {N, Vp});
  st = cross_entropy_backward(ce, context());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("dlogits"), std::string::npos) << st.message();
  EXPECT_EQ(logits, logits_before);
  EXPECT_EQ(out, untouched);

  // A bf16 output over its input's bytes (half their size: it would overwrite x ahead of the
  // reads), and a LayerNorm y of neither f32 nor bf16.
  const std::vector<float> x_before = x;
  st = gelu_forward({TensorView::f32(x.data(), {n}), TensorView::of(x.data(), DType::kBF16, {n})},
                    context());
  EXPECT_NE(st.message().find("gelu_forward: y"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("overlaps x"), std::string::npos) << st.message();
  gb = GeluBackwardParams{TensorView::f32(x.data(), {n}), TensorView::f32(dy.data(), {n}),
                          TensorView::of(dy.data() + 8, DType::kBF16, {n}), false};
  st = gelu_backward(gb, context());
  EXPECT_NE(st.message().find("gelu_backward: dx"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("overlaps dy"), std::string::npos) << st.message();
  const int64_t rows = 4, C = 16;
  std::vector<float> w(C, 1.0f), b(C, 0.0f), mean(rows), rstd(rows);
  LayerNormParams ln{
      TensorView::f32(x.data(), {rows, C}), TensorView::f32(w.data(), {C}),
      TensorView::f32(b.data(), {C}),       TensorView::of(x.data() + 4, DType::kBF16, {rows, C}),
      TensorView::f32(mean.data(), {rows}), TensorView::f32(rstd.data(), {rows})};
  st = layernorm_forward(ln, context());
  EXPECT_NE(st.message().find("layernorm_forward: y"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("overlaps x"), std::string::npos) << st.message();
  ln.y = TensorView::of(out.data(), DType::kI32, {rows, C / 2});
  st = layernorm_forward(ln, context());
  EXPECT_NE(st.message().find("must be f32 or bf16"), std::string::npos) << st.message();
  EXPECT_EQ(x, x_before);
  EXPECT_EQ(out, untouched);
}

}  // namespace
}  // namespace kiln::ops
