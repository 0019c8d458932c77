// Tests of LayerNorm and RMSNorm on every ISA this CPU runs (the others skip, visibly): against
// the double-precision references (ref::layernorm_forward, ...) on odd shapes and strided rows,
// accumulate_dx and accumulating parameter gradients, identical results with 1 and 2 threads,
// and validation errors that name the operand and leave every buffer untouched.
//
// Error measure: max |got - want| / max(|want|, floor) over a buffer. Every output here is a
// sum or difference of terms of order one (xhat * w and b; dy * w and the row means; dy * xhat
// over rows), which can cancel to far less than its terms, so the floor is 1 (the scale of the
// terms) and the tolerance bounds the error relative to them:
//   forward y: 5e-6. Rows are C points spread evenly over [3 - 1, 3 + 1] in random order: an
//     offset against a known spread (std 0.58; 0.1 or more even at C = 2) makes a one-pass
//     variance fail, and bounds the conditioning |mean| / std that any fp32 kernel's rounding
//     of the mean is amplified by (x - mean is off by up to ulp(3) rstd, about 5e-7).
//     The fp32 sums over C <= 4099 elements add about (C / lanes) 2^-24 at worst. Measured:
//     8e-7 (AVX2, AVX-512), 2.2e-6 (scalar: four accumulators of C / 4 terms each).
//   mean, rstd: 2e-6, floor 1e-3 (no cancellation; the same fp32 sums). Measured: 4e-7.
//   RMSNorm y: 2e-6, floor 1e-3: a product of x, rstd and w, no cancellation. Measured: 3e-7.
//   backward dx: 2e-5. dx = rstd (dy w - mean(dy w) - xhat mean(dy w xhat)) cancels; its row
//     sums are fp32. Measured: up to 6e-6.
//   dweight, dbias: 2e-5: fp32 sums over the rows of a task (up to 86 here) and then over the
//     tasks, of magnitude up to about sqrt(N). Measured (with dx): up to 6e-6.
#include <gtest/gtest.h>

#include <kiln/base/cpu.h>
#include <kiln/base/thread_pool.h>
#include <kiln/ops/context.h>
#include <kiln/ops/norm.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ops/ref/ref.h"
#include "ops/ref/ref_test_util.h"

namespace kiln::ops {
namespace {

using ref::testing::gather_rows;
using ref::testing::max_rel_err;
using ref::testing::uniform;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr double kTermsFloor = 1.0;  // outputs that are sums of terms of order one
constexpr double kForwardTol = 5e-6;
constexpr double kProductFloor = 1e-3;  // outputs that are products (no cancellation)
constexpr double kStatsTol = 2e-6;
constexpr double kRmsForwardTol = 2e-6;
constexpr double kBackwardTol = 2e-5;

bool cpu_has(CpuIsa isa) {
  return static_cast<int>(isa) <= static_cast<int>(detect_cpu_features().best_isa());
}

struct Shape {
  int64_t N;
  int64_t C;
  int64_t row_stride;  // >= C; padding between rows must stay untouched
};

// C around every vector width (1, 8, 16) and its tails, GPT-2's 768, a prime past 4096; N = 1,
// small, and large enough for several tasks (65536 elements per task).
const Shape kShapes[] = {{1, 1, 1},   {1, 768, 768},   {3, 17, 20},    {7, 100, 100},
                         {2, 15, 31}, {64, 768, 768},  {130, 33, 40},  {5, 1000, 1000},
                         {300, 2, 2}, {2, 4099, 4099}, {200, 768, 800}};

std::string describe(const Shape& s) {
  return "N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) +
         " stride=" + std::to_string(s.row_stride);
}

// A (N, C) matrix stored with row stride `row_stride`; padding is NaN.
struct Rows {
  Shape shape;
  std::vector<float> data;

  Rows(const Shape& s, const std::vector<float>& packed) : shape(s) {
    data.assign(static_cast<size_t>(s.N * s.row_stride), kNan);
    for (int64_t r = 0; r < s.N; ++r) {
      for (int64_t c = 0; c < s.C; ++c)
        data[static_cast<size_t>(r * s.row_stride + c)] = packed[static_cast<size_t>(r * s.C + c)];
    }
  }
  TensorView view() {
    return TensorView::strided(data.data(), DType::kF32, {shape.N, shape.C}, {shape.row_stride, 1});
  }
  std::vector<float> packed() const {
    return gather_rows(data, shape.N, shape.C, shape.row_stride);
  }
  // Every padding element is still NaN.
  bool padding_untouched() const {
    for (int64_t r = 0; r < shape.N; ++r) {
      for (int64_t c = shape.C; c < shape.row_stride; ++c) {
        if (!std::isnan(data[static_cast<size_t>(r * shape.row_stride + c)])) return false;
      }
    }
    return true;
  }
};

TensorView vec(std::vector<float>& v) {
  return TensorView::f32(v.data(), {static_cast<int64_t>(v.size())});
}

// Rows of C points spread evenly over [offset - 1, offset + 1] (each jittered within its own
// slot of width 2 / C, so they stay distinct), shuffled within the row.
std::vector<float> spread_rows(const Shape& s, uint64_t seed, float offset) {
  const std::vector<float> jitter = uniform(static_cast<size_t>(s.N * s.C), seed, -0.4f, 0.4f);
  std::mt19937_64 rng(seed);
  std::vector<float> x(static_cast<size_t>(s.N * s.C));
  for (int64_t r = 0; r < s.N; ++r) {
    float* row = x.data() + r * s.C;
    for (int64_t c = 0; c < s.C; ++c) {
      const float slot = (static_cast<float>(c) + 0.5f + jitter[static_cast<size_t>(r * s.C + c)]);
      row[c] = offset + 2.0f * slot / static_cast<float>(s.C) - 1.0f;
    }
    std::shuffle(row, row + s.C, rng);
  }
  return x;
}

std::vector<float> offset_input(const Shape& s, uint64_t seed) {
  return spread_rows(s, seed, 3.0f);
}

class NormTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  void SetUp() override {
    if (!cpu_has(GetParam())) {
      GTEST_SKIP() << "this CPU lacks " << cpu_isa_name(GetParam())
                   << " (best: " << cpu_isa_name(detect_cpu_features().best_isa()) << ")";
    }
  }
  Context context(ThreadPool* pool = nullptr) const {
    Context ctx;
    ctx.isa = GetParam();
    ctx.pool = pool;
    return ctx;
  }
};

INSTANTIATE_TEST_SUITE_P(Isa, NormTest,
                         ::testing::Values(CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512),
                         [](const ::testing::TestParamInfo<CpuIsa>& param_info) {
                           return std::string(cpu_isa_name(param_info.param));
                         });

// ---- LayerNorm ----

struct LayerNormRun {
  Rows y;
  std::vector<float> mean;
  std::vector<float> rstd;
};

LayerNormRun run_layernorm(const Shape& s, Rows& x, std::vector<float>& w, std::vector<float>& b,
                           const Context* ctx) {
  LayerNormRun out{Rows(s, std::vector<float>(static_cast<size_t>(s.N * s.C), kNan)),
                   std::vector<float>(static_cast<size_t>(s.N), kNan),
                   std::vector<float>(static_cast<size_t>(s.N), kNan)};
  LayerNormParams p{x.view(), vec(w), vec(b), out.y.view(), vec(out.mean), vec(out.rstd)};
  const Status st = ctx == nullptr ? ref::layernorm_forward(p) : layernorm_forward(p, *ctx);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

TEST_P(NormTest, LayerNormForwardMatchesReference) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    Rows x(s, offset_input(s, 1));
    std::vector<float> w = uniform(static_cast<size_t>(s.C), 2);
    std::vector<float> b = uniform(static_cast<size_t>(s.C), 3);
    const Context ctx = context();
    const LayerNormRun got = run_layernorm(s, x, w, b, &ctx);
    const LayerNormRun want = run_layernorm(s, x, w, b, nullptr);
    EXPECT_LE(max_rel_err(got.y.packed(), want.y.packed(), kTermsFloor), kForwardTol);
    EXPECT_LE(max_rel_err(got.mean, want.mean, kProductFloor), kStatsTol);
    EXPECT_LE(max_rel_err(got.rstd, want.rstd, kProductFloor), kStatsTol);
    EXPECT_TRUE(got.y.padding_untouched());
  }
}

TEST_P(NormTest, LayerNormForwardInPlace) {
  const Shape s{9, 37, 37};
  Rows x(s, offset_input(s, 4));
  std::vector<float> w = uniform(static_cast<size_t>(s.C), 5);
  std::vector<float> b = uniform(static_cast<size_t>(s.C), 6);
  const LayerNormRun want = run_layernorm(s, x, w, b, nullptr);
  std::vector<float> mean(static_cast<size_t>(s.N)), rstd(static_cast<size_t>(s.N));
  ASSERT_TRUE(
      layernorm_forward({x.view(), vec(w), vec(b), x.view(), vec(mean), vec(rstd)}, context())
          .ok());
  EXPECT_LE(max_rel_err(x.packed(), want.y.packed(), kTermsFloor), kForwardTol);
}

struct NormGrads {
  Rows dx;
  std::vector<float> dweight;
  std::vector<float> dbias;
};

// The LayerNorm backward from the given starting dx, dweight, dbias; ctx null is the reference.
NormGrads run_layernorm_backward(Rows& dy, Rows& x, std::vector<float>& w, std::vector<float>& mean,
                                 std::vector<float>& rstd, NormGrads start, bool accumulate,
                                 const Context* ctx) {
  LayerNormBackwardParams p{dy.view(),          x.view(),         vec(w),
                            vec(mean),          vec(rstd),        start.dx.view(),
                            vec(start.dweight), vec(start.dbias), accumulate};
  const Status st = ctx == nullptr ? ref::layernorm_backward(p) : layernorm_backward(p, *ctx);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return start;
}

TEST_P(NormTest, LayerNormBackwardMatchesReferenceAndAccumulates) {
  for (const Shape& s : kShapes) {
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(describe(s) + (accumulate ? " accumulate_dx" : ""));
      Rows x(s, offset_input(s, 7));
      Rows dy(s, uniform(static_cast<size_t>(s.N * s.C), 8));
      std::vector<float> w = uniform(static_cast<size_t>(s.C), 9);
      std::vector<float> b = uniform(static_cast<size_t>(s.C), 10);
      LayerNormRun stats = run_layernorm(s, x, w, b, nullptr);
      // dx starts as NaN when it is overwritten, as random values when it accumulates;
      // parameter gradients always start from random values (they accumulate).
      const std::vector<float> dx0 = accumulate
                                         ? uniform(static_cast<size_t>(s.N * s.C), 11)
                                         : std::vector<float>(static_cast<size_t>(s.N * s.C), kNan);
      const NormGrads start{Rows(s, dx0), uniform(static_cast<size_t>(s.C), 12),
                            uniform(static_cast<size_t>(s.C), 13)};
      const Context ctx = context();
      const NormGrads got =
          run_layernorm_backward(dy, x, w, stats.mean, stats.rstd, start, accumulate, &ctx);
      const NormGrads want =
          run_layernorm_backward(dy, x, w, stats.mean, stats.rstd, start, accumulate, nullptr);
      EXPECT_LE(max_rel_err(got.dx.packed(), want.dx.packed(), kTermsFloor), kBackwardTol);
      EXPECT_LE(max_rel_err(got.dweight, want.dweight, kTermsFloor), kBackwardTol);
      EXPECT_LE(max_rel_err(got.dbias, want.dbias, kTermsFloor), kBackwardTol);
      EXPECT_TRUE(got.dx.padding_untouched());
    }
  }
}

// ---- RMSNorm ----

struct RmsNormRun {
  Rows y;
  std::vector<float> rstd;
};

RmsNormRun run_rmsnorm(const Shape& s, Rows& x, std::vector<float>& w, const Context* ctx) {
  RmsNormRun out{Rows(s, std::vector<float>(static_cast<size_t>(s.N * s.C), kNan)),
                 std::vector<float>(static_cast<size_t>(s.N), kNan)};
  RmsNormParams p{x.view(), vec(w), out.y.view(), vec(out.rstd)};
  const Status st = ctx == nullptr ? ref::rmsnorm_forward(p) : rmsnorm_forward(p, *ctx);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

TEST_P(NormTest, RmsNormForwardMatchesReference) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    Rows x(s, spread_rows(s, 21, 0.5f));
    std::vector<float> w = uniform(static_cast<size_t>(s.C), 22);
    const Context ctx = context();
    const RmsNormRun got = run_rmsnorm(s, x, w, &ctx);
    const RmsNormRun want = run_rmsnorm(s, x, w, nullptr);
    EXPECT_LE(max_rel_err(got.y.packed(), want.y.packed(), kProductFloor), kRmsForwardTol);
    EXPECT_LE(max_rel_err(got.rstd, want.rstd, kProductFloor), kStatsTol);
    EXPECT_TRUE(got.y.padding_untouched());
  }
}

NormGrads run_rmsnorm_backward(Rows& dy, Rows& x, std::vector<float>& w, std::vector<float>& rstd,
                               NormGrads start, bool accumulate, const Context* ctx) {
  RmsNormBackwardParams p{dy.view(),       x.view(),           vec(w),    vec(rstd),
                          start.dx.view(), vec(start.dweight), accumulate};
  const Status st = ctx == nullptr ? ref::rmsnorm_backward(p) : rmsnorm_backward(p, *ctx);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return start;
}

TEST_P(NormTest, RmsNormBackwardMatchesReferenceAndAccumulates) {
  for (const Shape& s : kShapes) {
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(describe(s) + (accumulate ? " accumulate_dx" : ""));
      Rows x(s, spread_rows(s, 23, 0.0f));
      Rows dy(s, uniform(static_cast<size_t>(s.N * s.C), 24));
      std::vector<float> w = uniform(static_cast<size_t>(s.C), 25);
      RmsNormRun stats = run_rmsnorm(s, x, w, nullptr);
      const std::vector<float> dx0 = accumulate
                                         ? uniform(static_cast<size_t>(s.N * s.C), 26)
                                         : std::vector<float>(static_cast<size_t>(s.N * s.C), kNan);
      const NormGrads start{Rows(s, dx0), uniform(static_cast<size_t>(s.C), 27), {}};
      const Context ctx = context();
      const NormGrads got = run_rmsnorm_backward(dy, x, w, stats.rstd, start, accumulate, &ctx);
      const NormGrads want = run_rmsnorm_backward(dy, x, w, stats.rstd, start, accumulate, nullptr);
      EXPECT_LE(max_rel_err(got.dx.packed(), want.dx.packed(), kTermsFloor), kBackwardTol);
      EXPECT_LE(max_rel_err(got.dweight, want.dweight, kTermsFloor), kBackwardTol);
      EXPECT_TRUE(got.dx.padding_untouched());
    }
  }
}

// ---- Threads, validation ----

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_P(NormTest, ResultsAreIdenticalWithOneAndTwoThreads) {
  // 20 tasks of 86 rows: both threads take several, in an order that varies from run to run.
  const Shape s{1700, 768, 768};
  Rows x(s, offset_input(s, 31));
  Rows dy(s, uniform(static_cast<size_t>(s.N * s.C), 32));
  std::vector<float> w = uniform(static_cast<size_t>(s.C), 33);
  std::vector<float> b = uniform(static_cast<size_t>(s.C), 34);
  ThreadPool pool(2);
  std::vector<NormGrads> layer, rms;
  std::vector<LayerNormRun> forward;
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool, &pool}) {
    const Context ctx = context(p);
    forward.push_back(run_layernorm(s, x, w, b, &ctx));
    const NormGrads start{Rows(s, std::vector<float>(static_cast<size_t>(s.N * s.C))),
                          uniform(static_cast<size_t>(s.C), 35),
                          uniform(static_cast<size_t>(s.C), 36)};
    layer.push_back(
        run_layernorm_backward(dy, x, w, forward[0].mean, forward[0].rstd, start, false, &ctx));
    std::vector<float> rstd = run_rmsnorm(s, x, w, &ctx).rstd;
    rms.push_back(run_rmsnorm_backward(dy, x, w, rstd, start, false, &ctx));
  }
  for (size_t i = 1; i < layer.size(); ++i) {
    EXPECT_TRUE(same_bits(forward[i].y.data, forward[0].y.data));
    EXPECT_TRUE(same_bits(forward[i].rstd, forward[0].rstd));
    EXPECT_TRUE(same_bits(layer[i].dx.data, layer[0].dx.data));
    EXPECT_TRUE(same_bits(layer[i].dweight, layer[0].dweight));
    EXPECT_TRUE(same_bits(layer[i].dbias, layer[0].dbias));
    EXPECT_TRUE(same_bits(rms[i].dx.data, rms[0].dx.data));
    EXPECT_TRUE(same_bits(rms[i].dweight, rms[0].dweight));
  }
}

TEST_P(NormTest, InvalidViewsAreRejectedNamingTheOperandAndNothingIsWritten) {
  const Shape s{4, 8, 8};
  Rows x(s, offset_input(s, 41));
  std::vector<float> w(8, 1.0f), b(8, 0.0f), short_w(7, 1.0f);
  Rows y(s, std::vector<float>(32, kNan));
  std::vector<float> mean(4, kNan), rstd(4, kNan);
  const Context ctx = context();

  Status st =
      layernorm_forward({x.view(), vec(short_w), vec(b), y.view(), vec(mean), vec(rstd)}, ctx);
  EXPECT_TRUE(st.is_invalid_argument());
  EXPECT_NE(st.message().find("layernorm_forward: weight"), std::string::npos) << st.message();

  // Rows that overlap (row stride 4 < C = 8).
  TensorView overlapping = TensorView::strided(y.data.data(), DType::kF32, {4, 8}, {4, 1});
  st = layernorm_forward({x.view(), vec(w), vec(b), overlapping, vec(mean), vec(rstd)}, ctx);
  EXPECT_TRUE(st.is_invalid_argument());
  EXPECT_NE(st.message().find("y ("), std::string::npos) << st.message();

  // A non-unit inner stride.
  TensorView column_major = TensorView::strided(x.data.data(), DType::kF32, {4, 8}, {1, 4});
  st = rmsnorm_forward({column_major, vec(w), y.view(), vec(rstd)}, ctx);
  EXPECT_TRUE(st.is_invalid_argument());
  EXPECT_NE(st.message().find("rmsnorm_forward: x"), std::string::npos) << st.message();

  // A missing output and a wrong dtype.
  st = layernorm_forward({x.view(), vec(w), vec(b), y.view(), TensorView{}, vec(rstd)}, ctx);
  EXPECT_TRUE(st.is_invalid_argument());
  EXPECT_NE(st.message().find("mean is missing"), std::string::npos) << st.message();
  std::vector<int32_t> ints(8);
  st = rmsnorm_backward(
      {x.view(), x.view(), TensorView::i32(ints.data(), {8}), vec(rstd), y.view(), vec(w)}, ctx);
  EXPECT_TRUE(st.is_invalid_argument());
  EXPECT_NE(st.message().find("weight is i32[8]"), std::string::npos) << st.message();

  // No columns.
  st = rmsnorm_forward({TensorView::f32(x.data.data(), {4, 0}), TensorView::f32(w.data(), {0}),
                        TensorView::f32(y.data.data(), {4, 0}), vec(rstd)},
                       ctx);
  EXPECT_TRUE(st.is_invalid_argument());

  for (float v : y.data)
    EXPECT_TRUE(std::isnan(v));
  for (float v : mean)
    EXPECT_TRUE(std::isnan(v));
  for (float v : rstd)
    EXPECT_TRUE(std::isnan(v));
}

TEST_P(NormTest, AnIsaThisCpuLacksIsNotSupported) {
  if (cpu_has(CpuIsa::kAvx512)) GTEST_SKIP() << "this CPU runs every ISA";
  const Shape s{2, 8, 8};
  Rows x(s, offset_input(s, 51));
  std::vector<float> w(8, 1.0f), b(8, 0.0f), mean(2), rstd(2);
  Rows y(s, std::vector<float>(16, 0.0f));
  Context ctx = context();
  ctx.isa = CpuIsa::kAvx512;
  const Status st =
      layernorm_forward({x.view(), vec(w), vec(b), y.view(), vec(mean), vec(rstd)}, ctx);
  EXPECT_TRUE(st.is_not_supported()) << st.to_string();
}

}  // namespace
}  // namespace kiln::ops
