// ops-bench: times one kiln_ops op (forward, or forward + backward) on one shape, for
// `kiln ops-bench` and bench/ops/run, which puts the figures beside PyTorch's.
//
// The work one iteration must do is counted with the formulas of bench/ops/op_counts.py, so
// both sides of the comparison divide by the same numbers: matmul and attention in FLOPs
// (attention as FlashAttention-2's benchmarks count it, halved when causal), the memory-bound
// ops in bytes of f32 traffic (each tensor read or written once). An op counted in FLOPs has
// bytes 0 and the reverse.
//
// Private to kiln_ops; the CLI includes it directly.
#ifndef KILN_OPS_BENCH_OPS_BENCH_H_
#define KILN_OPS_BENCH_OPS_BENCH_H_

#include <kiln/base/result.h>
#include <kiln/ops/context.h>
#include <kiln/ops/tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kiln::ops {

struct OpsBenchSpec {
  std::string op;                        // matmul, attention, layernorm, gelu, cross_entropy, adamw
  std::map<std::string, int64_t> shape;  // the op's keys (ops_bench_shape_keys), each >= 1
  bool causal = false;                   // attention only
  bool backward = false;                 // forward + backward ("fwdbwd"); adamw ignores it
  int iters = 20;                        // timed iterations, >= 1
  int warmup = 3;                        // untimed iterations first
  // The inputs' dtype: kF32, or kBF16 for matmul (x, w and dy in bf16; outputs f32) and for
  // attention (q, k, v, dout in bf16; o, lse and the gradients f32).
  DType dtype = DType::kF32;
  // bf16 matmul only: w packed for the matrix units (pack_bf16_weights) inside each timed
  // iteration, before its forward, as a training step packs once per step.
  bool packed = false;
};

struct OpsBenchResult {
  double ms = 0;  // the median over the timed iterations of one iteration
  std::vector<double> samples_ms;
  int64_t flops = 0;
  int64_t bytes = 0;
};

// The ops ops-bench knows, and each one's shape keys in order ("M", "N", "K" for matmul).
const std::vector<std::string>& ops_bench_ops();
Result<std::vector<std::string>> ops_bench_shape_keys(const std::string& op);

// "B=1,H=12,T=1024,D=64" -> the shape of `op`: exactly its keys, each a decimal integer >= 1.
// kInvalidArgument naming the offending item otherwise.
Result<std::map<std::string, int64_t>> parse_ops_bench_shape(const std::string& op,
                                                             const std::string& text);

// The work one iteration does: {flops, bytes}, as described at the top.
Result<std::pair<int64_t, int64_t>> ops_bench_counts(const OpsBenchSpec& spec);

// Allocates the op's buffers (seeded random contents), runs warmup + iters iterations on `ctx`
// and returns the timing. kInvalidArgument for a bad spec, kUnavailable when the buffers cannot
// be allocated, and whatever the op returns.
Result<OpsBenchResult> run_ops_bench(const OpsBenchSpec& spec, const Context& ctx);

}  // namespace kiln::ops

#endif  // KILN_OPS_BENCH_OPS_BENCH_H_
