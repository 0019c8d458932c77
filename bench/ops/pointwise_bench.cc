// kiln_pointwise_bench: memory throughput of kiln_ops' point-wise and normalisation ops on
// training shapes (GPT-2 small, B x T = 2048 tokens), with a pool of 1 and of 2 threads, beside
// a STREAM triad measured in the same run.
//
//   kiln_pointwise_bench [FILTER]   only the ops whose name contains FILTER; the ISA is the
//                                   best this CPU has, or KILN_OPS_ISA
//
// Each op's figure counts the bytes it must move, reads plus writes, once each (a buffer read
// and written in place counts twice), divided by the best time of several calls. Before every
// timed call a buffer of twice the last-level cache is rewritten, so every call starts from
// DRAM the way STREAM's passes do (an op's 6-25 MiB would otherwise stay in the 32 MiB L3
// between calls and post figures no training step sees). The triad is counted the STREAM way:
// 24 bytes per element (two reads, one write; the write-allocate read is not counted).
//
// This bench has no peer: `kiln ops-bench` and bench/ops/run put these ops beside PyTorch.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <kiln/base/cpu.h>
#include <kiln/base/thread_pool.h>
#include <kiln/ops/context.h>
#include <kiln/ops/convert.h>
#include <kiln/ops/cross_entropy.h>
#include <kiln/ops/elementwise.h>
#include <kiln/ops/embedding.h>
#include <kiln/ops/norm.h>
#include <kiln/ops/optimizer.h>
#include <kiln/ops/tensor.h>

namespace {

using kiln::Status;
using kiln::ThreadPool;
using kiln::ops::Context;
using kiln::ops::DType;
using kiln::ops::TensorView;

// GPT-2 small, one micro-batch of B x T = 2 x 1024 tokens.
constexpr int64_t kB = 2;
constexpr int64_t kT = 1024;
constexpr int64_t kN = kB * kT;
constexpr int64_t kC = 768;
constexpr int64_t kVocab = 50257;
constexpr int64_t kPaddedVocab = 50304;  // llm.c's padding to a multiple of 128
// AdamW and the conversions: 16 Mi elements (GPT-2 small has 124M parameters; 16M keeps a run
// short and is still 4 x 64 MiB of optimizer state, far past the caches).
constexpr int64_t kParams = int64_t{1} << 24;

// Twice the 32 MiB L3 of the EPYC parts these VMs run on: rewriting it evicts everything else.
constexpr size_t kFlushBytes = size_t{64} << 20;
// Triad arrays: 128 MiB of doubles each, 4x the L3 (STREAM's rule).
constexpr size_t kTriadElements = (size_t{128} << 20) / sizeof(double);
constexpr double kTriadBytesPerElement = 3 * sizeof(double);
// Timed calls: at least kMinReps, more while the total stays under kBudgetSeconds.
constexpr int kMinReps = 5;
constexpr int kMaxReps = 50;
constexpr double kBudgetSeconds = 0.5;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Rewrites kFlushBytes, so the next call's operands come from DRAM.
void flush_caches(std::vector<uint8_t>& flush) {
  for (size_t i = 0; i < flush.size(); i += 64)
    flush[i] = static_cast<uint8_t>(flush[i] + 1);
}

// The best time of one call of `op`, each call after a flush; the first call is a warm-up that
// also faults the pages in. Returns a negative time if the op fails (a figure for a failing op
// means nothing).
double best_seconds(const std::function<Status()>& op, std::vector<uint8_t>& flush,
                    const char* name) {
  double best = 0;
  double total = 0;
  for (int rep = -1; rep < kMaxReps; ++rep) {
    flush_caches(flush);
    const auto start = std::chrono::steady_clock::now();
    const Status st = op();
    const double s = seconds_since(start);
    if (!st.ok()) {
      std::fprintf(stderr, "%s failed: %s\n", name, st.to_string().c_str());
      return -1;
    }
    if (rep < 0) continue;
    best = rep == 0 || s < best ? s : best;
    total += s;
    if (rep + 1 >= kMinReps && total > kBudgetSeconds) break;
  }
  return best;
}

// STREAM triad a = b + 3 c on doubles over the pool's threads, each on its own slice; 0 if the
// result is wrong.
double triad_gbps(ThreadPool& pool) {
  std::vector<double> a(kTriadElements), b(kTriadElements), c(kTriadElements);
  const int64_t tasks = pool.size();
  const auto slice = [&](int64_t task, auto&& fn) {
    const size_t begin = kTriadElements * static_cast<size_t>(task) / static_cast<size_t>(tasks);
    const size_t end = kTriadElements * static_cast<size_t>(task + 1) / static_cast<size_t>(tasks);
    fn(begin, end);
  };
  pool.parallel_for(tasks, [&](int64_t task, int) {
    slice(task, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) {
        b[i] = 2.0;
        c[i] = 1.0;
      }
    });
  });
  double best = 0;
  for (int pass = 0; pass < 10; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    pool.parallel_for(tasks, [&](int64_t task, int) {
      slice(task, [&](size_t begin, size_t end) {
        double* __restrict pa = a.data();
        const double* __restrict pb = b.data();
        const double* __restrict pc = c.data();
        for (size_t i = begin; i < end; ++i)
          pa[i] = pb[i] + 3.0 * pc[i];
      });
    });
    const double s = seconds_since(start);
    best = pass == 0 || s < best ? s : best;
  }
  for (double x : a) {
    if (x != 5.0) return 0;  // 2 + 3 x 1, exact in binary
  }
  return kTriadBytesPerElement * static_cast<double>(kTriadElements) / best / 1e9;
}

std::vector<float> random_floats(int64_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v)
    x = dist(rng);
  return v;
}

std::vector<int32_t> random_ids(int64_t n, int64_t bound, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(bound - 1));
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t& x : v)
    x = dist(rng);
  return v;
}

TensorView f32(std::vector<float>& v, std::initializer_list<int64_t> shape) {
  return TensorView::f32(v.data(), shape);
}

struct Case {
  std::string name;
  std::string shape;
  double bytes;  // moved per call
  std::function<Status(const Context&)> run;
};

// Every op on its training shape. The buffers live as long as the returned cases.
struct Buffers {
  // Norms, residual: (N, C).
  std::vector<float> x = random_floats(kN * kC, 1, -1, 1);
  std::vector<float> y = random_floats(kN * kC, 2, -1, 1);
  std::vector<float> dy = random_floats(kN * kC, 3, -1, 1);
  std::vector<float> dx = random_floats(kN * kC, 4, -1, 1);
  std::vector<float> weight = random_floats(kC, 5, -1, 1);
  std::vector<float> bias = random_floats(kC, 6, -1, 1);
  std::vector<float> dweight = std::vector<float>(kC);
  std::vector<float> dbias = std::vector<float>(kC);
  std::vector<float> mean = std::vector<float>(kN);
  std::vector<float> rstd = std::vector<float>(kN);
  // GELU: (N, 4C).
  std::vector<float> h = random_floats(kN * 4 * kC, 7, -4, 4);
  std::vector<float> gh = random_floats(kN * 4 * kC, 8, -1, 1);
  std::vector<float> dh = random_floats(kN * 4 * kC, 9, -1, 1);
  // Embedding.
  std::vector<int32_t> tokens = random_ids(kN, kVocab, 10);
  std::vector<float> wte = random_floats(kVocab * kC, 11, -1, 1);
  std::vector<float> wpe = random_floats(kT * kC, 12, -1, 1);
  // Cross-entropy: (N, Vp).
  std::vector<float> logits = random_floats(kN * kPaddedVocab, 13, -4, 4);
  std::vector<int32_t> targets = random_ids(kN, kVocab, 14);
  std::vector<float> losses = std::vector<float>(kN);
  std::vector<float> lse = std::vector<float>(kN);
  std::vector<float> dlosses = std::vector<float>(kN, 1.0f / kN);
  // AdamW, norm, conversions: kParams.
  std::vector<float> params = random_floats(kParams, 15, -1, 1);
  std::vector<float> grads = random_floats(kParams, 16, -1, 1);
  std::vector<float> m = random_floats(kParams, 17, -0.1f, 0.1f);
  std::vector<float> v = random_floats(kParams, 18, 0, 0.01f);
  std::vector<uint16_t> half = std::vector<uint16_t>(kParams);
};

std::vector<Case> make_cases(Buffers& b) {
  const double nc = static_cast<double>(kN * kC) * 4;
  const double nh = static_cast<double>(kN * 4 * kC) * 4;
  const double np = static_cast<double>(kParams);
  const std::string norm_shape = "N=2048 C=768";
  std::vector<Case> cases;
  cases.push_back({"layernorm_forward", norm_shape, 2 * nc, [&](const Context& ctx) {
                     return kiln::ops::layernorm_forward(
                         {f32(b.x, {kN, kC}), f32(b.weight, {kC}), f32(b.bias, {kC}),
                          f32(b.y, {kN, kC}), f32(b.mean, {kN}), f32(b.rstd, {kN})},
                         ctx);
                   }});
  cases.push_back({"layernorm_backward", norm_shape, 3 * nc, [&](const Context& ctx) {
                     return kiln::ops::layernorm_backward(
                         {f32(b.dy, {kN, kC}), f32(b.x, {kN, kC}), f32(b.weight, {kC}),
                          f32(b.mean, {kN}), f32(b.rstd, {kN}), f32(b.dx, {kN, kC}),
                          f32(b.dweight, {kC}), f32(b.dbias, {kC})},
                         ctx);
                   }});
  cases.push_back(
      {"rmsnorm_forward", norm_shape, 2 * nc, [&](const Context& ctx) {
         return kiln::ops::rmsnorm_forward(
             {f32(b.x, {kN, kC}), f32(b.weight, {kC}), f32(b.y, {kN, kC}), f32(b.rstd, {kN})}, ctx);
       }});
  cases.push_back({"rmsnorm_backward", norm_shape, 3 * nc, [&](const Context& ctx) {
                     return kiln::ops::rmsnorm_backward(
                         {f32(b.dy, {kN, kC}), f32(b.x, {kN, kC}), f32(b.weight, {kC}),
                          f32(b.rstd, {kN}), f32(b.dx, {kN, kC}), f32(b.dweight, {kC})},
                         ctx);
                   }});
  cases.push_back(
      {"gelu_forward", "N=2048x3072", 2 * nh, [&](const Context& ctx) {
         return kiln::ops::gelu_forward({f32(b.h, {kN, 4 * kC}), f32(b.gh, {kN, 4 * kC})}, ctx);
       }});
  cases.push_back({"gelu_backward", "N=2048x3072", 3 * nh, [&](const Context& ctx) {
                     return kiln::ops::gelu_backward(
                         {f32(b.h, {kN, 4 * kC}), f32(b.gh, {kN, 4 * kC}), f32(b.dh, {kN, 4 * kC})},
                         ctx);
                   }});
  cases.push_back({"residual_forward", norm_shape, 3 * nc, [&](const Context& ctx) {
                     return kiln::ops::residual_forward(
                         {f32(b.x, {kN, kC}), f32(b.dy, {kN, kC}), f32(b.y, {kN, kC})}, ctx);
                   }});
  cases.push_back({"residual_backward", norm_shape, 5 * nc, [&](const Context& ctx) {
                     return kiln::ops::residual_backward(
                         {f32(b.dy, {kN, kC}), f32(b.dx, {kN, kC}), f32(b.y, {kN, kC})}, ctx);
                   }});
  // Forward: a wte row and a wpe row read and a y row written per token. Backward: dy read,
  // a dwte row (tokens are nearly all distinct) and a dwpe row read and written per token.
  cases.push_back({"embedding_forward", "B=2 T=1024 C=768", 3 * nc, [&](const Context& ctx) {
                     return kiln::ops::embedding_forward(
                         {TensorView::i32(b.tokens.data(), {kB, kT}), f32(b.wte, {kVocab, kC}),
                          f32(b.wpe, {kT, kC}), f32(b.y, {kB, kT, kC})},
                         ctx);
                   }});
  cases.push_back({"embedding_backward", "B=2 T=1024 C=768", 5 * nc, [&](const Context& ctx) {
                     return kiln::ops::embedding_backward(
                         {TensorView::i32(b.tokens.data(), {kB, kT}), f32(b.dy, {kB, kT, kC}),
                          f32(b.wte, {kVocab, kC}), f32(b.wpe, {kT, kC})},
                         ctx);
                   }});
  const double logits_bytes = static_cast<double>(kN * kPaddedVocab) * 4;
  const double vocab_bytes = static_cast<double>(kN * kVocab) * 4;
  cases.push_back(
      {"cross_entropy_forward", "N=2048 V=50257/50304", vocab_bytes, [&](const Context& ctx) {
         return kiln::ops::cross_entropy_forward(
             {f32(b.logits, {kN, kPaddedVocab}), TensorView::i32(b.targets.data(), {kN}),
              f32(b.losses, {kN}), f32(b.lse, {kN}), kVocab},
             ctx);
       }});
  cases.push_back({"cross_entropy_backward", "N=2048 V=50257/50304", vocab_bytes + logits_bytes,
                   [&](const Context& ctx) {
                     return kiln::ops::cross_entropy_backward(
                         {f32(b.logits, {kN, kPaddedVocab}),
                          TensorView::i32(b.targets.data(), {kN}), f32(b.lse, {kN}),
                          f32(b.dlosses, {kN}), kVocab},
                         ctx);
                   }});
  // AdamW reads params, grads, m, v and writes params, m, v.
  cases.push_back({"adamw_update", "16M params", 28 * np, [&](const Context& ctx) {
                     kiln::ops::AdamWParams p;
                     p.params = f32(b.params, {kParams});
                     p.grads = f32(b.grads, {kParams});
                     p.m = f32(b.m, {kParams});
                     p.v = f32(b.v, {kParams});
                     p.weight_decay = 0.1f;
                     p.step = 10;
                     return kiln::ops::adamw_update(p, ctx);
                   }});
  cases.push_back({"global_grad_norm", "16M grads", 4 * np, [&](const Context& ctx) {
                     const kiln::Result<double> norm =
                         kiln::ops::global_grad_norm({f32(b.grads, {kParams})}, ctx);
                     return norm.status();
                   }});
  cases.push_back({"convert_f32_to_bf16", "16M", 6 * np, [&](const Context& ctx) {
                     return kiln::ops::convert_f32_to_bf16(
                         f32(b.params, {kParams}),
                         TensorView::of(b.half.data(), DType::kBF16, {kParams}), ctx);
                   }});
  cases.push_back({"convert_bf16_to_f32", "16M", 6 * np, [&](const Context& ctx) {
                     return kiln::ops::convert_bf16_to_f32(
                         TensorView::of(b.half.data(), DType::kBF16, {kParams}),
                         f32(b.grads, {kParams}), ctx);
                   }});
  return cases;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2) {
    std::fprintf(stderr, "usage: kiln_pointwise_bench [FILTER]\n");
    return 2;
  }
  const std::string filter = argc == 2 ? argv[1] : "";
  ThreadPool one(1);
  ThreadPool two(2);
  kiln::Result<Context> ctx1 = kiln::ops::make_cpu_context(&one);
  kiln::Result<Context> ctx2 = kiln::ops::make_cpu_context(&two);
  if (!ctx1.ok() || !ctx2.ok()) {
    std::fprintf(stderr, "kiln_pointwise_bench: %s\n", ctx1.status().to_string().c_str());
    return 2;
  }
  // The triad runs before and after the ops and the better figure counts: on a shared machine
  // a busy neighbour can only lower it, and a low triad would flatter the fractions.
  double triad1 = triad_gbps(one);
  double triad2 = triad_gbps(two);
  if (triad1 <= 0 || triad2 <= 0) {
    std::fprintf(stderr, "kiln_pointwise_bench: the triad computed a wrong result\n");
    return 1;
  }
  std::printf(
      "kiln_pointwise_bench: isa %s, every call from DRAM (%zu MiB rewritten before it), "
      "best of %d-%d calls\n\n",
      std::string(kiln::cpu_isa_name(ctx1->isa)).c_str(), kFlushBytes >> 20, kMinReps, kMaxReps);
  std::vector<uint8_t> flush(kFlushBytes, 1);
  Buffers buffers;
  struct Row {
    const Case* c;
    double s1;  // best seconds per call, 1 thread
    double s2;  // 2 threads
  };
  std::vector<Row> rows;
  const std::vector<Case> cases = make_cases(buffers);
  for (const Case& c : cases) {
    if (c.name.find(filter) == std::string::npos) continue;
    const double s1 = best_seconds([&] { return c.run(*ctx1); }, flush, c.name.c_str());
    const double s2 = best_seconds([&] { return c.run(*ctx2); }, flush, c.name.c_str());
    if (s1 < 0 || s2 < 0) return 1;
    rows.push_back({&c, s1, s2});
  }
  const double again1 = triad_gbps(one);
  const double again2 = triad_gbps(two);
  triad1 = again1 > triad1 ? again1 : triad1;
  triad2 = again2 > triad2 ? again2 : triad2;
  std::printf("STREAM triad (f64, 3 x %zu MiB): %.1f GB/s with 1 thread, %.1f GB/s with 2\n\n",
              kTriadElements * sizeof(double) >> 20, triad1, triad2);
  std::printf("%-24s %-22s %8s | %9s %7s %6s | %9s %7s %6s\n", "op", "shape", "MB/call", "1T ms",
              "GB/s", "triad", "2T ms", "GB/s", "triad");
  for (const Row& row : rows) {
    const Case& c = *row.c;
    const double g1 = c.bytes / row.s1 / 1e9;
    const double g2 = c.bytes / row.s2 / 1e9;
    std::printf("%-24s %-22s %8.1f | %9.3f %7.1f %5.0f%% | %9.3f %7.1f %5.0f%%\n", c.name.c_str(),
                c.shape.c_str(), c.bytes / 1e6, row.s1 * 1e3, g1, 100 * g1 / triad1, row.s2 * 1e3,
                g2, 100 * g2 / triad2);
  }
  return 0;
}
