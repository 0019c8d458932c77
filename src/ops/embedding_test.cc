// Tests of the token + position embedding on every ISA this CPU runs (the others skip,
// visibly): against the double-precision references on odd shapes (C around every vector width,
// T_max > T, repeated tokens), accumulation into existing gradients, identical results with 1
// and 2 threads, bad token ids, and validation errors that name the operand and leave every
// buffer untouched.
//
// Tolerances (error measure: max |got - want| / max(|want|, floor)):
//   forward: exact. y = wte[token] + wpe[t] is one fp32 addition, the reference's double sum
//     rounded once.
//   dwte, dwpe: 1e-5, floor 1. The kernel adds each position's row into the gradient in fp32,
//     in position order; the reference sums in double and rounds once. With k repeats of a
//     token the fp32 sum carries up to k roundings of partial sums of order sqrt(k) (k is 40
//     here). Measured: 1e-6.
#include <gtest/gtest.h>

#include <kiln/base/cpu.h>
#include <kiln/base/thread_pool.h>
#include <kiln/ops/context.h>
#include <kiln/ops/embedding.h>

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

using ref::testing::max_rel_err;
using ref::testing::uniform;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr double kGradTol = 1e-5;
constexpr double kGradFloor = 1.0;

bool cpu_has(CpuIsa isa) {
  return static_cast<int>(isa) <= static_cast<int>(detect_cpu_features().best_isa());
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Shape {
  int64_t B, T, V, C, T_max;
};

// C around every vector width and past the 64-channel task width; few tokens (many repeats) and
// many; T_max > T.
const Shape kShapes[] = {{1, 1, 1, 1, 1},       {2, 33, 5, 17, 40}, {4, 64, 50, 768, 64},
                         {3, 7, 1000, 100, 16}, {1, 5, 3, 4099, 8}, {4, 128, 13, 40, 200},
                         {2, 3, 4, 65, 3}};

std::string describe(const Shape& s) {
  return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " V=" + std::to_string(s.V) +
         " C=" + std::to_string(s.C) + " T_max=" + std::to_string(s.T_max);
}

std::vector<int32_t> random_tokens(const Shape& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(s.V - 1));
  std::vector<int32_t> tokens(static_cast<size_t>(s.B * s.T));
  for (int32_t& t : tokens)
    t = dist(rng);
  return tokens;
}

// Every buffer of one embedding call, with views.
struct Embedding {
  Shape s;
  std::vector<int32_t> tokens;
  std::vector<float> table;      // wte or dwte (V, C)
  std::vector<float> positions;  // wpe or dwpe (T_max, C)
  std::vector<float> rows;       // y or dy (B, T, C)

  TensorView tokens_view() { return TensorView::i32(tokens.data(), {s.B, s.T}); }
  TensorView table_view() { return TensorView::f32(table.data(), {s.V, s.C}); }
  TensorView positions_view() { return TensorView::f32(positions.data(), {s.T_max, s.C}); }
  TensorView rows_view() { return TensorView::f32(rows.data(), {s.B, s.T, s.C}); }
  EmbeddingParams forward() { return {tokens_view(), table_view(), positions_view(), rows_view()}; }
  EmbeddingBackwardParams backward() {
    return {tokens_view(), rows_view(), table_view(), positions_view()};
  }
};

Embedding make(const Shape& s, uint64_t seed, bool output_rows) {
  return {s, random_tokens(s, seed), uniform(static_cast<size_t>(s.V * s.C), seed + 1),
          uniform(static_cast<size_t>(s.T_max * s.C), seed + 2),
          output_rows ? std::vector<float>(static_cast<size_t>(s.B * s.T * s.C), kNan)
                      : uniform(static_cast<size_t>(s.B * s.T * s.C), seed + 3)};
}

class EmbeddingTest : public ::testing::TestWithParam<CpuIsa> {
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

INSTANTIATE_TEST_SUITE_P(Isa, EmbeddingTest,
                         ::testing::Values(CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512),
                         [](const ::testing::TestParamInfo<CpuIsa>& param_info) {
                           return std::string(cpu_isa_name(param_info.param));
                         });

TEST_P(EmbeddingTest, ForwardMatchesReferenceExactly) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    Embedding got = make(s, 1, true);
    Embedding want = got;
    ASSERT_TRUE(embedding_forward(got.forward(), context()).ok());
    ASSERT_TRUE(ref::embedding_forward(want.forward()).ok());
    EXPECT_TRUE(same_bits(got.rows, want.rows));
  }
}

TEST_P(EmbeddingTest, BackwardMatchesReferenceAndAccumulates) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    // The gradients start from random values: they accumulate.
    Embedding got = make(s, 2, false);
    Embedding want = got;
    ASSERT_TRUE(embedding_backward(got.backward(), context()).ok());
    ASSERT_TRUE(ref::embedding_backward(want.backward()).ok());
    EXPECT_LE(max_rel_err(got.table, want.table, kGradFloor), kGradTol);
    EXPECT_LE(max_rel_err(got.positions, want.positions, kGradFloor), kGradTol);
  }
}

TEST_P(EmbeddingTest, ResultsAreIdenticalWithOneAndTwoThreads) {
  const Shape s{4, 256, 50, 768, 256};  // 12 channel tasks; 20 repeats of each token
  ThreadPool pool(2);
  std::vector<Embedding> forward, backward;
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool, &pool}) {
    forward.push_back(make(s, 3, true));
    ASSERT_TRUE(embedding_forward(forward.back().forward(), context(p)).ok());
    backward.push_back(make(s, 4, false));
    ASSERT_TRUE(embedding_backward(backward.back().backward(), context(p)).ok());
  }
  for (size_t i = 1; i < forward.size(); ++i) {
    EXPECT_TRUE(same_bits(forward[i].rows, forward[0].rows));
    EXPECT_TRUE(same_bits(backward[i].table, backward[0].table));
    EXPECT_TRUE(same_bits(backward[i].positions, backward[0].positions));
  }
}

TEST_P(EmbeddingTest, TokenOutsideTheVocabularyIsRejectedNamingItsPositionAndNothingIsWritten) {
  const Shape s{2, 3, 7, 5, 3};
  for (int32_t bad : {7, -1}) {
    Embedding fwd = make(s, 5, true);
    fwd.tokens[5] = bad;  // b = 1, t = 2
    Status st = embedding_forward(fwd.forward(), context());
    EXPECT_TRUE(st.is_invalid_argument());
    EXPECT_NE(st.message().find("embedding_forward: tokens[1,2] = " + std::to_string(bad) +
                                " is outside the vocabulary [0, 7)"),
              std::string::npos)
        << st.message();
    for (float v : fwd.rows)
      EXPECT_TRUE(std::isnan(v));

    Embedding bwd = make(s, 6, false);
    bwd.tokens[5] = bad;
    const Embedding before = bwd;
    st = embedding_backward(bwd.backward(), context());
    EXPECT_TRUE(st.is_invalid_argument());
    EXPECT_NE(st.message().find("embedding_backward: tokens[1,2]"), std::string::npos)
        << st.message();
    EXPECT_TRUE(same_bits(bwd.table, before.table));
    EXPECT_TRUE(same_bits(bwd.positions, before.positions));
  }
}

TEST_P(EmbeddingTest, InvalidViewsAreRejectedNamingTheOperand) {
  const Shape s{2, 4, 7, 5, 3};  // T_max = 3 < T = 4
  Embedding e = make(s, 7, true);
  Status st = embedding_forward(e.forward(), context());
  EXPECT_TRUE(st.is_invalid_argument());
  EXPECT_NE(st.message().find("embedding_forward: wpe is f32[3,5] but must have at least T = 4"),
            std::string::npos)
      << st.message();

  const Shape ok{2, 4, 7, 5, 4};
  Embedding f = make(ok, 8, true);
  EmbeddingParams p = f.forward();
  p.y = TensorView::f32(f.rows.data(), {2, 4, 6});
  st = embedding_forward(p, context());
  EXPECT_TRUE(st.is_invalid_argument());
  EXPECT_NE(st.message().find("embedding_forward: y is f32[2,4,6] but must be f32[2,4,5]"),
            std::string::npos)
      << st.message();

  EmbeddingBackwardParams q = f.backward();
  q.tokens = TensorView::f32(f.rows.data(), {2, 4});
  st = embedding_backward(q, context());
  EXPECT_TRUE(st.is_invalid_argument());
  EXPECT_NE(st.message().find("embedding_backward: tokens is f32[2,4] but must be i32[*,*]"),
            std::string::npos)
      << st.message();
  for (float v : f.rows)
    EXPECT_TRUE(std::isnan(v));
}

}  // namespace
}  // namespace kiln::ops
