// Tests of the fused softmax cross-entropy on every ISA this CPU runs (the others skip,
// visibly): against the double-precision references on odd vocabularies (around the vector
// widths and the 2048-float softmax block, GPT-2's 50257 padded to 50304), strided rows, rows
// shifted far from zero or whose maximum jumps between blocks, padding zeroed by the backward,
// identical results with 1 and 2 threads, bad targets and validation errors, after which nothing
// has been written.
//
// Tolerances (error measure: max |got - want| / max(|want|, floor)):
//   lse: 1e-6, floor 1. The row's sum of exps is fp32 within a 2048-float block (up to 512
//     terms per accumulator lane on the scalar path) and double across blocks; the exp is good
//     to 2e-7. Measured: 1.2e-7.
//   losses: 2e-6, floor 1: lse - logit[target] cancels when the target is likely, so it is
//     bounded relative to lse (order log V). Measured: 1.2e-7.
//   dlogits: 1e-5, floor 1e-9. p = e^{x - lse} in fp32 carries the rounding of the argument
//     x - lse (up to ulp(|x - lse|) / 2 relative: 2e-6 at |x - lse| = 30) and of the forward's
//     fp32 lse (ulp(lse) / 2, 5e-7 near 10), while the reference recomputes lse in double.
//     Below the floor (p dloss < 1e-9) only the absolute error counts: on AVX2 and scalar the
//     exp clamps at e^-87.3, so the kernel's smallest values are 1e-38 where the true ones are
//     smaller.
//     Measured: 2.8e-6.
#include <gtest/gtest.h>

#include <kiln/base/cpu.h>
#include <kiln/base/thread_pool.h>
#include <kiln/ops/context.h>
#include <kiln/ops/cross_entropy.h>

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
constexpr double kLseTol = 1e-6;
constexpr double kLossTol = 2e-6;
constexpr double kScalarFloor = 1.0;
constexpr double kGradTol = 1e-5;
constexpr double kGradFloor = 1e-9;

bool cpu_has(CpuIsa isa) {
  return static_cast<int>(isa) <= static_cast<int>(detect_cpu_features().best_isa());
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Shape {
  int64_t N, Vp, vocab, row_stride;  // vocab 0 means Vp
};

const Shape kShapes[] = {{1, 1, 0, 1},          {1, 5, 0, 5},           {3, 17, 16, 20},
                         {4, 100, 100, 120},    {17, 2048, 2000, 2048}, {2, 2049, 0, 2049},
                         {1, 4097, 4097, 4100}, {2, 5000, 4999, 5003},  {3, 50304, 50257, 50304}};

std::string describe(const Shape& s) {
  return "N=" + std::to_string(s.N) + " Vp=" + std::to_string(s.Vp) +
         " vocab=" + std::to_string(s.vocab) + " stride=" + std::to_string(s.row_stride);
}

int64_t vocab_of(const Shape& s) {
  return s.vocab == 0 ? s.Vp : s.vocab;
}

// Logits U(-8, 8), every third row shifted by +60 (e^x alone would overflow fp32 past 88) and
// the padding between rows NaN (must stay untouched); targets uniform over the vocabulary.
struct Problem {
  Shape s;
  std::vector<float> logits;  // (N, row_stride)
  std::vector<int32_t> targets;
  std::vector<float> losses, lse, dlosses;

  TensorView logits_view() {
    return TensorView::strided(logits.data(), DType::kF32, {s.N, s.Vp}, {s.row_stride, 1});
  }
  TensorView targets_view() { return TensorView::i32(targets.data(), {s.N}); }
  TensorView vec(std::vector<float>& v) { return TensorView::f32(v.data(), {s.N}); }
  CrossEntropyParams forward() {
    return {logits_view(), targets_view(), vec(losses), vec(lse), s.vocab};
  }
  CrossEntropyBackwardParams backward() {
    return {logits_view(), targets_view(), vec(lse), vec(dlosses), s.vocab};
  }
};

Problem make(const Shape& s, uint64_t seed) {
  Problem p{s, std::vector<float>(static_cast<size_t>(s.N * s.row_stride), kNan), {}, {}, {}, {}};
  const std::vector<float> x = uniform(static_cast<size_t>(s.N * s.Vp), seed, -8.0f, 8.0f);
  for (int64_t n = 0; n < s.N; ++n) {
    const float shift = n % 3 == 2 ? 60.0f : 0.0f;
    for (int64_t v = 0; v < s.Vp; ++v)
      p.logits[static_cast<size_t>(n * s.row_stride + v)] =
          x[static_cast<size_t>(n * s.Vp + v)] + shift;
  }
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(vocab_of(s) - 1));
  for (int64_t n = 0; n < s.N; ++n)
    p.targets.push_back(dist(rng));
  p.losses.assign(static_cast<size_t>(s.N), kNan);
  p.lse.assign(static_cast<size_t>(s.N), kNan);
  // A mean loss: dloss = 1/N.
  p.dlosses.assign(static_cast<size_t>(s.N), 1.0f / static_cast<float>(s.N));
  return p;
}

class CrossEntropyTest : public ::testing::TestWithParam<CpuIsa> {
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

INSTANTIATE_TEST_SUITE_P(Isa, CrossEntropyTest,
                         ::testing::Values(CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512),
                         [](const ::testing::TestParamInfo<CpuIsa>& param_info) {
                           return std::string(cpu_isa_name(param_info.param));
                         });

TEST_P(CrossEntropyTest, ForwardMatchesReference) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    Problem got = make(s, 1);
    Problem want = got;
    ASSERT_TRUE(cross_entropy_forward(got.forward(), context()).ok());
    ASSERT_TRUE(ref::cross_entropy_forward(want.forward()).ok());
    EXPECT_LE(max_rel_err(got.lse, want.lse, kScalarFloor), kLseTol);
    EXPECT_LE(max_rel_err(got.losses, want.losses, kScalarFloor), kLossTol);
    EXPECT_TRUE(same_bits(got.logits, want.logits));  // read only
  }
}

TEST_P(CrossEntropyTest, BackwardMatchesReferenceInPlaceAndZeroesThePadding) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    Problem got = make(s, 2);
    ASSERT_TRUE(cross_entropy_forward(got.forward(), context()).ok());
    Problem want = got;
    ASSERT_TRUE(cross_entropy_backward(got.backward(), context()).ok());
    ASSERT_TRUE(ref::cross_entropy_backward(want.backward()).ok());
    const int64_t vocab = vocab_of(s);
    EXPECT_LE(max_rel_err(gather_rows(got.logits, s.N, vocab, s.row_stride),
                          gather_rows(want.logits, s.N, vocab, s.row_stride), kGradFloor),
              kGradTol);
    for (int64_t n = 0; n < s.N; ++n) {
      for (int64_t v = vocab; v < s.row_stride; ++v) {
        const float f = got.logits[static_cast<size_t>(n * s.row_stride + v)];
        if (v < s.Vp) {
          EXPECT_EQ(f, 0.0f) << "padding column " << v << " of row " << n;
        } else {
          EXPECT_TRUE(std::isnan(f)) << "column " << v << " past row " << n << " was written";
        }
      }
    }
  }
}

// The forward sums each 2048-logit block against the maximum of the blocks before it; these
// rows move that maximum far between blocks: up by more than the 64 at which a block is summed
// again (fp32 terms would overflow), down past where the terms underflow, and one logit far above
// all others in a late block. The first logit (the first reference) is also the row's minimum
// in one row.
TEST_P(CrossEntropyTest, RowsWhoseMaximumJumpsBetweenBlocks) {
  const Shape s{5, 6000, 5999, 6000};
  Problem got = make(s, 7);
  const auto row = [&](int64_t n) { return got.logits.data() + n * s.row_stride; };
  for (int64_t v = 2048; v < s.Vp; ++v)
    row(0)[v] += 100.0f;  // up by 100 after the first block
  for (int64_t v = 2048; v < s.Vp; ++v)
    row(1)[v] -= 200.0f;  // down by 200
  row(2)[5000] = 300.0f;  // one dominant logit in the third block
  row(3)[0] = -1000.0f;   // a first reference far below the rest
  for (int64_t v = 0; v < s.Vp; ++v)
    row(4)[v] = static_cast<float>(v) * 0.05f;  // rising through every block: 300 in all
  Problem want = got;
  ASSERT_TRUE(cross_entropy_forward(got.forward(), context()).ok());
  ASSERT_TRUE(ref::cross_entropy_forward(want.forward()).ok());
  EXPECT_LE(max_rel_err(got.lse, want.lse, kScalarFloor), kLseTol);
  EXPECT_LE(max_rel_err(got.losses, want.losses, kScalarFloor), kLossTol);
}

TEST_P(CrossEntropyTest, GradientRowsSumToZero) {
  // softmax sums to one, so each row of (p - onehot) dloss sums to 0: a check independent of
  // the reference, at GPT-2's size.
  const Shape s{2, 50304, 50257, 50304};
  Problem p = make(s, 3);
  ASSERT_TRUE(cross_entropy_forward(p.forward(), context()).ok());
  ASSERT_TRUE(cross_entropy_backward(p.backward(), context()).ok());
  for (int64_t n = 0; n < s.N; ++n) {
    double sum = 0;
    for (int64_t v = 0; v < s.Vp; ++v)
      sum += p.logits[static_cast<size_t>(n * s.row_stride + v)];
    EXPECT_NEAR(sum, 0.0, 1e-6) << "row " << n;
  }
}

TEST_P(CrossEntropyTest, ResultsAreIdenticalWithOneAndTwoThreads) {
  const Shape s{24, 50304, 50257, 50304};
  ThreadPool pool(2);
  std::vector<Problem> runs;
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool, &pool}) {
    runs.push_back(make(s, 4));
    ASSERT_TRUE(cross_entropy_forward(runs.back().forward(), context(p)).ok());
    ASSERT_TRUE(cross_entropy_backward(runs.back().backward(), context(p)).ok());
  }
  for (size_t i = 1; i < runs.size(); ++i) {
    EXPECT_TRUE(same_bits(runs[i].lse, runs[0].lse));
    EXPECT_TRUE(same_bits(runs[i].losses, runs[0].losses));
    EXPECT_TRUE(same_bits(runs[i].logits, runs[0].logits));
  }
}

TEST_P(CrossEntropyTest, TargetOutsideTheVocabularyIsRejectedNamingTheRowAndNothingIsWritten) {
  const Shape s{4, 20, 17, 20};
  for (int32_t bad : {17, -1}) {
    Problem p = make(s, 5);
    ASSERT_TRUE(cross_entropy_forward(p.forward(), context()).ok());
    p.targets[3] = bad;
    const Problem before = p;
    Status st = cross_entropy_forward(p.forward(), context());
    EXPECT_TRUE(st.is_invalid_argument());
    EXPECT_NE(st.message().find("cross_entropy_forward: targets[3] = " + std::to_string(bad) +
                                " is outside the vocabulary [0, 17)"),
              std::string::npos)
        << st.message();
    st = cross_entropy_backward(p.backward(), context());
    EXPECT_TRUE(st.is_invalid_argument());
    EXPECT_NE(st.message().find("cross_entropy_backward: targets[3]"), std::string::npos)
        << st.message();
    EXPECT_TRUE(same_bits(p.logits, before.logits));
    EXPECT_TRUE(same_bits(p.losses, before.losses));
    EXPECT_TRUE(same_bits(p.lse, before.lse));
  }
}

TEST_P(CrossEntropyTest, InvalidViewsAreRejectedNamingTheOperand) {
  const Shape s{4, 20, 0, 20};
  Problem p = make(s, 6);
  CrossEntropyParams f = p.forward();
  f.vocab = 21;
  Status st = cross_entropy_forward(f, context());
  EXPECT_TRUE(st.is_invalid_argument());
  EXPECT_NE(st.message().find("vocab 21 is outside [1, 20]"), std::string::npos) << st.message();

  f = p.forward();
  f.lse = TensorView::f32(p.lse.data(), {3});
  st = cross_entropy_forward(f, context());
  EXPECT_TRUE(st.is_invalid_argument());
  EXPECT_NE(st.message().find("cross_entropy_forward: lse is f32[3] but must be f32[4]"),
            std::string::npos)
      << st.message();

  CrossEntropyBackwardParams b = p.backward();
  b.logits = TensorView::strided(p.logits.data(), DType::kF32, {4, 20}, {10, 1});
  st = cross_entropy_backward(b, context());
  EXPECT_TRUE(st.is_invalid_argument());
  EXPECT_NE(st.message().find("row stride of 10, less than its 20 columns"), std::string::npos)
      << st.message();

  b = p.backward();
  b.targets = TensorView::f32(p.losses.data(), {4});
  st = cross_entropy_backward(b, context());
  EXPECT_TRUE(st.is_invalid_argument());
  EXPECT_NE(st.message().find("cross_entropy_backward: targets is f32[4] but must be i32[4]"),
            std::string::npos)
      << st.message();
  for (float v : p.losses)
    EXPECT_TRUE(std::isnan(v));
}

}  // namespace
}  // namespace kiln::ops
