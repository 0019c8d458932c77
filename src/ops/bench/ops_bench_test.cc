// ops-bench's parsing and counting (what bench/ops/run compares with PyTorch's figures), and a
// tiny run of every op. No timing is asserted.
#include <kiln/ops/matmul.h>

#include "ops/bench/ops_bench.h"

#include <gtest/gtest.h>

#include <string>

namespace kiln::ops {
namespace {

TEST(OpsBenchTest, ParsesShapesInAnyOrder) {
  auto shape = parse_ops_bench_shape("attention", "T=1024,B=1,D=64,H=12");
  ASSERT_TRUE(shape.ok()) << shape.status().to_string();
  EXPECT_EQ(shape->at("B"), 1);
  EXPECT_EQ(shape->at("H"), 12);
  EXPECT_EQ(shape->at("T"), 1024);
  EXPECT_EQ(shape->at("D"), 64);
}

TEST(OpsBenchTest, RejectsBadShapesNamingTheItem) {
  struct Bad {
    std::string op, text, needle;
  };
  for (const Bad& bad : {
           Bad{"matmul", "M=1,N=2", "needs K"},
           Bad{"matmul", "M=1,N=2,K=3,Q=4", "no key 'Q'"},
           Bad{"matmul", "M=1,N=2,K=x", "'K=x' is not KEY=INTEGER"},
           Bad{"matmul", "M=1,N=2,K=0", "K=0 is not in 1..2^40"},
           Bad{"matmul", "M=1,M=2,N=2,K=3", "'M' given twice"},
           Bad{"gelu", "", "'' is not KEY=INTEGER"},
           Bad{"softmax", "N=1", "unknown op 'softmax'"},
       }) {
    auto shape = parse_ops_bench_shape(bad.op, bad.text);
    ASSERT_FALSE(shape.ok()) << bad.text;
    EXPECT_NE(shape.status().to_string().find(bad.needle), std::string::npos)
        << shape.status().to_string() << " should mention " << bad.needle;
  }
}

// The formulas of bench/ops/op_counts.py, worked by hand for the shapes of the benchmark table.
TEST(OpsBenchTest, CountsFollowTheSharedFormulas) {
  auto counts = [](const std::string& op, const std::string& shape, bool backward,
                   bool causal = false) {
    OpsBenchSpec spec;
    spec.op = op;
    spec.shape = *parse_ops_bench_shape(op, shape);
    spec.backward = backward;
    spec.causal = causal;
    return *ops_bench_counts(spec);
  };
  using Counts = std::pair<int64_t, int64_t>;
  // 4 * 1 * 12 * 1024^2 * 64 = 3221225472; x3.5 = 11274289152; causal halves.
  EXPECT_EQ(counts("attention", "B=1,H=12,T=1024,D=64", false, true), Counts(1610612736, 0));
  EXPECT_EQ(counts("attention", "B=1,H=12,T=1024,D=64", true, true), Counts(5637144576, 0));
  EXPECT_EQ(counts("attention", "B=1,H=12,T=1024,D=64", true, false), Counts(11274289152, 0));
  EXPECT_EQ(counts("matmul", "M=2048,N=768,K=768", false), Counts(2415919104, 0));
  EXPECT_EQ(counts("matmul", "M=2048,N=768,K=768", true), Counts(7247757312, 0));
  EXPECT_EQ(counts("layernorm", "N=2048,C=768", false), Counts(0, 12582912));
  EXPECT_EQ(counts("layernorm", "N=2048,C=768", true), Counts(0, 31457280));
  EXPECT_EQ(counts("gelu", "N=100", true), Counts(0, 2000));
  EXPECT_EQ(counts("cross_entropy", "N=2,V=10", true), Counts(0, 240));
  EXPECT_EQ(counts("adamw", "N=10", false), Counts(0, 280));
}

TEST(OpsBenchTest, RunsEveryOpOnATinyShape) {
  const Context ctx;  // scalar, no pool
  const std::pair<std::string, std::string> cases[] = {
      {"matmul", "M=5,N=6,K=7"}, {"attention", "B=1,H=2,T=9,D=8"}, {"layernorm", "N=3,C=10"},
      {"gelu", "N=33"},          {"cross_entropy", "N=4,V=11"},    {"adamw", "N=17"},
  };
  for (const auto& [op, shape] : cases) {
    for (bool backward : {false, true}) {
      OpsBenchSpec spec;
      spec.op = op;
      spec.shape = *parse_ops_bench_shape(op, shape);
      spec.backward = backward;
      spec.causal = true;
      spec.iters = 3;
      spec.warmup = 1;
      auto result = run_ops_bench(spec, ctx);
      ASSERT_TRUE(result.ok()) << op << ": " << result.status().to_string();
      EXPECT_EQ(result->samples_ms.size(), 3u) << op;
      EXPECT_GT(result->ms, 0.0) << op;
      EXPECT_GT(result->flops + result->bytes, 0) << op;
    }
  }
}

TEST(OpsBenchTest, RunsAPackedBf16MatmulAndRefusesPackingAnythingElse) {
  const Context ctx;
  OpsBenchSpec spec;
  spec.op = "matmul";
  spec.shape = *parse_ops_bench_shape("matmul", "M=130,N=40,K=24");
  spec.backward = true;
  spec.iters = 2;
  spec.warmup = 1;
  spec.packed = true;
  auto result = run_ops_bench(spec, ctx);  // f32 inputs
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().to_string().find("packed weights are for bf16 matmul only"),
            std::string::npos)
      << result.status().to_string();
  spec.dtype = DType::kBF16;
  result = run_ops_bench(spec, ctx);
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  EXPECT_EQ(result->samples_ms.size(), 2u);
  spec.op = "attention";
  spec.shape = *parse_ops_bench_shape("attention", "B=1,H=2,T=9,D=8");
  EXPECT_FALSE(run_ops_bench(spec, ctx).ok());
}

TEST(OpsBenchTest, RejectsZeroIterations) {
  OpsBenchSpec spec;
  spec.op = "gelu";
  spec.shape = {{"N", 4}};
  spec.iters = 0;
  EXPECT_FALSE(run_ops_bench(spec, Context()).ok());
}

}  // namespace
}  // namespace kiln::ops
