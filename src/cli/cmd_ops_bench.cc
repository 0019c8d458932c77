// `kiln ops-bench --op OP --shape K=V,... [--causal] [--pass fwd|fwdbwd] [--threads T]
//                 [--iters N] [--warmup N] [--isa ISA] [--dtype f32|bf16] [--packed] [--json]`
// times one kiln_ops op on one shape (see src/ops/bench/ops_bench.h) and prints the median time
// of one iteration with the work it does; with --json one object:
//   {"op","shape","causal","pass","threads","isa","dtype","packed","kernel" (bf16),"iters","ms",
//    "flops","gflops","bytes","gbps"}
// bench/ops/run runs it beside PyTorch on the same shapes.
#include <kiln/base/cpu.h>
#include <kiln/base/thread_pool.h>
#include <kiln/ops/context.h>
#include <kiln/ops/matmul.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "cli/command.h"
#include "ops/bench/ops_bench.h"

namespace kiln::cli {
namespace {

constexpr int kThreadsMax = 1024;  // more is a typo, not a machine

struct OpsBenchOptions {
  std::string op;
  std::string shape;
  bool causal = false;
  std::string pass = "fwd";
  int threads = 1;
  int iters = 20;
  int warmup = 3;
  std::string isa;  // empty: KILN_OPS_ISA or the best this CPU runs
  std::string dtype = "f32";
  bool packed = false;
  bool json = false;
};

int run_ops_bench_command(const OpsBenchOptions& o) {
  ops::OpsBenchSpec spec;
  spec.op = o.op;
  Result<std::map<std::string, int64_t>> shape = ops::parse_ops_bench_shape(o.op, o.shape);
  if (!shape.ok()) return report_error("ops-bench", shape.status());
  spec.shape = *shape;
  spec.causal = o.causal;
  spec.backward = o.pass == "fwdbwd";
  spec.iters = o.iters;
  spec.warmup = o.warmup;
  spec.dtype = o.dtype == "bf16" ? ops::DType::kBF16 : ops::DType::kF32;
  spec.packed = o.packed;

  Result<std::unique_ptr<ThreadPool>> pool = ThreadPool::create(o.threads);
  if (!pool.ok()) return report_error("ops-bench", pool.status().with_context("--threads"));
  Result<ops::Context> ctx = ops::make_cpu_context(pool->get());
  if (!ctx.ok()) return report_error("ops-bench", ctx.status());
  if (!o.isa.empty()) {
    Result<CpuIsa> isa = parse_cpu_isa(o.isa);
    if (!isa.ok()) return report_error("ops-bench", isa.status().with_context("--isa"));
    ctx->isa = *isa;  // an ISA this CPU lacks is the op's kNotSupported
  }
  Result<ops::OpsBenchResult> result = ops::run_ops_bench(spec, *ctx);
  if (!result.ok()) return report_error("ops-bench", result.status());
  const double gflops = static_cast<double>(result->flops) / result->ms / 1e6;
  const double gbps = static_cast<double>(result->bytes) / result->ms / 1e6;
  if (o.json) {
    nlohmann::ordered_json out;
    out["op"] = o.op;
    out["shape"] = o.shape;
    out["causal"] = o.causal;
    out["pass"] = o.pass;
    out["threads"] = o.threads;
    out["isa"] = cpu_isa_name(ctx->isa);
    out["dtype"] = o.dtype;
    out["packed"] = o.packed;
    // bf16 products run on oneDNN's kernel at AVX-512, widened to f32 below it.
    if (o.dtype == "bf16") out["kernel"] = ops::bf16_matmul_kernel(ctx->isa);
    out["iters"] = o.iters;
    out["ms"] = result->ms;
    out["flops"] = result->flops;
    out["gflops"] = gflops;
    out["bytes"] = result->bytes;
    out["gbps"] = gbps;
    std::cout << out.dump() << "\n";
  } else {
    std::printf("%s %s%s %s %s%s threads=%d isa=%s: %.3f ms (median of %d)", o.op.c_str(),
                o.shape.c_str(), o.causal ? " causal" : "", o.pass.c_str(), o.dtype.c_str(),
                o.packed ? " packed" : "", o.threads, std::string(cpu_isa_name(ctx->isa)).c_str(),
                result->ms, o.iters);
    if (result->flops > 0) std::printf(", %.1f GFLOP/s", gflops);
    if (result->bytes > 0) std::printf(", %.1f GB/s", gbps);
    std::printf("\n");
  }
  return kExitOk;
}

}  // namespace

Command add_ops_bench_command(CLI::App& parent) {
  auto o = std::make_shared<OpsBenchOptions>();
  CLI::App* app = parent.add_subcommand("ops-bench", "Time one kiln_ops op on one shape");
  std::string ops_list;
  for (const std::string& op : ops::ops_bench_ops())
    ops_list += (ops_list.empty() ? "" : ", ") + op;
  app->add_option("--op", o->op, "the op: " + ops_list)->required();
  app->add_option("--shape", o->shape,
                  "K=V,... e.g. M=2048,N=768,K=768 (matmul), B=1,H=12,T=1024,D=64 (attention), "
                  "N=2048,C=768 (layernorm), N= (gelu, adamw), N=,V= (cross_entropy)")
      ->required();
  app->add_flag("--causal", o->causal, "causal attention");
  app->add_option("--dtype", o->dtype, "the inputs' dtype: f32, or bf16 (matmul, attention)")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  app->add_option("--pass", o->pass, "fwd or fwdbwd (forward + backward)")
      ->check(CLI::IsMember({"fwd", "fwdbwd"}))
      ->capture_default_str();
  app->add_option("--threads", o->threads, "threads of the op's pool")
      ->check(CLI::Range(1, kThreadsMax))
      ->capture_default_str();
  app->add_option("--iters", o->iters, "timed iterations")
      ->check(CLI::Range(1, 1'000'000))
      ->capture_default_str();
  app->add_option("--warmup", o->warmup, "untimed iterations first")
      ->check(CLI::Range(0, 1'000'000))
      ->capture_default_str();
  app->add_option("--isa", o->isa, "scalar, avx2 or avx512 (default: KILN_OPS_ISA or the best)");
  app->add_flag("--packed", o->packed,
                "bf16 matmul: w packed for the matrix units in each iteration, as a training "
                "step packs its weights");
  app->add_flag("--json", o->json, "print one JSON object");
  return {app, [o](const GlobalOptions&) { return run_ops_bench_command(*o); }};
}

}  // namespace kiln::cli
