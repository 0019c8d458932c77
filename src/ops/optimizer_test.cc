// Tests of AdamW, the global gradient norm and the clipping factor on every ISA this CPU runs
// (the others skip, visibly): against the double-precision references over sizes around the
// vector widths and task chunks, several hyperparameter sets (first step, late step, clipping,
// weight decay, a large learning rate that makes the update itself visible in the result),
// identical results with 1 and 2 threads, and validation errors that name the operand and leave
// every buffer untouched.
//
// Tolerances (error measure: max |got - want| / max(|want|, floor)):
//   params: 1e-6, floor 1. The kernel's update is fp32 (a few roundings, the sqrt and the
//     division, reciprocal bias corrections) against the reference's double, then both round
//     to fp32; the params and (at lr = 0.5) the updates are of order one. Measured: 3e-7.
//   m: 1e-6, floor 0.1. beta1 m + (1 - beta1) g cancels when m and g have opposite signs; its
//     terms are about 0.1. Measured: 1.2e-7.
//   v: 1e-6, floor 1e-12. A sum of positive terms: no cancellation. Measured: 1.5e-7.
//   gradient norm: 1e-11 relative. Both sum the squares (exact in double) in double, in
//     different orders. The reference adds 4e5 terms one after another, which bounds its
//     relative error by 4e5 x 2^-53 = 4.4e-11 (half that after the sqrt); the kernel's chunked
//     sums are more accurate. Measured: 1.3e-13.
#include <gtest/gtest.h>

#include <kiln/base/cpu.h>
#include <kiln/base/thread_pool.h>
#include <kiln/ops/context.h>
#include <kiln/ops/optimizer.h>

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
constexpr double kParamTol = 1e-6;
constexpr double kParamFloor = 1.0;
constexpr double kMomentTol = 1e-6;
constexpr double kFirstMomentFloor = 0.1;
constexpr double kSecondMomentFloor = 1e-12;
constexpr double kNormTol = 1e-11;

// Around every vector width, the 32 Ki-element task chunk, and a large prime.
const int64_t kSizes[] = {1, 7, 16, 17, 1000, 32768, 32771, 100003};

bool cpu_has(CpuIsa isa) {
  return static_cast<int>(isa) <= static_cast<int>(detect_cpu_features().best_isa());
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TensorView flat(std::vector<float>& v) {
  return TensorView::f32(v.data(), {static_cast<int64_t>(v.size())});
}

// Optimizer state of n parameters at plausible magnitudes: params and grads of order one,
// m of order 0.1, v of order 0.01 (positive).
struct State {
  std::vector<float> params, grads, m, v;

  AdamWParams params_for(const AdamWParams& hyper) {
    AdamWParams p = hyper;
    p.params = flat(params);
    p.grads = flat(grads);
    p.m = flat(m);
    p.v = flat(v);
    return p;
  }
};

State make_state(int64_t n, uint64_t seed) {
  const size_t count = static_cast<size_t>(n);
  return {uniform(count, seed), uniform(count, seed + 1), uniform(count, seed + 2, -0.1f, 0.1f),
          uniform(count, seed + 3, 0.0f, 0.01f)};
}

std::vector<AdamWParams> hyperparameter_sets() {
  AdamWParams first;  // the header's defaults, step 1
  AdamWParams clipped;
  clipped.lr = 0.5f;  // the update is of the order of the params, so its error shows
  clipped.weight_decay = 0.1f;
  clipped.step = 10;
  clipped.grad_scale = 0.5f;
  AdamWParams late;
  late.lr = 1e-2f;
  late.beta2 = 0.999f;
  late.weight_decay = 0.01f;
  late.step = 1000;
  return {first, clipped, late};
}

class OptimizerTest : public ::testing::TestWithParam<CpuIsa> {
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

INSTANTIATE_TEST_SUITE_P(Isa, OptimizerTest,
                         ::testing::Values(CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512),
                         [](const ::testing::TestParamInfo<CpuIsa>& param_info) {
                           return std::string(cpu_isa_name(param_info.param));
                         });

TEST_P(OptimizerTest, AdamWMatchesReference) {
  int set = 0;
  for (const AdamWParams& hyper : hyperparameter_sets()) {
    for (int64_t n : kSizes) {
      SCOPED_TRACE("set " + std::to_string(set) + " n=" + std::to_string(n));
      State got = make_state(n, 1);
      State want = got;
      ASSERT_TRUE(adamw_update(got.params_for(hyper), context()).ok());
      ASSERT_TRUE(ref::adamw_update(want.params_for(hyper)).ok());
      EXPECT_LE(max_rel_err(got.params, want.params, kParamFloor), kParamTol);
      EXPECT_LE(max_rel_err(got.m, want.m, kFirstMomentFloor), kMomentTol);
      EXPECT_LE(max_rel_err(got.v, want.v, kSecondMomentFloor), kMomentTol);
      EXPECT_TRUE(same_bits(got.grads, want.grads));  // read only
    }
    ++set;
  }
}

TEST_P(OptimizerTest, AdamWResultsAreIdenticalWithOneAndTwoThreads) {
  constexpr int64_t n = (int64_t{1} << 20) + 5;
  ThreadPool pool(2);
  std::vector<State> runs;
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    runs.push_back(make_state(n, 2));
    ASSERT_TRUE(adamw_update(runs.back().params_for(hyperparameter_sets()[1]), context(p)).ok());
  }
  EXPECT_TRUE(same_bits(runs[0].params, runs[1].params));
  EXPECT_TRUE(same_bits(runs[0].m, runs[1].m));
  EXPECT_TRUE(same_bits(runs[0].v, runs[1].v));
}

// The bf16 copy AdamW writes as it goes is the reference rounding of the updated params, bit for
// bit, on every ISA and thread count (chunks of 32 Ki elements, a vector tail); a wrong dtype or
// size is refused by name.
TEST_P(OptimizerTest, AdamWWritesTheRoundedParamsToItsBf16Copy) {
  ThreadPool pool(2);
  for (int64_t n : kSizes) {
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      SCOPED_TRACE("n=" + std::to_string(n));
      State got = make_state(n, 4);
      std::vector<uint16_t> copy(static_cast<size_t>(n), 0xFFFF);
      AdamWParams params = got.params_for(hyperparameter_sets()[1]);
      params.params_bf16 = TensorView::of(copy.data(), DType::kBF16, {n});
      ASSERT_TRUE(adamw_update(params, context(p)).ok());
      std::vector<uint16_t> want(static_cast<size_t>(n));
      ASSERT_TRUE(
          ref::convert_f32_to_bf16(flat(got.params), TensorView::of(want.data(), DType::kBF16, {n}))
              .ok());
      ASSERT_EQ(copy, want);
    }
  }
  State s = make_state(10, 5);
  std::vector<uint16_t> short_copy(9);
  AdamWParams bad = s.params_for(AdamWParams{});
  bad.params_bf16 = TensorView::of(short_copy.data(), DType::kBF16, {9});
  const Status st = adamw_update(bad, context());
  EXPECT_NE(st.to_string().find("params_bf16"), std::string::npos) << st.to_string();
}

TEST_P(OptimizerTest, AdamWRejectsInvalidViewsAndStepsAndWritesNothing) {
  State s = make_state(10, 3);
  const State before = s;
  AdamWParams p = s.params_for(AdamWParams{});
  p.step = 0;
  Status st = adamw_update(p, context());
  EXPECT_TRUE(st.is_invalid_argument());
  EXPECT_NE(st.message().find("adamw_update: step is 0 but counts from 1"), std::string::npos)
      << st.message();

  p = s.params_for(AdamWParams{});
  p.v = TensorView::f32(s.v.data(), {9});
  st = adamw_update(p, context());
  EXPECT_TRUE(st.is_invalid_argument());
  EXPECT_NE(st.message().find("adamw_update: v (f32[9]) has 9 elements, expected 10"),
            std::string::npos)
      << st.message();

  p = s.params_for(AdamWParams{});
  p.m = TensorView::strided(s.m.data(), DType::kF32, {5}, {2});
  p.params = TensorView::f32(s.params.data(), {5});
  p.grads = TensorView::f32(s.grads.data(), {5});
  p.v = TensorView::f32(s.v.data(), {5});
  st = adamw_update(p, context());
  EXPECT_TRUE(st.is_invalid_argument());
  EXPECT_NE(st.message().find("adamw_update: m"), std::string::npos) << st.message();

  EXPECT_TRUE(same_bits(s.params, before.params));
  EXPECT_TRUE(same_bits(s.m, before.m));
  EXPECT_TRUE(same_bits(s.v, before.v));
}

TEST_P(OptimizerTest, GlobalGradNormMatchesReferenceAndIsIdenticalWithOneAndTwoThreads) {
  // Buffers around the vector widths and the 64 Ki-element chunks, with magnitudes from 1e-3
  // to 1e3 so that the sum spans many binades.
  std::vector<std::vector<float>> buffers;
  float scale = 1e-3f;
  for (int64_t n : {1, 17, 65536, 65537, 300001, 31}) {
    buffers.push_back(uniform(static_cast<size_t>(n), static_cast<uint64_t>(n), -scale, scale));
    scale *= 10.0f;
  }
  std::vector<TensorView> views;
  for (std::vector<float>& b : buffers)
    views.push_back(flat(b));
  const Result<double> want = ref::global_grad_norm(views);
  ASSERT_TRUE(want.ok());
  ThreadPool pool(2);
  std::vector<double> got;
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool, &pool}) {
    const Result<double> norm = global_grad_norm(views, context(p));
    ASSERT_TRUE(norm.ok()) << norm.status().to_string();
    got.push_back(*norm);
  }
  EXPECT_LE(std::fabs(got[0] - *want) / *want, kNormTol) << got[0] << " vs " << *want;
  EXPECT_EQ(got[1], got[0]);
  EXPECT_EQ(got[2], got[0]);
}

TEST_P(OptimizerTest, GlobalGradNormOfNothingIsZeroAndBadBuffersAreNamed) {
  const Result<double> empty = global_grad_norm({}, context());
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, 0.0);

  std::vector<float> ok = {3.0f, 4.0f};
  const Result<double> five = global_grad_norm({flat(ok)}, context());
  ASSERT_TRUE(five.ok());
  EXPECT_EQ(*five, 5.0);

  std::vector<int32_t> ints(5);
  Result<double> bad = global_grad_norm({flat(ok), TensorView::i32(ints.data(), {5})}, context());
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(bad.status().is_invalid_argument());
  EXPECT_NE(bad.status().message().find("global_grad_norm: grads[1] is i32[5] but must be f32"),
            std::string::npos)
      << bad.status().message();
  bad = global_grad_norm({TensorView{}}, context());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("grads[0] is missing"), std::string::npos);
}

TEST(GradClipScaleTest, ScalesOnlyNormsAboveTheMaximum) {
  EXPECT_EQ(grad_clip_scale(0.5, 1.0), 1.0f);
  EXPECT_EQ(grad_clip_scale(1.0, 1.0), 1.0f);
  EXPECT_EQ(grad_clip_scale(4.0, 1.0), static_cast<float>(1.0 / (4.0 + 1e-6)));
  EXPECT_EQ(grad_clip_scale(1e6, 0.0), 0.0f);
  // The clipped gradient's norm is max_norm, to the 1e-6 the header adds.
  const double norm = 123.0;
  EXPECT_NEAR(norm * grad_clip_scale(norm, 1.0), 1.0, 1e-6);
}

}  // namespace
}  // namespace kiln::ops
