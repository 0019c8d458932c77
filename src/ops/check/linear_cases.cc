// ops-check cases of matmul and attention (see ops_check.h).
//
// Matmul: batch 1, odd sizes, strided views (rows slices of wider buffers, as the header
// allows), with and without a bias, dx overwritten, accumulated or absent. Inputs are scaled so
// every output is of order one: x and dy in [-1, 1], w in [-1, 1] / sqrt(K). The bf16 cases
// ("bf16" in the shape) hand the function under test bf16 copies of x, w and dy, and the
// reference the same values widened to f32: a bf16 product is exact in f32 and oneDNN sums in
// f32, so the f32 tolerance holds (ops_check.cc says why that is the right bar).
//
// Attention: D in {32, 64, 80, 128}, T in {1, 67, 200} (not multiples of a 64-key tile), causal
// and not, the default scale and an explicit one, q/k/v contiguous or the thirds of one fused
// (B, T, 3, H, D) buffer. q and k are in [-2, 2], so the scaled scores have a standard deviation
// of about 1.3 whatever D is, and the softmax is neither flat nor one-hot. The backward's o and
// lse are the reference forward's.
#include <cmath>
#include <string>

#include "ops/check/check_case.h"
#include "ops/ref/ref.h"

namespace kiln::ops::check {
namespace {

struct MatmulShape {
  int64_t M, K, N;
  bool strided;  // every view's rows lie a few elements apart (a slice of a wider buffer)
  bool bias;
  enum class Dx { kOverwrite, kAccumulate, kAbsent } dx;
  bool bf16 = false;  // x, w, dy in bf16 for the function under test
};

// `values` rounded to bf16 (the reference's rounding; NaN gaps stay NaN).
std::vector<uint16_t> to_bf16(const std::vector<float>& values) {
  std::vector<uint16_t> out(values.size());
  const auto n = static_cast<int64_t>(values.size());
  KILN_CHECK(ref::convert_f32_to_bf16(TensorView::f32(const_cast<float*>(values.data()), {n}),
                                      TensorView::of(out.data(), DType::kBF16, {n}))
                 .ok());
  return out;
}
std::vector<float> to_f32(const std::vector<uint16_t>& values) {
  std::vector<float> out(values.size());
  const auto n = static_cast<int64_t>(values.size());
  KILN_CHECK(ref::convert_bf16_to_f32(
                 TensorView::of(const_cast<uint16_t*>(values.data()), DType::kBF16, {n}),
                 TensorView::f32(out.data(), {n}))
                 .ok());
  return out;
}

// An input of a matmul case: its f32 buffer (bf16-exact values in a bf16 case) and, in a bf16
// case, the bf16 copy the function under test reads.
struct MatmulInput {
  int f32 = -1;
  int bf16 = -1;
};
MatmulInput add_input(Buffers& buffers, const std::string& name, std::vector<float> values,
                      bool bf16) {
  MatmulInput in;
  if (!bf16) {
    in.f32 = buffers.add_f32(name, std::move(values));
    return in;
  }
  std::vector<uint16_t> rounded = to_bf16(values);
  in.f32 = buffers.add_f32(name, to_f32(rounded));
  in.bf16 = buffers.add_bf16(name + "_bf16", std::move(rounded));
  return in;
}
TensorView input_view(Buffers& b, const MatmulInput& in, bool for_op,
                      std::initializer_list<int64_t> shape, std::initializer_list<int64_t> stride) {
  return b.strided(for_op && in.bf16 >= 0 ? in.bf16 : in.f32, 0, shape, stride);
}

// Sets c.run_ref and c.run_op to call `ref` and `op` with params(b, for_op): the reference
// always on the f32 inputs, the function under test on the bf16 copies in a bf16 case.
template <typename Params, typename MakeParams>
void bind_inputs(Case& c, MakeParams params, Status (*ref)(const Params&),
                 Status (*op)(const Params&, const Context&)) {
  c.run_ref = [params, ref](Buffers& b) { return ref(params(b, false)); };
  if (op != nullptr) {
    c.run_op = [params, op](Buffers& b, const Context& ctx) { return op(params(b, true), ctx); };
  }
}

// Row stride of a view with `cols` columns: `cols` when contiguous, else a few more.
int64_t row_stride(const MatmulShape& s, int64_t cols) {
  constexpr int64_t kGap = 3;  // odd, so rows are not vector-aligned either
  return s.strided ? cols + kGap : cols;
}

std::string describe(const MatmulShape& s) {
  std::string out = "M=" + std::to_string(s.M) + " K=" + std::to_string(s.K) +
                    " N=" + std::to_string(s.N) + (s.bias ? " bias" : " no-bias");
  if (s.strided) out += " strided";
  if (s.bf16) out += " bf16";
  return out;
}

Case matmul_forward_case(const OpTable& ops, const MatmulShape& s, uint64_t seed) {
  Case c;
  c.op = "matmul_forward";
  c.shape = describe(s);
  Rng rng(seed);
  const int64_t ldx = row_stride(s, s.K), ldw = row_stride(s, s.K), ldy = row_stride(s, s.N);
  const float w_scale = 1.0f / std::sqrt(static_cast<float>(s.K));
  const MatmulInput x = add_input(c.buffers, "x", rng.uniform_rows(s.M, s.K, ldx, -1, 1), s.bf16);
  const MatmulInput w =
      add_input(c.buffers, "w", rng.uniform_rows(s.N, s.K, ldw, -w_scale, w_scale), s.bf16);
  const int bias = s.bias ? c.buffers.add_f32("bias", rng.uniform(s.N, -1, 1)) : -1;
  const int y = c.buffers.add_f32("y", nans((s.M - 1) * ldy + s.N));
  auto params = [=](Buffers& b, bool for_op) {
    MatmulParams p;
    p.x = input_view(b, x, for_op, {s.M, s.K}, {ldx, 1});
    p.w = input_view(b, w, for_op, {s.N, s.K}, {ldw, 1});
    if (bias >= 0) p.bias = b.view(bias, {s.N});
    p.y = b.strided(y, 0, {s.M, s.N}, {ldy, 1});
    return p;
  };
  bind_inputs(c, params, &ref::matmul_forward, ops.matmul_forward);
  return c;
}

Case matmul_backward_case(const OpTable& ops, const MatmulShape& s, uint64_t seed) {
  Case c;
  c.op = "matmul_backward";
  c.shape = describe(s) + (s.dx == MatmulShape::Dx::kOverwrite    ? " dx"
                           : s.dx == MatmulShape::Dx::kAccumulate ? " dx+="
                                                                  : " no-dx");
  Rng rng(seed);
  const int64_t ldx = row_stride(s, s.K), ldw = row_stride(s, s.K), ldy = row_stride(s, s.N);
  const float w_scale = 1.0f / std::sqrt(static_cast<float>(s.K));
  const MatmulInput dy = add_input(c.buffers, "dy", rng.uniform_rows(s.M, s.N, ldy, -1, 1), s.bf16);
  const MatmulInput x = add_input(c.buffers, "x", rng.uniform_rows(s.M, s.K, ldx, -1, 1), s.bf16);
  const MatmulInput w =
      add_input(c.buffers, "w", rng.uniform_rows(s.N, s.K, ldw, -w_scale, w_scale), s.bf16);
  int dx = -1;
  if (s.dx == MatmulShape::Dx::kOverwrite) {
    dx = c.buffers.add_f32("dx", nans((s.M - 1) * ldx + s.K));
  } else if (s.dx == MatmulShape::Dx::kAccumulate) {
    dx = c.buffers.add_f32("dx", rng.uniform_rows(s.M, s.K, ldx, -1, 1));
  }
  // Parameter gradients accumulate: they start from values a previous micro-batch left.
  const int dw = c.buffers.add_f32("dw", rng.uniform_rows(s.N, s.K, ldw, -1, 1));
  const int dbias = s.bias ? c.buffers.add_f32("dbias", rng.uniform(s.N, -1, 1)) : -1;
  const bool accumulate = s.dx == MatmulShape::Dx::kAccumulate;
  auto params = [=](Buffers& b, bool for_op) {
    MatmulBackwardParams p;
    p.dy = input_view(b, dy, for_op, {s.M, s.N}, {ldy, 1});
    p.x = input_view(b, x, for_op, {s.M, s.K}, {ldx, 1});
    p.w = input_view(b, w, for_op, {s.N, s.K}, {ldw, 1});
    if (dx >= 0) p.dx = b.strided(dx, 0, {s.M, s.K}, {ldx, 1});
    p.dw = b.strided(dw, 0, {s.N, s.K}, {ldw, 1});
    if (dbias >= 0) p.dbias = b.view(dbias, {s.N});
    p.accumulate_dx = accumulate;
    return p;
  };
  bind_inputs(c, params, &ref::matmul_backward, ops.matmul_backward);
  return c;
}

struct AttentionShape {
  int64_t B, T, H, D;
  bool causal;
  bool fused;  // q, k, v (and dq, dk, dv) are the thirds of one (B, T, 3, H, D) buffer
  float scale;
  bool bf16 = false;  // q, k, v, dout in bf16 for the function under test
};

std::string describe(const AttentionShape& s) {
  std::string out = "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) +
                    " H=" + std::to_string(s.H) + " D=" + std::to_string(s.D) +
                    (s.causal ? " causal" : " full");
  if (s.fused) out += " fused-qkv";
  if (s.scale != 0.0f) out += " scale=" + std::to_string(s.scale).substr(0, 4);
  if (s.bf16) out += " bf16";
  return out;
}

// Where q, k and v (or dq, dk and dv) live: one fused buffer or three contiguous ones; for the
// inputs of a bf16 case, also their bf16 copies (the function under test reads those, the
// reference the same values in f32).
struct QkvLayout {
  AttentionShape s;
  int ids[3];    // the buffer of each third (all equal when fused)
  int ids16[3];  // their bf16 copies, -1 without
  TensorView third(Buffers& b, int which, bool for_op = false) const {
    const int id = for_op && ids16[which] >= 0 ? ids16[which] : ids[which];
    if (!s.fused) return b.view(id, {s.B, s.T, s.H, s.D});
    return b.strided(id, which * s.H * s.D, {s.B, s.T, s.H, s.D},
                     {s.T * 3 * s.H * s.D, 3 * s.H * s.D, s.D, 1});
  }
};

// Adds q, k and v (inputs, random) or dq, dk and dv (outputs, NaN) to `buffers`.
QkvLayout add_qkv(Buffers& buffers, const AttentionShape& s, Rng* rng, const char* prefix) {
  const int64_t numel = s.B * s.T * s.H * s.D;
  QkvLayout layout{s, {0, 0, 0}, {-1, -1, -1}};
  const std::string p(prefix);
  const bool bf16 = s.bf16 && rng != nullptr;
  if (s.fused) {
    std::vector<float> values = rng ? rng->uniform(3 * numel, -2, 2) : nans(3 * numel);
    const MatmulInput in = bf16 ? add_input(buffers, p + "qkv", std::move(values), true)
                                : MatmulInput{buffers.add_f32(p + "qkv", std::move(values)), -1};
    for (int i = 0; i < 3; ++i)
      layout.ids[i] = in.f32, layout.ids16[i] = in.bf16;
    return layout;
  }
  const char* names[3] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) {
    std::vector<float> values = rng ? rng->uniform(numel, -2, 2) : nans(numel);
    const MatmulInput in = bf16 ? add_input(buffers, p + names[i], std::move(values), true)
                                : MatmulInput{buffers.add_f32(p + names[i], std::move(values)), -1};
    layout.ids[i] = in.f32, layout.ids16[i] = in.bf16;
  }
  return layout;
}

Case attention_forward_case(const OpTable& ops, const AttentionShape& s, uint64_t seed) {
  Case c;
  c.op = "attention_forward";
  c.shape = describe(s);
  Rng rng(seed);
  const QkvLayout qkv = add_qkv(c.buffers, s, &rng, "");
  const int o = c.buffers.add_f32("o", nans(s.B * s.T * s.H * s.D));
  const int lse = c.buffers.add_f32("lse", nans(s.B * s.H * s.T));
  auto params = [=](Buffers& b, bool for_op) {
    AttentionParams p;
    p.q = qkv.third(b, 0, for_op);
    p.k = qkv.third(b, 1, for_op);
    p.v = qkv.third(b, 2, for_op);
    p.o = b.view(o, {s.B, s.T, s.H, s.D});
    p.lse = b.view(lse, {s.B, s.H, s.T});
    p.causal = s.causal;
    p.scale = s.scale;
    return p;
  };
  bind_inputs(c, params, &ref::attention_forward, ops.attention_forward);
  if (s.bf16) c.tolerance = bf16_attention_tolerance(c.op);
  return c;
}

Case attention_backward_case(const OpTable& ops, const AttentionShape& s, uint64_t seed) {
  Case c;
  c.op = "attention_backward";
  c.shape = describe(s);
  Rng rng(seed);
  const QkvLayout qkv = add_qkv(c.buffers, s, &rng, "");
  const int o = c.buffers.add_f32("o", nans(s.B * s.T * s.H * s.D));
  const int lse = c.buffers.add_f32("lse", nans(s.B * s.H * s.T));
  const MatmulInput dout =
      add_input(c.buffers, "dout", rng.uniform(s.B * s.T * s.H * s.D, -1, 1), s.bf16);
  const QkvLayout grads = add_qkv(c.buffers, s, nullptr, "d");
  // The forward's outputs, which the backward takes as inputs.
  AttentionParams f;
  f.q = qkv.third(c.buffers, 0);
  f.k = qkv.third(c.buffers, 1);
  f.v = qkv.third(c.buffers, 2);
  f.o = c.buffers.view(o, {s.B, s.T, s.H, s.D});
  f.lse = c.buffers.view(lse, {s.B, s.H, s.T});
  f.causal = s.causal;
  f.scale = s.scale;
  KILN_CHECK(ref::attention_forward(f).ok());
  auto params = [=](Buffers& b, bool for_op) {
    AttentionBackwardParams p;
    p.q = qkv.third(b, 0, for_op);
    p.k = qkv.third(b, 1, for_op);
    p.v = qkv.third(b, 2, for_op);
    p.o = b.view(o, {s.B, s.T, s.H, s.D});
    p.lse = b.view(lse, {s.B, s.H, s.T});
    p.dout = b.view(for_op && dout.bf16 >= 0 ? dout.bf16 : dout.f32, {s.B, s.T, s.H, s.D});
    p.dq = grads.third(b, 0);
    p.dk = grads.third(b, 1);
    p.dv = grads.third(b, 2);
    p.causal = s.causal;
    p.scale = s.scale;
    return p;
  };
  bind_inputs(c, params, &ref::attention_backward, ops.attention_backward);
  if (s.bf16) c.tolerance = bf16_attention_tolerance(c.op);
  return c;
}

}  // namespace

std::vector<Case> matmul_cases(const OpTable& ops, uint64_t seed) {
  using Dx = MatmulShape::Dx;
  const MatmulShape shapes[] = {
      {1, 37, 53, false, true, Dx::kOverwrite},     // one row (batch 1, T 1)
      {67, 129, 95, true, false, Dx::kAccumulate},  // odd sizes, every view strided
      {200, 64, 193, false, true, Dx::kOverwrite},  // more rows than a task's block
      {5, 16, 7, true, true, Dx::kAbsent},          // the first layer: no dx
      // bf16 inputs (oneDNN's bf16 matmul: AMX or AVX512-BF16), a block and a half of rows.
      {67, 129, 95, true, false, Dx::kAccumulate, true},
      {200, 64, 193, false, true, Dx::kOverwrite, true},
  };
  std::vector<Case> cases;
  int index = 0;
  for (const MatmulShape& s : shapes) {
    cases.push_back(matmul_forward_case(ops, s, case_seed(seed, "matmul_forward", index)));
    cases.push_back(matmul_backward_case(ops, s, case_seed(seed, "matmul_backward", index)));
    ++index;
  }
  return cases;
}

std::vector<Case> attention_cases(const OpTable& ops, uint64_t seed) {
  const AttentionShape shapes[] = {
      {1, 1, 2, 32, true, false, 0.0f},     // one token: o = v
      {2, 67, 3, 64, true, true, 0.0f},     // GPT-2's D, a partial last tile
      {1, 200, 2, 80, false, false, 0.0f},  // D not a power of two
      {2, 67, 1, 128, false, true, 0.1f},   // explicit scale
      {1, 200, 2, 128, true, false, 0.0f},  // causal, several tiles
      {2, 200, 1, 32, false, true, 0.0f},
      // bf16 inputs (the products through oneDNN's bf16 matmul): GPT-2's D, fused and causal,
      // several blocks of 64 queries; and a D that is no multiple of anything, not causal.
      {2, 200, 3, 64, true, true, 0.0f, true},
      {1, 67, 2, 80, false, false, 0.0f, true},
  };
  std::vector<Case> cases;
  int index = 0;
  for (const AttentionShape& s : shapes) {
    cases.push_back(attention_forward_case(ops, s, case_seed(seed, "attention_forward", index)));
    cases.push_back(attention_backward_case(ops, s, case_seed(seed, "attention_backward", index)));
    ++index;
  }
  return cases;
}

}  // namespace kiln::ops::check
