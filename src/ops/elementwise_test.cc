// Tests of GELU and the residual add on every ISA this CPU runs (the others skip, visibly):
// against the double-precision references on sizes around every vector width and chunk
// boundary, in place where the header allows it, accumulate_dx, identical results with 1 and 2
// threads, and validation errors that name the operand and leave every buffer untouched.
//
// Error measure: max |got - want| / max(|want|, floor). Tolerances:
//   gelu y: 5e-6, floor 1e-6. y = x s with s = 1 / (1 + e^{-2u}): a product, no cancellation.
//     s carries the exp's 2e-7 and the rounding of its argument 2u (a few ulp of |2u|, which
//     reaches 17 at x = -5, 3e-6 relative, where |y| is already below 1e-6); the floor covers
//     the far negative tail, where y underflows towards 0. Measured: 2.2e-6.
//   gelu dx: 2e-6, floor 1. dy/dx = s + x s (1 - s) 2u' crosses zero near x = -0.75, so it is
//     bounded relative to its terms, which are of order one. Measured: 3e-7.
//   residual: exact. One fp32 addition is the double sum rounded once, which is the reference.
#include <gtest/gtest.h>

#include <kiln/base/cpu.h>
#include <kiln/base/thread_pool.h>
#include <kiln/ops/context.h>
#include <kiln/ops/elementwise.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ops/ref/ref.h"
#include "ops/ref/ref_test_util.h"

namespace kiln::ops {
namespace {

using ref::testing::max_rel_err;
using ref::testing::uniform;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr double kGeluTol = 5e-6;
constexpr double kGeluFloor = 1e-6;
constexpr double kGeluGradTol = 2e-6;
constexpr double kGeluGradFloor = 1.0;

// Around every vector width (1, 8, 16), the 32 Ki-element task chunk, and large primes.
const int64_t kSizes[] = {1, 7, 8, 15, 16, 17, 100, 1000, 32768, 32769, 65541, 100003};

bool cpu_has(CpuIsa isa) {
  return static_cast<int>(isa) <= static_cast<int>(detect_cpu_features().best_isa());
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TensorView flat(std::vector<float>& v) {
  return TensorView::f32(v.data(), {static_cast<int64_t>(v.size())});
}

// GELU inputs: U(-8, 8), led by the points where the formula is delicate: zero, tiny values,
// the far tails (past the exp's argument cap at x = -9.3), and the derivative's zero.
std::vector<float> gelu_input(int64_t n, uint64_t seed) {
  std::vector<float> x = uniform(static_cast<size_t>(n), seed, -8.0f, 8.0f);
  const float special[] = {0.0f,  -0.0f,  1e-6f,   -1e-6f, 20.0f, -20.0f, 9.5f,
                           -9.5f, 100.0f, -100.0f, -0.75f, 3.0f,  -3.0f};
  for (size_t i = 0; i < x.size() && i < sizeof(special) / sizeof(special[0]); ++i)
    x[i] = special[i];
  return x;
}

class ElementwiseTest : public ::testing::TestWithParam<CpuIsa> {
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

INSTANTIATE_TEST_SUITE_P(Isa, ElementwiseTest,
                         ::testing::Values(CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512),
                         [](const ::testing::TestParamInfo<CpuIsa>& param_info) {
                           return std::string(cpu_isa_name(param_info.param));
                         });

TEST_P(ElementwiseTest, GeluForwardMatchesReferenceAndWorksInPlace) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE("n=" + std::to_string(n));
    std::vector<float> x = gelu_input(n, 1);
    std::vector<float> got(x.size(), kNan), want(x.size(), kNan);
    ASSERT_TRUE(gelu_forward({flat(x), flat(got)}, context()).ok());
    ASSERT_TRUE(ref::gelu_forward({flat(x), flat(want)}).ok());
    EXPECT_LE(max_rel_err(got, want, kGeluFloor), kGeluTol);
    std::vector<float> in_place = x;
    ASSERT_TRUE(gelu_forward({flat(in_place), flat(in_place)}, context()).ok());
    EXPECT_TRUE(same_bits(in_place, got));
  }
}

TEST_P(ElementwiseTest, GeluOfNanIsNan) {
  std::vector<float> x = {kNan, 1.0f, -kNan}, y(3, 0.0f);
  ASSERT_TRUE(gelu_forward({flat(x), flat(y)}, context()).ok());
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_FALSE(std::isnan(y[1]));
  EXPECT_TRUE(std::isnan(y[2]));
}

TEST_P(ElementwiseTest, GeluBackwardMatchesReferenceAccumulatesAndWorksInPlace) {
  for (int64_t n : kSizes) {
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE("n=" + std::to_string(n) + (accumulate ? " accumulate_dx" : ""));
      std::vector<float> x = gelu_input(n, 2);
      std::vector<float> dy = uniform(static_cast<size_t>(n), 3);
      const std::vector<float> dx0 = accumulate ? uniform(static_cast<size_t>(n), 4)
                                                : std::vector<float>(static_cast<size_t>(n), kNan);
      std::vector<float> got = dx0, want = dx0;
      ASSERT_TRUE(gelu_backward({flat(x), flat(dy), flat(got), accumulate}, context()).ok());
      ASSERT_TRUE(ref::gelu_backward({flat(x), flat(dy), flat(want), accumulate}).ok());
      EXPECT_LE(max_rel_err(got, want, kGeluGradFloor), kGeluGradTol);
      if (!accumulate) {
        std::vector<float> in_place = dy;
        ASSERT_TRUE(gelu_backward({flat(x), flat(in_place), flat(in_place)}, context()).ok());
        EXPECT_TRUE(same_bits(in_place, got));
      }
    }
  }
}

TEST_P(ElementwiseTest, ResidualIsExactInPlaceAndItsBackwardAccumulates) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE("n=" + std::to_string(n));
    std::vector<float> a = uniform(static_cast<size_t>(n), 5);
    std::vector<float> b = uniform(static_cast<size_t>(n), 6);
    std::vector<float> got(a.size(), kNan), want(a.size(), kNan);
    ASSERT_TRUE(residual_forward({flat(a), flat(b), flat(got)}, context()).ok());
    ASSERT_TRUE(ref::residual_forward({flat(a), flat(b), flat(want)}).ok());
    EXPECT_TRUE(same_bits(got, want));
    std::vector<float> into_a = a, into_b = b;
    ASSERT_TRUE(residual_forward({flat(into_a), flat(b), flat(into_a)}, context()).ok());
    ASSERT_TRUE(residual_forward({flat(a), flat(into_b), flat(into_b)}, context()).ok());
    EXPECT_TRUE(same_bits(into_a, want));
    EXPECT_TRUE(same_bits(into_b, want));

    std::vector<float> dy = uniform(static_cast<size_t>(n), 7);
    std::vector<float> da = uniform(static_cast<size_t>(n), 8),
                       db = uniform(static_cast<size_t>(n), 9);
    std::vector<float> want_da = da, want_db = db;
    ASSERT_TRUE(residual_backward({flat(dy), flat(da), flat(db)}, context()).ok());
    ASSERT_TRUE(ref::residual_backward({flat(dy), flat(want_da), flat(want_db)}).ok());
    EXPECT_TRUE(same_bits(da, want_da));
    EXPECT_TRUE(same_bits(db, want_db));
  }
}

TEST_P(ElementwiseTest, ResultsAreIdenticalWithOneAndTwoThreads) {
  constexpr int64_t n = (int64_t{1} << 20) + 3;  // 33 chunks
  std::vector<float> x = gelu_input(n, 10);
  std::vector<float> dy = uniform(static_cast<size_t>(n), 11);
  ThreadPool pool(2);
  std::vector<std::vector<float>> y, dx, sum, da;
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    const Context ctx = context(p);
    y.emplace_back(static_cast<size_t>(n));
    dx.emplace_back(static_cast<size_t>(n), 1.0f);
    sum.emplace_back(static_cast<size_t>(n));
    da.emplace_back(static_cast<size_t>(n), 1.0f);
    std::vector<float> db(static_cast<size_t>(n), 2.0f);
    ASSERT_TRUE(gelu_forward({flat(x), flat(y.back())}, ctx).ok());
    ASSERT_TRUE(gelu_backward({flat(x), flat(dy), flat(dx.back()), true}, ctx).ok());
    ASSERT_TRUE(residual_forward({flat(x), flat(dy), flat(sum.back())}, ctx).ok());
    ASSERT_TRUE(residual_backward({flat(dy), flat(da.back()), flat(db)}, ctx).ok());
  }
  EXPECT_TRUE(same_bits(y[0], y[1]));
  EXPECT_TRUE(same_bits(dx[0], dx[1]));
  EXPECT_TRUE(same_bits(sum[0], sum[1]));
  EXPECT_TRUE(same_bits(da[0], da[1]));
}

TEST_P(ElementwiseTest, InvalidViewsAreRejectedNamingTheOperandAndNothingIsWritten) {
  std::vector<float> x = uniform(12, 12);
  std::vector<float> y(12, kNan), short_y(11, kNan);
  std::vector<int32_t> ints(12);
  const Context ctx = context();

  Status st = gelu_forward({flat(x), flat(short_y)}, ctx);
  EXPECT_TRUE(st.is_invalid_argument());
  EXPECT_NE(st.message().find("gelu_forward: y (f32[11]) has 11 elements, expected 12"),
            std::string::npos)
      << st.message();

  st = gelu_backward({flat(x), TensorView::i32(ints.data(), {12}), flat(y)}, ctx);
  EXPECT_TRUE(st.is_invalid_argument());
  EXPECT_NE(st.message().find("gelu_backward: dy is i32[12] but must be f32"), std::string::npos)
      << st.message();

  // Every other element: 12 elements in a 24-float span.
  std::vector<float> wide(24, kNan);
  const TensorView strided = TensorView::strided(wide.data(), DType::kF32, {12}, {2});
  st = residual_forward({flat(x), flat(x), strided}, ctx);
  EXPECT_TRUE(st.is_invalid_argument());
  EXPECT_NE(st.message().find("residual_forward: y"), std::string::npos) << st.message();

  st = residual_backward({flat(x), flat(y), TensorView{}}, ctx);
  EXPECT_TRUE(st.is_invalid_argument());
  EXPECT_NE(st.message().find("residual_backward: db is missing"), std::string::npos)
      << st.message();

  for (const std::vector<float>* v : {&y, &short_y, &wide}) {
    for (float f : *v)
      EXPECT_TRUE(std::isnan(f));
  }
}

}  // namespace
}  // namespace kiln::ops
