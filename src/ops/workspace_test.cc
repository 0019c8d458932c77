// Workspace (include/kiln/ops/context.h): the block's growth, alignment and reuse, and the promise
// to callers: every op that takes scratch gives bitwise the same results with a workspace in the
// Context as without one, whatever the workspace held before, and a repeated call stops growing
// it (so a training step allocates nothing after the first).
#include <kiln/base/thread_pool.h>
#include <kiln/ops/attention.h>
#include <kiln/ops/context.h>
#include <kiln/ops/norm.h>
#include <kiln/ops/optimizer.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "ops/ref/ref_test_util.h"

namespace kiln::ops {
namespace {

using ref::testing::uniform;

bool aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % kWorkspaceAlign == 0;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(WorkspaceTest, StartsEmptyAndContextsComeWithoutOne) {
  const Workspace ws;
  EXPECT_EQ(ws.capacity(), 0u);
  EXPECT_EQ(ws.allocations(), 0);
  Result<Context> ctx = make_cpu_context(nullptr);
  ASSERT_TRUE(ctx.ok());
  EXPECT_EQ(ctx->workspace, nullptr);
}

TEST(WorkspaceTest, GrowsOnlyWhenARequestExceedsItAndNeverShrinks) {
  Workspace ws;
  void* first = ws.reserve(100);
  ASSERT_NE(first, nullptr);
  EXPECT_TRUE(aligned(first));
  EXPECT_EQ(ws.capacity(), 128u);  // 100 rounded up to whole 64-byte lines
  EXPECT_EQ(ws.allocations(), 1);

  // Anything that fits is the same block, without an allocation.
  EXPECT_EQ(ws.reserve(1), first);
  EXPECT_EQ(ws.reserve(128), first);
  EXPECT_EQ(ws.reserve(0), first);
  EXPECT_EQ(ws.allocations(), 1);

  void* grown = ws.reserve(129);
  ASSERT_NE(grown, nullptr);
  EXPECT_TRUE(aligned(grown));
  EXPECT_EQ(ws.capacity(), 192u);
  EXPECT_EQ(ws.allocations(), 2);

  // A smaller request after growth keeps the larger block.
  EXPECT_EQ(ws.reserve(10), grown);
  EXPECT_EQ(ws.capacity(), 192u);
  EXPECT_EQ(ws.allocations(), 2);
}

TEST(WorkspaceTest, ZeroBytesStillGivesABlock) {
  Workspace ws;
  void* p = ws.reserve(0);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(aligned(p));
  EXPECT_EQ(ws.capacity(), kWorkspaceAlign);
}

TEST(WorkspaceTest, EveryByteOfTheBlockIsUsable) {
  Workspace ws;
  for (size_t bytes : {size_t{1}, size_t{4096}, size_t{1} << 20}) {
    auto* p = static_cast<unsigned char*>(ws.reserve(bytes));
    ASSERT_NE(p, nullptr) << bytes;
    ASSERT_GE(ws.capacity(), bytes);
    std::memset(p, 0xA5, ws.capacity());
    EXPECT_EQ(p[ws.capacity() - 1], 0xA5) << bytes;
  }
}

TEST(WorkspaceTest, AnImpossibleRequestIsNullAndLeavesItEmptyUntilTheNext) {
  Workspace ws;
  ASSERT_NE(ws.reserve(256), nullptr);
  EXPECT_EQ(ws.reserve(SIZE_MAX), nullptr);
  EXPECT_EQ(ws.capacity(), 0u);
  EXPECT_EQ(ws.allocations(), 1);
  void* again = ws.reserve(64);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(ws.capacity(), 64u);
  EXPECT_EQ(ws.allocations(), 2);
}

// The ops that take scratch, on every ISA of this CPU, with one and three threads.
class WorkspaceOpsTest : public ::testing::TestWithParam<std::tuple<CpuIsa, int>> {
 protected:
  void SetUp() override {
    const auto [isa, threads] = GetParam();
    bool supported = false;
    for (CpuIsa s : supported_isas())
      supported = supported || s == isa;
    if (!supported) GTEST_SKIP() << "this CPU lacks " << cpu_isa_name(isa);
    pool_ = std::make_unique<ThreadPool>(threads);
    plain_.isa = isa;
    plain_.pool = pool_.get();
    with_ws_ = plain_;
    with_ws_.workspace = &ws_;
    // Stale contents a kernel must not read: NaN in every float and double of a block larger
    // than any request below (TearDown checks that none grew it).
    void* stale = ws_.reserve(size_t{4} << 20);
    ASSERT_NE(stale, nullptr);
    std::memset(stale, 0xFF, ws_.capacity());
  }
  void TearDown() override {
    if (!IsSkipped()) {
      EXPECT_EQ(ws_.allocations(), 1) << "the stale block was replaced";
    }
  }

  std::unique_ptr<ThreadPool> pool_;
  Workspace ws_;
  Context plain_, with_ws_;
};

std::string param_name(const ::testing::TestParamInfo<std::tuple<CpuIsa, int>>& info) {
  return std::string(cpu_isa_name(std::get<0>(info.param))) + "_threads" +
         std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(IsaThreads, WorkspaceOpsTest,
                         ::testing::Combine(::testing::Values(CpuIsa::kScalar, CpuIsa::kAvx2,
                                                              CpuIsa::kAvx512),
                                            ::testing::Values(1, 3)),
                         param_name);

// One attention forward and backward's buffers, (B, T, H, D) contiguous.
struct AttentionShape {
  int64_t b, t, h, d;
};

struct Attention {
  Attention(const AttentionShape& shape, bool is_causal)
      : s(shape),
        causal(is_causal),
        q(uniform(static_cast<size_t>(s.b * s.t * s.h * s.d), 1)),
        k(uniform(q.size(), 2)),
        v(uniform(q.size(), 3)),
        dout(uniform(q.size(), 4)),
        o(q.size()),
        dq(q.size()),
        dk(q.size()),
        dv(q.size()),
        lse(static_cast<size_t>(s.b * s.h * s.t)) {}

  Status run(const Context& ctx) {
    const auto view = [&](std::vector<float>& x) {
      return TensorView::f32(x.data(), {s.b, s.t, s.h, s.d});
    };
    const TensorView lse_view = TensorView::f32(lse.data(), {s.b, s.h, s.t});
    AttentionParams f;
    f.q = view(q), f.k = view(k), f.v = view(v), f.o = view(o), f.lse = lse_view;
    f.causal = causal;
    KILN_RETURN_IF_ERROR(attention_forward(f, ctx));
    AttentionBackwardParams g;
    g.q = view(q), g.k = view(k), g.v = view(v), g.o = view(o), g.lse = lse_view;
    g.dout = view(dout), g.dq = view(dq), g.dk = view(dk), g.dv = view(dv);
    g.causal = causal;
    return attention_backward(g, ctx);
  }

  AttentionShape s;
  bool causal;
  std::vector<float> q, k, v, dout, o, dq, dk, dv, lse;
};

TEST_P(WorkspaceOpsTest, AttentionIsBitwiseTheSameWithAndWithoutAWorkspace) {
  // T and D off every block and vector width; more key blocks than threads (dq partials).
  for (bool causal : {true, false}) {
    Attention plain({2, 130, 3, 17}, causal), with_ws({2, 130, 3, 17}, causal);
    ASSERT_TRUE(plain.run(plain_).ok());
    ASSERT_TRUE(with_ws.run(with_ws_).ok());
    const std::string what = causal ? "causal" : "full";
    EXPECT_TRUE(bitwise_equal(plain.o, with_ws.o)) << what << " o";
    EXPECT_TRUE(bitwise_equal(plain.lse, with_ws.lse)) << what << " lse";
    EXPECT_TRUE(bitwise_equal(plain.dq, with_ws.dq)) << what << " dq";
    EXPECT_TRUE(bitwise_equal(plain.dk, with_ws.dk)) << what << " dk";
    EXPECT_TRUE(bitwise_equal(plain.dv, with_ws.dv)) << what << " dv";
  }
}

// One LayerNorm or RMSNorm backward's buffers: (N, C) with C odd and N * C large enough for
// several tasks (norm.cc splits at 64 Ki elements), so there are several partials to reduce.
struct Norm {
  static constexpr int64_t kN = 3000, kC = 67;
  std::vector<float> x = uniform(kN * kC, 1), dy = uniform(kN * kC, 2), w = uniform(kC, 3);
  std::vector<float> bias = uniform(kC, 4), y = std::vector<float>(kN * kC);
  std::vector<float> mean = std::vector<float>(kN), rstd = std::vector<float>(kN);
  std::vector<float> dx = std::vector<float>(kN * kC);
  std::vector<float> dw = uniform(kC, 5), db = uniform(kC, 6);  // accumulated into

  TensorView mat(std::vector<float>& v) { return TensorView::f32(v.data(), {kN, kC}); }
  TensorView vec(std::vector<float>& v) {
    return TensorView::f32(v.data(), {static_cast<int64_t>(v.size())});
  }

  Status layernorm(const Context& ctx) {
    LayerNormParams f;
    f.x = mat(x), f.weight = vec(w), f.bias = vec(bias), f.y = mat(y);
    f.mean = vec(mean), f.rstd = vec(rstd);
    KILN_RETURN_IF_ERROR(layernorm_forward(f, ctx));
    LayerNormBackwardParams g;
    g.dy = mat(dy), g.x = mat(x), g.weight = vec(w), g.mean = vec(mean), g.rstd = vec(rstd);
    g.dx = mat(dx), g.dweight = vec(dw), g.dbias = vec(db);
    return layernorm_backward(g, ctx);
  }

  Status rmsnorm(const Context& ctx) {
    RmsNormParams f;
    f.x = mat(x), f.weight = vec(w), f.y = mat(y), f.rstd = vec(rstd);
    KILN_RETURN_IF_ERROR(rmsnorm_forward(f, ctx));
    RmsNormBackwardParams g;
    g.dy = mat(dy), g.x = mat(x), g.weight = vec(w), g.rstd = vec(rstd);
    g.dx = mat(dx), g.dweight = vec(dw);
    return rmsnorm_backward(g, ctx);
  }
};

TEST_P(WorkspaceOpsTest, LayerNormBackwardIsBitwiseTheSameWithAndWithoutAWorkspace) {
  Norm plain, with_ws;
  ASSERT_TRUE(plain.layernorm(plain_).ok());
  ASSERT_TRUE(with_ws.layernorm(with_ws_).ok());
  EXPECT_TRUE(bitwise_equal(plain.dx, with_ws.dx));
  EXPECT_TRUE(bitwise_equal(plain.dw, with_ws.dw));
  EXPECT_TRUE(bitwise_equal(plain.db, with_ws.db));
}

TEST_P(WorkspaceOpsTest, RmsNormBackwardIsBitwiseTheSameWithAndWithoutAWorkspace) {
  Norm plain, with_ws;
  ASSERT_TRUE(plain.rmsnorm(plain_).ok());
  ASSERT_TRUE(with_ws.rmsnorm(with_ws_).ok());
  EXPECT_TRUE(bitwise_equal(plain.dx, with_ws.dx));
  EXPECT_TRUE(bitwise_equal(plain.dw, with_ws.dw));
}

// Buffers of several chunks (optimizer.cc's chunks are 64 Ki floats), one with a tail, one tiny.
std::vector<std::vector<float>> gradient_buffers() {
  return {uniform((size_t{3} << 16) + 17, 1), uniform(5, 2), uniform(size_t{1} << 16, 3)};
}

std::vector<TensorView> views_of(std::vector<std::vector<float>>& buffers) {
  std::vector<TensorView> views;
  for (std::vector<float>& b : buffers)
    views.push_back(TensorView::f32(b.data(), {static_cast<int64_t>(b.size())}));
  return views;
}

TEST_P(WorkspaceOpsTest, GlobalGradNormIsBitwiseTheSameWithAndWithoutAWorkspace) {
  std::vector<std::vector<float>> buffers = gradient_buffers();
  const std::vector<TensorView> grads = views_of(buffers);
  Result<double> plain = global_grad_norm(grads, plain_);
  Result<double> with_ws = global_grad_norm(grads, with_ws_);
  ASSERT_TRUE(plain.ok());
  ASSERT_TRUE(with_ws.ok());
  EXPECT_EQ(std::memcmp(&*plain, &*with_ws, sizeof(double)), 0) << *plain << " vs " << *with_ws;
  EXPECT_GT(*plain, 0.0);
}

// A loop of these ops over one workspace: the first round may grow it, later rounds do not,
// and the results do not change from round to round.
TEST_P(WorkspaceOpsTest, RepeatedCallsStopGrowingTheWorkspace) {
  Workspace fresh;
  Context ctx = plain_;
  ctx.workspace = &fresh;
  Attention att({1, 200, 4, 32}, true);
  Norm norm;
  std::vector<std::vector<float>> buffers = gradient_buffers();
  const std::vector<TensorView> grads = views_of(buffers);
  std::vector<float> first_dq;
  double first_norm = 0;
  int64_t after_first = 0;
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(att.run(ctx).ok());
    ASSERT_TRUE(norm.layernorm(ctx).ok());
    Result<double> n = global_grad_norm(grads, ctx);
    ASSERT_TRUE(n.ok());
    if (round == 0) {
      after_first = fresh.allocations();
      first_dq = att.dq;
      first_norm = *n;
      EXPECT_GE(after_first, 1);
      continue;
    }
    EXPECT_EQ(fresh.allocations(), after_first) << "round " << round;
    EXPECT_TRUE(bitwise_equal(att.dq, first_dq)) << "round " << round;
    EXPECT_EQ(*n, first_norm) << "round " << round;
  }
}

}  // namespace
}  // namespace kiln::ops
