// Fused attention against the double-precision reference (src/ops/ref/attention_ref.cc) on every
// ISA this CPU runs, and the properties callers rely on: fused-qkv strides, causality, thread
// count independence of the forward, and errors naming the operand.
#include <kiln/base/thread_pool.h>
#include <kiln/ops/attention.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/ref/ref.h"
#include "ops/ref/ref_test_util.h"

namespace kiln::ops {
namespace {

using ref::testing::max_rel_err;
using ref::testing::uniform;

// Errors are |got - want| / max(|want|, floor) with the floor a fraction of the largest |want|
// of the buffer. f32 accumulation over T keys and D dims: measured at most 1.3e-4 (dq at
// D = 256, where each score is a 256-term dot product), 2e-5 for D <= 80.
constexpr double kTolerance = 5e-4;
constexpr double kFloorFraction = 1e-2;

double buffer_err(const std::vector<float>& got, const std::vector<float>& want) {
  double scale = 0;
  for (float w : want)
    scale = std::max(scale, static_cast<double>(std::fabs(w)));
  return max_rel_err(got, want, std::max(kFloorFraction * scale, 1e-30));
}

struct Shape {
  int64_t b, t, h, d;
  int64_t numel() const { return b * t * h * d; }
};

std::string describe(const Shape& s, bool causal, CpuIsa isa, int threads) {
  return "B=" + std::to_string(s.b) + " T=" + std::to_string(s.t) + " H=" + std::to_string(s.h) +
         " D=" + std::to_string(s.d) + (causal ? " causal" : " full") +
         " isa=" + std::string(cpu_isa_name(isa)) + " threads=" + std::to_string(threads);
}

// Every buffer of one forward + backward, contiguous (B, T, H, D).
struct Buffers {
  explicit Buffers(const Shape& s, uint64_t seed)
      : q(uniform(s.numel(), seed)),
        k(uniform(s.numel(), seed + 1)),
        v(uniform(s.numel(), seed + 2)),
        dout(uniform(s.numel(), seed + 3)),
        o(s.numel()),
        dq(s.numel()),
        dk(s.numel()),
        dv(s.numel()),
        lse(s.b * s.h * s.t) {
    // A view with a null pointer is absent; empty shapes still get an address.
    for (auto* x : {&q, &k, &v, &dout, &o, &dq, &dk, &dv, &lse})
      x->reserve(1);
  }
  std::vector<float> q, k, v, dout, o, dq, dk, dv, lse;

  TensorView view(std::vector<float>& x, const Shape& s) {
    return TensorView::f32(x.data(), {s.b, s.t, s.h, s.d});
  }
  AttentionParams forward(const Shape& s, bool causal, float scale) {
    AttentionParams p;
    p.q = view(q, s), p.k = view(k, s), p.v = view(v, s), p.o = view(o, s);
    p.lse = TensorView::f32(lse.data(), {s.b, s.h, s.t});
    p.causal = causal;
    p.scale = scale;
    return p;
  }
  AttentionBackwardParams backward(const Shape& s, bool causal, float scale) {
    AttentionBackwardParams p;
    p.q = view(q, s), p.k = view(k, s), p.v = view(v, s), p.o = view(o, s);
    p.lse = TensorView::f32(lse.data(), {s.b, s.h, s.t});
    p.dout = view(dout, s), p.dq = view(dq, s), p.dk = view(dk, s), p.dv = view(dv, s);
    p.causal = causal;
    p.scale = scale;
    return p;
  }
};

Context cpu_context(CpuIsa isa, ThreadPool* pool) {
  Context ctx;
  ctx.isa = isa;
  ctx.pool = pool;
  return ctx;
}

// Shapes chosen to cover: one element; T, D not multiples of any block or vector width; D at
// its maximum; more key blocks than threads (splits of the backward); several batches and
// heads.
const Shape kShapes[] = {{1, 1, 1, 1},    {2, 5, 3, 8},    {1, 67, 2, 64}, {2, 130, 3, 17},
                         {1, 40, 1, 256}, {1, 300, 1, 80}, {1, 200, 4, 32}};

TEST(AttentionTest, MatchesReferenceOnEveryIsa) {
  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    for (CpuIsa isa : supported_isas()) {
      const Context ctx = cpu_context(isa, &pool);
      for (const Shape& s : kShapes) {
        for (bool causal : {true, false}) {
          const std::string what = describe(s, causal, isa, threads);
          Buffers got(s, 7), want(s, 7);
          ASSERT_TRUE(attention_forward(got.forward(s, causal, 0), ctx).ok()) << what;
          ASSERT_TRUE(ref::attention_forward(want.forward(s, causal, 0)).ok()) << what;
          ASSERT_TRUE(attention_backward(got.backward(s, causal, 0), ctx).ok()) << what;
          ASSERT_TRUE(ref::attention_backward(want.backward(s, causal, 0)).ok()) << what;
          EXPECT_LE(buffer_err(got.o, want.o), kTolerance) << what << " o";
          EXPECT_LE(buffer_err(got.lse, want.lse), kTolerance) << what << " lse";
          EXPECT_LE(buffer_err(got.dq, want.dq), kTolerance) << what << " dq";
          EXPECT_LE(buffer_err(got.dk, want.dk), kTolerance) << what << " dk";
          EXPECT_LE(buffer_err(got.dv, want.dv), kTolerance) << what << " dv";
        }
      }
    }
  }
}

TEST(AttentionTest, ExplicitScaleIsUsed) {
  const Shape s{1, 70, 2, 24};
  ThreadPool pool(2);
  const Context ctx = cpu_context(supported_isas().back(), &pool);
  Buffers got(s, 11), want(s, 11);
  ASSERT_TRUE(attention_forward(got.forward(s, true, 0.7f), ctx).ok());
  ASSERT_TRUE(ref::attention_forward(want.forward(s, true, 0.7f)).ok());
  ASSERT_TRUE(attention_backward(got.backward(s, true, 0.7f), ctx).ok());
  ASSERT_TRUE(ref::attention_backward(want.backward(s, true, 0.7f)).ok());
  EXPECT_LE(buffer_err(got.o, want.o), kTolerance);
  EXPECT_LE(buffer_err(got.dq, want.dq), kTolerance);
  EXPECT_LE(buffer_err(got.dk, want.dk), kTolerance);
}

// The q, k and v thirds of a fused projection, (B, T, 3, H, D), used in place, with o, dout
// and the gradients in buffers wider than (B, T, H, D): the same numbers as contiguous copies.
TEST(AttentionTest, FusedQkvStridesGiveTheSameResultAsContiguousCopies) {
  const Shape s{2, 77, 3, 40};
  const int64_t pad = 5;  // extra floats per token in the o / gradient buffers
  ThreadPool pool(2);
  for (CpuIsa isa : supported_isas()) {
    const Context ctx = cpu_context(isa, &pool);
    Buffers flat(s, 3);
    ASSERT_TRUE(attention_forward(flat.forward(s, true, 0), ctx).ok());
    ASSERT_TRUE(attention_backward(flat.backward(s, true, 0), ctx).ok());

    const int64_t hd = s.h * s.d;
    std::vector<float> qkv(s.b * s.t * 3 * hd);
    for (int64_t bt = 0; bt < s.b * s.t; ++bt) {
      for (int64_t i = 0; i < hd; ++i) {
        qkv[(bt * 3 + 0) * hd + i] = flat.q[bt * hd + i];
        qkv[(bt * 3 + 1) * hd + i] = flat.k[bt * hd + i];
        qkv[(bt * 3 + 2) * hd + i] = flat.v[bt * hd + i];
      }
    }
    const int64_t wide = hd + pad;
    std::vector<float> o(s.b * s.t * wide, -7.0f), dout(s.b * s.t * wide, -7.0f);
    std::vector<float> dq(o), dk(o), dv(o);
    for (int64_t bt = 0; bt < s.b * s.t; ++bt) {
      for (int64_t i = 0; i < hd; ++i)
        dout[bt * wide + i] = flat.dout[bt * hd + i];
    }
    auto qkv_view = [&](int which) {
      return TensorView::strided(qkv.data() + which * hd, DType::kF32, {s.b, s.t, s.h, s.d},
                                 {s.t * 3 * hd, 3 * hd, s.d, 1});
    };
    auto wide_view = [&](std::vector<float>& x) {
      return TensorView::strided(x.data(), DType::kF32, {s.b, s.t, s.h, s.d},
                                 {s.t * wide, wide, s.d, 1});
    };
    std::vector<float> lse(s.b * s.h * s.t);
    AttentionParams p;
    p.q = qkv_view(0), p.k = qkv_view(1), p.v = qkv_view(2), p.o = wide_view(o);
    p.lse = TensorView::f32(lse.data(), {s.b, s.h, s.t});
    ASSERT_TRUE(attention_forward(p, ctx).ok());
    AttentionBackwardParams bp;
    bp.q = p.q, bp.k = p.k, bp.v = p.v, bp.o = p.o, bp.lse = p.lse;
    bp.dout = wide_view(dout), bp.dq = wide_view(dq), bp.dk = wide_view(dk);
    bp.dv = wide_view(dv);
    ASSERT_TRUE(attention_backward(bp, ctx).ok());

    EXPECT_EQ(lse, flat.lse) << cpu_isa_name(isa);
    for (int64_t bt = 0; bt < s.b * s.t; ++bt) {
      for (int64_t i = 0; i < wide; ++i) {
        const bool in = i < hd;
        const size_t at = bt * wide + i;
        ASSERT_EQ(o[at], in ? flat.o[bt * hd + i] : -7.0f) << "o " << bt << "," << i;
        ASSERT_EQ(dq[at], in ? flat.dq[bt * hd + i] : -7.0f) << "dq " << bt << "," << i;
        ASSERT_EQ(dk[at], in ? flat.dk[bt * hd + i] : -7.0f) << "dk " << bt << "," << i;
        ASSERT_EQ(dv[at], in ? flat.dv[bt * hd + i] : -7.0f) << "dv " << bt << "," << i;
      }
    }
  }
}

// A causal query never sees later keys: changing the keys and values at and after position
// `cut` leaves every output before `cut` bit for bit the same.
TEST(AttentionTest, CausalOutputsIgnoreLaterTokens) {
  const Shape s{1, 150, 2, 32};
  const int64_t cut = 97;
  ThreadPool pool(2);
  for (CpuIsa isa : supported_isas()) {
    const Context ctx = cpu_context(isa, &pool);
    Buffers a(s, 5), b(s, 5);
    const int64_t from = cut * s.h * s.d;
    for (int64_t i = from; i < s.numel(); ++i) {
      b.k[i] += 3.0f;
      b.v[i] = -b.v[i];
    }
    ASSERT_TRUE(attention_forward(a.forward(s, true, 0), ctx).ok());
    ASSERT_TRUE(attention_forward(b.forward(s, true, 0), ctx).ok());
    for (int64_t i = 0; i < from; ++i)
      ASSERT_EQ(a.o[i], b.o[i]) << cpu_isa_name(isa) << " element " << i;
    bool later_changed = false;
    for (int64_t i = from; i < s.numel(); ++i)
      later_changed |= a.o[i] != b.o[i];
    EXPECT_TRUE(later_changed);
  }
}

// Each query block is computed by one task, whatever the pool size: the forward is bit for bit
// the same on 1, 2 and 5 threads. (The backward splits the dq sum by the thread count, so it
// agrees to rounding only; MatchesReferenceOnEveryIsa covers it on 1 and 3.)
TEST(AttentionTest, ForwardDoesNotDependOnThreadCount) {
  const Shape s{2, 260, 3, 64};
  std::vector<float> first_o, first_lse;
  for (int threads : {1, 2, 5}) {
    ThreadPool pool(threads);
    Buffers x(s, 9);
    ASSERT_TRUE(
        attention_forward(x.forward(s, true, 0), cpu_context(supported_isas().back(), &pool)).ok());
    if (first_o.empty()) {
      first_o = x.o, first_lse = x.lse;
      continue;
    }
    EXPECT_EQ(x.o, first_o) << threads << " threads";
    EXPECT_EQ(x.lse, first_lse) << threads << " threads";
  }
}

TEST(AttentionTest, EmptyBatchOrSequenceIsANoOp) {
  for (const Shape& s : {Shape{0, 4, 2, 8}, Shape{2, 0, 2, 8}}) {
    Buffers x(s, 1);
    EXPECT_TRUE(
        attention_forward(x.forward(s, true, 0), cpu_context(CpuIsa::kScalar, nullptr)).ok());
    EXPECT_TRUE(
        attention_backward(x.backward(s, true, 0), cpu_context(CpuIsa::kScalar, nullptr)).ok());
  }
}

void expect_error_mentions(const Status& status, const std::string& needle) {
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.to_string().find(needle), std::string::npos)
      << "'" << status.to_string() << "' should mention '" << needle << "'";
}

TEST(AttentionTest, BadOperandsAreRejectedByName) {
  const Shape s{1, 8, 2, 16};
  const Context ctx = cpu_context(CpuIsa::kScalar, nullptr);
  Buffers x(s, 1);
  {
    AttentionParams p = x.forward(s, true, 0);
    p.k = TensorView::f32(x.k.data(), {1, 8, 2, 8});
    expect_error_mentions(attention_forward(p, ctx), "attention_forward: k is f32[1,8,2,8]");
  }
  {
    AttentionParams p = x.forward(s, true, 0);
    p.lse = TensorView::f32(x.lse.data(), {1, 8, 2});  // (B, T, H) instead of (B, H, T)
    expect_error_mentions(attention_forward(p, ctx), "lse");
  }
  {
    AttentionParams p = x.forward(s, true, 0);
    p.v = TensorView::strided(x.v.data(), DType::kF32, {1, 8, 2, 16}, {256, 32, 1, 2});
    expect_error_mentions(attention_forward(p, ctx), "v (");
  }
  {
    std::vector<float> big(1 * 2 * 1 * 300);
    AttentionParams p;
    p.q = p.k = p.v = p.o = TensorView::f32(big.data(), {1, 2, 1, 300});
    p.lse = TensorView::f32(x.lse.data(), {1, 1, 2});
    expect_error_mentions(attention_forward(p, ctx), "head dimension 300");
  }
  {
    AttentionParams p = x.forward(s, true, -1.0f);
    expect_error_mentions(attention_forward(p, ctx), "scale");
  }
  {
    AttentionBackwardParams p = x.backward(s, true, 0);
    p.dv = TensorView();
    expect_error_mentions(attention_backward(p, ctx), "attention_backward: dv is missing");
  }
  {
    AttentionBackwardParams p = x.backward(s, true, 0);
    std::vector<int32_t> ids(s.numel());
    p.dout = TensorView::i32(ids.data(), {s.b, s.t, s.h, s.d});
    expect_error_mentions(attention_backward(p, ctx), "dout is i32");
  }
}

}  // namespace
}  // namespace kiln::ops
