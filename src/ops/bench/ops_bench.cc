// See ops_bench.h.
#include "ops/bench/ops_bench.h"

#include <kiln/base/clock.h>
#include <kiln/ops/attention.h>
#include <kiln/ops/cross_entropy.h>
#include <kiln/ops/elementwise.h>
#include <kiln/ops/matmul.h>
#include <kiln/ops/norm.h>
#include <kiln/ops/optimizer.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <utility>

namespace kiln::ops {
namespace {

// The largest value a shape key may take: far beyond any tensor a machine can hold, small
// enough that the counts below cannot overflow for sane shapes.
constexpr int64_t kShapeValueMax = int64_t{1} << 40;

struct OpInfo {
  std::string name;
  std::vector<std::string> keys;
};

const std::vector<OpInfo>& op_infos() {
  static const std::vector<OpInfo> infos = {
      {"matmul", {"M", "N", "K"}},   {"attention", {"B", "H", "T", "D"}},
      {"layernorm", {"N", "C"}},     {"gelu", {"N"}},
      {"cross_entropy", {"N", "V"}}, {"adamw", {"N"}},
  };
  return infos;
}

// Uniform values in [lo, hi) from a xorshift generator: fast enough for the gigabyte buffers of
// the cross-entropy case, and the same for the same seed.
std::vector<float> random_buffer(int64_t n, uint64_t seed, float lo, float hi) {
  std::vector<float> out(static_cast<size_t>(n));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& v : out) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v = lo + (hi - lo) * static_cast<float>(x >> 40) * (1.0f / 16777216.0f);
  }
  return out;
}

// One iteration of the benchmark: runs the op (and its backward) once.
using Iteration = std::function<Status()>;

// Builds the buffers of `spec` and the function running one iteration over them. The buffers
// live in `storage` until the timing is done.
struct Case {
  std::vector<std::vector<float>> f32;
  std::vector<std::vector<uint16_t>> bf16;
  std::vector<std::vector<int32_t>> i32;
  Iteration iteration;

  float* add(int64_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
    f32.push_back(random_buffer(n, seed, lo, hi));
    return f32.back().data();
  }
  // A random view of `dtype` with `shape` (numel n): f32, or the bf16 rounding of f32 values.
  TensorView add_view(DType dtype, int64_t n, uint64_t seed, std::initializer_list<int64_t> shape) {
    float* values = add(n, seed);
    if (dtype != DType::kBF16) return TensorView::of(values, DType::kF32, shape);
    bf16.emplace_back(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &values[i], sizeof(bits));
      bits += 0x7FFFu + ((bits >> 16) & 1u);  // round to nearest even (finite inputs)
      bf16.back()[static_cast<size_t>(i)] = static_cast<uint16_t>(bits >> 16);
    }
    return TensorView::of(bf16.back().data(), DType::kBF16, shape);
  }
};

Status build_matmul(const OpsBenchSpec& s, const Context& ctx, Case& c) {
  const int64_t m = s.shape.at("M"), n = s.shape.at("N"), k = s.shape.at("K");
  MatmulParams p;
  p.x = c.add_view(s.dtype, m * k, 1, {m, k});
  p.w = c.add_view(s.dtype, n * k, 2, {n, k});
  p.bias = TensorView::f32(c.add(n, 3), {n});
  p.y = TensorView::f32(c.add(m * n, 4), {m, n});
  MatmulBackwardParams b;
  b.dy = c.add_view(s.dtype, m * n, 5, {m, n});
  b.x = p.x, b.w = p.w;
  b.dx = TensorView::f32(c.add(m * k, 6), {m, k});
  b.dw = TensorView::f32(c.add(n * k, 7), {n, k});
  b.dbias = TensorView::f32(c.add(n, 8), {n});
  const bool backward = s.backward;
  if (!s.packed) {
    c.iteration = [p, b, backward, &ctx]() -> Status {
      KILN_RETURN_IF_ERROR(matmul_forward(p, ctx));
      return backward ? matmul_backward(b, ctx) : Status();
    };
    return Status();
  }
  // The packed copy outlives the iterations (shared_ptr: the iteration is copied around).
  auto w_packed = std::make_shared<PackedWeight>();
  c.iteration = [p, b, backward, w_packed, &ctx]() mutable -> Status {
    KILN_RETURN_IF_ERROR(pack_bf16_weights({&p.w, 1}, {w_packed.get(), 1}, ctx));
    p.w_packed = w_packed.get();
    b.w_packed = w_packed.get();
    KILN_RETURN_IF_ERROR(matmul_forward(p, ctx));
    return backward ? matmul_backward(b, ctx) : Status();
  };
  return Status();
}

Status build_attention(const OpsBenchSpec& s, const Context& ctx, Case& c) {
  const int64_t bs = s.shape.at("B"), h = s.shape.at("H"), t = s.shape.at("T");
  const int64_t d = s.shape.at("D");
  const int64_t n = bs * t * h * d;
  auto view = [&](uint64_t seed) { return TensorView::f32(c.add(n, seed), {bs, t, h, d}); };
  auto input = [&](uint64_t seed) { return c.add_view(s.dtype, n, seed, {bs, t, h, d}); };
  AttentionParams p;
  p.q = input(1), p.k = input(2), p.v = input(3), p.o = view(4);
  p.lse = TensorView::f32(c.add(bs * h * t, 5), {bs, h, t});
  p.causal = s.causal;
  AttentionBackwardParams b;
  b.q = p.q, b.k = p.k, b.v = p.v, b.o = p.o, b.lse = p.lse, b.causal = s.causal;
  if (s.backward) b.dout = input(6), b.dq = view(7), b.dk = view(8), b.dv = view(9);
  const bool backward = s.backward;
  c.iteration = [p, b, backward, &ctx]() -> Status {
    KILN_RETURN_IF_ERROR(attention_forward(p, ctx));
    return backward ? attention_backward(b, ctx) : Status();
  };
  return Status();
}

Status build_layernorm(const OpsBenchSpec& s, const Context& ctx, Case& c) {
  const int64_t n = s.shape.at("N"), ch = s.shape.at("C");
  LayerNormParams p;
  p.x = TensorView::f32(c.add(n * ch, 1), {n, ch});
  p.weight = TensorView::f32(c.add(ch, 2, 0.5f, 1.5f), {ch});
  p.bias = TensorView::f32(c.add(ch, 3), {ch});
  p.y = TensorView::f32(c.add(n * ch, 4), {n, ch});
  p.mean = TensorView::f32(c.add(n, 5), {n});
  p.rstd = TensorView::f32(c.add(n, 6), {n});
  LayerNormBackwardParams b;
  b.x = p.x, b.weight = p.weight, b.mean = p.mean, b.rstd = p.rstd;
  b.dy = TensorView::f32(c.add(n * ch, 7), {n, ch});
  b.dx = TensorView::f32(c.add(n * ch, 8), {n, ch});
  b.dweight = TensorView::f32(c.add(ch, 9), {ch});
  b.dbias = TensorView::f32(c.add(ch, 10), {ch});
  const bool backward = s.backward;
  c.iteration = [p, b, backward, &ctx]() -> Status {
    KILN_RETURN_IF_ERROR(layernorm_forward(p, ctx));
    return backward ? layernorm_backward(b, ctx) : Status();
  };
  return Status();
}

Status build_gelu(const OpsBenchSpec& s, const Context& ctx, Case& c) {
  const int64_t n = s.shape.at("N");
  GeluParams p;
  p.x = TensorView::f32(c.add(n, 1, -3.0f, 3.0f), {n});
  p.y = TensorView::f32(c.add(n, 2), {n});
  GeluBackwardParams b;
  b.x = p.x;
  b.dy = TensorView::f32(c.add(n, 3), {n});
  b.dx = TensorView::f32(c.add(n, 4), {n});
  const bool backward = s.backward;
  c.iteration = [p, b, backward, &ctx]() -> Status {
    KILN_RETURN_IF_ERROR(gelu_forward(p, ctx));
    return backward ? gelu_backward(b, ctx) : Status();
  };
  return Status();
}

Status build_cross_entropy(const OpsBenchSpec& s, const Context& ctx, Case& c) {
  const int64_t n = s.shape.at("N"), v = s.shape.at("V");
  c.i32.emplace_back(static_cast<size_t>(n));
  std::vector<int32_t>& targets = c.i32.back();
  for (int64_t i = 0; i < n; ++i)
    targets[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % v);
  CrossEntropyParams p;
  p.logits = TensorView::f32(c.add(n * v, 1, -4.0f, 4.0f), {n, v});
  p.targets = TensorView::i32(targets.data(), {n});
  p.losses = TensorView::f32(c.add(n, 2), {n});
  p.lse = TensorView::f32(c.add(n, 3), {n});
  CrossEntropyBackwardParams b;
  b.logits = p.logits, b.targets = p.targets, b.lse = p.lse;
  b.dlosses = TensorView::f32(c.add(n, 4, 1.0f / n, 1.0f / n), {n});
  // The backward writes the gradient over the logits (in place), so the next iteration's
  // forward reads gradients: the same amount of work on different numbers.
  const bool backward = s.backward;
  c.iteration = [p, b, backward, &ctx]() -> Status {
    KILN_RETURN_IF_ERROR(cross_entropy_forward(p, ctx));
    return backward ? cross_entropy_backward(b, ctx) : Status();
  };
  return Status();
}

Status build_adamw(const OpsBenchSpec& s, const Context& ctx, Case& c) {
  const int64_t n = s.shape.at("N");
  AdamWParams p;
  p.params = TensorView::f32(c.add(n, 1), {n});
  p.grads = TensorView::f32(c.add(n, 2), {n});
  p.m = TensorView::f32(c.add(n, 3), {n});
  p.v = TensorView::f32(c.add(n, 4, 0.0f, 1.0f), {n});
  p.lr = 3e-4f, p.beta1 = 0.9f, p.beta2 = 0.95f, p.weight_decay = 0.1f;
  auto step = std::make_shared<int64_t>(0);
  c.iteration = [p, step, &ctx]() mutable -> Status {
    p.step = ++*step;
    return adamw_update(p, ctx);
  };
  return Status();
}

Result<OpsBenchResult> time_case(const OpsBenchSpec& spec, const Case& c) {
  for (int i = 0; i < spec.warmup; ++i)
    KILN_RETURN_IF_ERROR(c.iteration());
  OpsBenchResult result;
  for (int i = 0; i < spec.iters; ++i) {
    const int64_t start = monotonic_now_ns();
    KILN_RETURN_IF_ERROR(c.iteration());
    result.samples_ms.push_back(static_cast<double>(monotonic_now_ns() - start) / 1e6);
  }
  std::vector<double> sorted = result.samples_ms;
  std::sort(sorted.begin(), sorted.end());
  const size_t mid = sorted.size() / 2;
  result.ms = sorted.size() % 2 == 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
  return result;
}

}  // namespace

const std::vector<std::string>& ops_bench_ops() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const OpInfo& info : op_infos())
      out.push_back(info.name);
    return out;
  }();
  return names;
}

Result<std::vector<std::string>> ops_bench_shape_keys(const std::string& op) {
  for (const OpInfo& info : op_infos()) {
    if (info.name == op) return info.keys;
  }
  std::string known;
  for (const OpInfo& info : op_infos())
    known += (known.empty() ? "" : ", ") + info.name;
  return Status::invalid_argument("unknown op '" + op + "' (known: " + known + ")");
}

Result<std::map<std::string, int64_t>> parse_ops_bench_shape(const std::string& op,
                                                             const std::string& text) {
  KILN_ASSIGN_OR_RETURN(std::vector<std::string> keys, ops_bench_shape_keys(op));
  std::map<std::string, int64_t> shape;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    const size_t eq = item.find('=');
    const std::string key = eq == std::string::npos ? item : item.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    const bool digits =
        !value.empty() && value.size() <= 13 &&
        std::all_of(value.begin(), value.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    if (!digits) {
      return Status::invalid_argument("--shape: '" + item + "' is not KEY=INTEGER");
    }
    const int64_t n = std::strtoll(value.c_str(), nullptr, 10);
    if (n < 1 || n > kShapeValueMax) {
      return Status::invalid_argument("--shape: " + key + "=" + value + " is not in 1..2^40");
    }
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      std::string want;
      for (const std::string& k : keys)
        want += (want.empty() ? "" : ",") + k;
      return Status::invalid_argument("--shape: " + op + " has no key '" + key +
                                      "' (its keys: " + want + ")");
    }
    if (!shape.emplace(key, n).second) {
      return Status::invalid_argument("--shape: '" + key + "' given twice");
    }
    pos = comma + 1;
  }
  for (const std::string& k : keys) {
    if (shape.count(k) == 0) return Status::invalid_argument("--shape: " + op + " needs " + k);
  }
  return shape;
}

Result<std::pair<int64_t, int64_t>> ops_bench_counts(const OpsBenchSpec& spec) {
  KILN_RETURN_IF_ERROR(ops_bench_shape_keys(spec.op).status());
  auto get = [&](const char* key) -> int64_t {
    const auto it = spec.shape.find(key);
    return it == spec.shape.end() ? 0 : it->second;
  };
  auto flops = [](int64_t n) { return std::pair<int64_t, int64_t>(n, 0); };
  auto bytes = [](int64_t n) { return std::pair<int64_t, int64_t>(0, n); };
  const bool bwd = spec.backward;
  if (spec.op == "matmul") return flops((bwd ? 6 : 2) * get("M") * get("N") * get("K"));
  if (spec.op == "attention") {
    int64_t n = 4 * get("B") * get("H") * get("T") * get("T") * get("D");
    if (bwd) n = n * 7 / 2;  // FlashAttention-2: the backward counts 2.5 forwards
    return flops(spec.causal ? n / 2 : n);
  }
  if (spec.op == "layernorm") return bytes((bwd ? 20 : 8) * get("N") * get("C"));
  if (spec.op == "gelu") return bytes((bwd ? 20 : 8) * get("N"));
  if (spec.op == "cross_entropy") return bytes((bwd ? 12 : 4) * get("N") * get("V"));
  return bytes(28 * get("N"));  // adamw: read p, g, m, v; write p, m, v
}

Result<OpsBenchResult> run_ops_bench(const OpsBenchSpec& spec, const Context& ctx) {
  KILN_ASSIGN_OR_RETURN(std::vector<std::string> keys, ops_bench_shape_keys(spec.op));
  for (const std::string& k : keys) {
    if (spec.shape.count(k) == 0 || spec.shape.at(k) < 1) {
      return Status::invalid_argument("ops-bench: " + spec.op + " needs " + k + " >= 1");
    }
  }
  if (spec.iters < 1 || spec.warmup < 0) {
    return Status::invalid_argument("ops-bench: iters must be >= 1 and warmup >= 0");
  }
  if (spec.dtype != DType::kF32 && spec.op != "matmul" && spec.op != "attention") {
    return Status::invalid_argument("ops-bench: " + spec.op + " takes f32 inputs only");
  }
  if (spec.packed && (spec.op != "matmul" || spec.dtype != DType::kBF16)) {
    return Status::invalid_argument("ops-bench: packed weights are for bf16 matmul only");
  }
  KILN_ASSIGN_OR_RETURN(auto counts, ops_bench_counts(spec));
  Case c;
  try {
    Status built;
    if (spec.op == "matmul") built = build_matmul(spec, ctx, c);
    if (spec.op == "attention") built = build_attention(spec, ctx, c);
    if (spec.op == "layernorm") built = build_layernorm(spec, ctx, c);
    if (spec.op == "gelu") built = build_gelu(spec, ctx, c);
    if (spec.op == "cross_entropy") built = build_cross_entropy(spec, ctx, c);
    if (spec.op == "adamw") built = build_adamw(spec, ctx, c);
    KILN_RETURN_IF_ERROR(built);
  } catch (const std::bad_alloc&) {
    return Status::unavailable("ops-bench: not enough memory for the buffers of " + spec.op);
  }
  KILN_ASSIGN_OR_RETURN(OpsBenchResult result, time_case(spec, c));
  result.flops = counts.first;
  result.bytes = counts.second;
  return result;
}

}  // namespace kiln::ops
