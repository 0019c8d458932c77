// ops-check cases of LayerNorm, RMSNorm, GELU and the residual add (see ops_check.h).
//
// Norms: one row, odd sizes with strided rows (row stride > C for x, y, dy and dx), and GPT-2's
// C = 768 over 200 rows; x in [-2, 3] (a mean far from zero, so a missing mean subtraction
// shows), weight in [0.5, 1.5]. dx overwritten or accumulated; parameter gradients start from
// random values and accumulate. The backward's mean and rstd are the reference forward's.
//
// Element-wise: 1, 1037 and 300007 elements (odd, and large enough for several tasks per
// thread), out of place and in place (y aliasing x or a, dx aliasing dy), dx overwritten and
// accumulated. GELU's x is in [-5, 5]: both tails and the bend.
#include <string>
#include <vector>

#include "ops/check/check_case.h"
#include "ops/ref/ref.h"

namespace kiln::ops::check {
namespace {

struct NormShape {
  int64_t N, C, row_stride;
  bool accumulate_dx;
};

std::string describe(const NormShape& s) {
  std::string out = "N=" + std::to_string(s.N) + " C=" + std::to_string(s.C);
  if (s.row_stride != s.C) out += " row_stride=" + std::to_string(s.row_stride);
  return out;
}

// The rows of a (N, C) view in a buffer with rows s.row_stride apart.
TensorView rows(Buffers& b, int id, const NormShape& s) {
  return b.strided(id, 0, {s.N, s.C}, {s.row_stride, 1});
}

Case layernorm_forward_case(const OpTable& ops, const NormShape& s, uint64_t seed) {
  Case c;
  c.op = "layernorm_forward";
  c.shape = describe(s);
  Rng rng(seed);
  const int x = c.buffers.add_f32("x", rng.uniform_rows(s.N, s.C, s.row_stride, -2, 3));
  const int weight = c.buffers.add_f32("weight", rng.uniform(s.C, 0.5f, 1.5f));
  const int bias = c.buffers.add_f32("bias", rng.uniform(s.C, -1, 1));
  const int y = c.buffers.add_f32("y", nans((s.N - 1) * s.row_stride + s.C));
  const int mean = c.buffers.add_f32("mean", nans(s.N));
  const int rstd = c.buffers.add_f32("rstd", nans(s.N));
  auto params = [=](Buffers& b) {
    return LayerNormParams{rows(b, x, s), b.view(weight, {s.C}), b.view(bias, {s.C}),
                           rows(b, y, s), b.view(mean, {s.N}),   b.view(rstd, {s.N})};
  };
  bind(c, params, &ref::layernorm_forward, ops.layernorm_forward);
  return c;
}

Case layernorm_backward_case(const OpTable& ops, const NormShape& s, uint64_t seed) {
  Case c;
  c.op = "layernorm_backward";
  c.shape = describe(s) + (s.accumulate_dx ? " dx+=" : "");
  Rng rng(seed);
  const int64_t size = (s.N - 1) * s.row_stride + s.C;
  const int dy = c.buffers.add_f32("dy", rng.uniform_rows(s.N, s.C, s.row_stride, -1, 1));
  const int x = c.buffers.add_f32("x", rng.uniform_rows(s.N, s.C, s.row_stride, -2, 3));
  const int weight = c.buffers.add_f32("weight", rng.uniform(s.C, 0.5f, 1.5f));
  const int mean = c.buffers.add_f32("mean", nans(s.N));
  const int rstd = c.buffers.add_f32("rstd", nans(s.N));
  const int dx = c.buffers.add_f32(
      "dx", s.accumulate_dx ? rng.uniform_rows(s.N, s.C, s.row_stride, -1, 1) : nans(size));
  const int dweight = c.buffers.add_f32("dweight", rng.uniform(s.C, -1, 1));
  const int dbias = c.buffers.add_f32("dbias", rng.uniform(s.C, -1, 1));
  // mean and rstd from the forward; its y and the bias do not matter here.
  std::vector<float> y_scratch = nans(size);
  std::vector<float> bias_scratch(static_cast<size_t>(s.C), 0.0f);
  KILN_CHECK(ref::layernorm_forward(
                 {rows(c.buffers, x, s), c.buffers.view(weight, {s.C}),
                  TensorView::f32(bias_scratch.data(), {s.C}),
                  TensorView::strided(y_scratch.data(), DType::kF32, {s.N, s.C}, {s.row_stride, 1}),
                  c.buffers.view(mean, {s.N}), c.buffers.view(rstd, {s.N})})
                 .ok());
  auto params = [=](Buffers& b) {
    return LayerNormBackwardParams{
        rows(b, dy, s),         rows(b, x, s),        b.view(weight, {s.C}),
        b.view(mean, {s.N}),    b.view(rstd, {s.N}),  rows(b, dx, s),
        b.view(dweight, {s.C}), b.view(dbias, {s.C}), s.accumulate_dx};
  };
  bind(c, params, &ref::layernorm_backward, ops.layernorm_backward);
  return c;
}

Case rmsnorm_forward_case(const OpTable& ops, const NormShape& s, uint64_t seed) {
  Case c;
  c.op = "rmsnorm_forward";
  c.shape = describe(s);
  Rng rng(seed);
  const int x = c.buffers.add_f32("x", rng.uniform_rows(s.N, s.C, s.row_stride, -2, 3));
  const int weight = c.buffers.add_f32("weight", rng.uniform(s.C, 0.5f, 1.5f));
  const int y = c.buffers.add_f32("y", nans((s.N - 1) * s.row_stride + s.C));
  const int rstd = c.buffers.add_f32("rstd", nans(s.N));
  auto params = [=](Buffers& b) {
    return RmsNormParams{rows(b, x, s), b.view(weight, {s.C}), rows(b, y, s), b.view(rstd, {s.N})};
  };
  bind(c, params, &ref::rmsnorm_forward, ops.rmsnorm_forward);
  return c;
}

Case rmsnorm_backward_case(const OpTable& ops, const NormShape& s, uint64_t seed) {
  Case c;
  c.op = "rmsnorm_backward";
  c.shape = describe(s) + (s.accumulate_dx ? " dx+=" : "");
  Rng rng(seed);
  const int64_t size = (s.N - 1) * s.row_stride + s.C;
  const int dy = c.buffers.add_f32("dy", rng.uniform_rows(s.N, s.C, s.row_stride, -1, 1));
  const int x = c.buffers.add_f32("x", rng.uniform_rows(s.N, s.C, s.row_stride, -2, 3));
  const int weight = c.buffers.add_f32("weight", rng.uniform(s.C, 0.5f, 1.5f));
  const int rstd = c.buffers.add_f32("rstd", nans(s.N));
  const int dx = c.buffers.add_f32(
      "dx", s.accumulate_dx ? rng.uniform_rows(s.N, s.C, s.row_stride, -1, 1) : nans(size));
  const int dweight = c.buffers.add_f32("dweight", rng.uniform(s.C, -1, 1));
  // rstd from the forward; its y does not matter here.
  std::vector<float> y_scratch = nans(size);
  KILN_CHECK(ref::rmsnorm_forward(
                 {rows(c.buffers, x, s), c.buffers.view(weight, {s.C}),
                  TensorView::strided(y_scratch.data(), DType::kF32, {s.N, s.C}, {s.row_stride, 1}),
                  c.buffers.view(rstd, {s.N})})
                 .ok());
  auto params = [=](Buffers& b) {
    return RmsNormBackwardParams{rows(b, dy, s),      rows(b, x, s),  b.view(weight, {s.C}),
                                 b.view(rstd, {s.N}), rows(b, dx, s), b.view(dweight, {s.C}),
                                 s.accumulate_dx};
  };
  bind(c, params, &ref::rmsnorm_backward, ops.rmsnorm_backward);
  return c;
}

struct ElementwiseShape {
  int64_t n;
  bool in_place;    // y aliases x (GELU) or a (residual); dx aliases dy
  bool accumulate;  // GELU's accumulate_dx
};

std::string describe(const ElementwiseShape& s) {
  return "n=" + std::to_string(s.n) + (s.in_place ? " in-place" : "") +
         (s.accumulate ? " dx+=" : "");
}

Case gelu_forward_case(const OpTable& ops, const ElementwiseShape& s, uint64_t seed) {
  Case c;
  c.op = "gelu_forward";
  c.shape = describe(ElementwiseShape{s.n, s.in_place, false});
  Rng rng(seed);
  const int x = c.buffers.add_f32("x", rng.uniform(s.n, -5, 5));
  const int y = s.in_place ? x : c.buffers.add_f32("y", nans(s.n));
  auto params = [=](Buffers& b) { return GeluParams{b.view(x, {s.n}), b.view(y, {s.n})}; };
  bind(c, params, &ref::gelu_forward, ops.gelu_forward);
  return c;
}

Case gelu_backward_case(const OpTable& ops, const ElementwiseShape& s, uint64_t seed) {
  Case c;
  c.op = "gelu_backward";
  c.shape = describe(s);
  Rng rng(seed);
  const int x = c.buffers.add_f32("x", rng.uniform(s.n, -5, 5));
  const int dy = c.buffers.add_f32("dy", rng.uniform(s.n, -1, 1));
  const int dx = s.in_place     ? dy
                 : s.accumulate ? c.buffers.add_f32("dx", rng.uniform(s.n, -1, 1))
                                : c.buffers.add_f32("dx", nans(s.n));
  auto params = [=](Buffers& b) {
    return GeluBackwardParams{b.view(x, {s.n}), b.view(dy, {s.n}), b.view(dx, {s.n}), s.accumulate};
  };
  bind(c, params, &ref::gelu_backward, ops.gelu_backward);
  return c;
}

Case residual_forward_case(const OpTable& ops, const ElementwiseShape& s, uint64_t seed) {
  Case c;
  c.op = "residual_forward";
  c.shape = describe(ElementwiseShape{s.n, s.in_place, false});
  Rng rng(seed);
  const int a = c.buffers.add_f32("a", rng.uniform(s.n, -1, 1));
  const int bb = c.buffers.add_f32("b", rng.uniform(s.n, -1, 1));
  const int y = s.in_place ? a : c.buffers.add_f32("y", nans(s.n));
  auto params = [=](Buffers& b) {
    return ResidualParams{b.view(a, {s.n}), b.view(bb, {s.n}), b.view(y, {s.n})};
  };
  bind(c, params, &ref::residual_forward, ops.residual_forward);
  return c;
}

Case residual_backward_case(const OpTable& ops, const ElementwiseShape& s, uint64_t seed) {
  Case c;
  c.op = "residual_backward";
  c.shape = "n=" + std::to_string(s.n);
  Rng rng(seed);
  const int dy = c.buffers.add_f32("dy", rng.uniform(s.n, -1, 1));
  const int da = c.buffers.add_f32("da", rng.uniform(s.n, -1, 1));
  const int db = c.buffers.add_f32("db", rng.uniform(s.n, -1, 1));
  auto params = [=](Buffers& b) {
    return ResidualBackwardParams{b.view(dy, {s.n}), b.view(da, {s.n}), b.view(db, {s.n})};
  };
  bind(c, params, &ref::residual_backward, ops.residual_backward);
  return c;
}

}  // namespace

std::vector<Case> norm_cases(const OpTable& ops, uint64_t seed) {
  const NormShape shapes[] = {
      {1, 37, 37, false},
      {67, 129, 133, true},
      {200, 768, 768, false},
  };
  std::vector<Case> cases;
  int index = 0;
  for (const NormShape& s : shapes) {
    cases.push_back(layernorm_forward_case(ops, s, case_seed(seed, "layernorm_forward", index)));
    cases.push_back(layernorm_backward_case(ops, s, case_seed(seed, "layernorm_backward", index)));
    cases.push_back(rmsnorm_forward_case(ops, s, case_seed(seed, "rmsnorm_forward", index)));
    cases.push_back(rmsnorm_backward_case(ops, s, case_seed(seed, "rmsnorm_backward", index)));
    ++index;
  }
  return cases;
}

std::vector<Case> elementwise_cases(const OpTable& ops, uint64_t seed) {
  const ElementwiseShape shapes[] = {
      {1, false, false},
      {1037, true, false},
      {300007, false, true},
      {300007, true, false},
  };
  std::vector<Case> cases;
  int index = 0;
  for (const ElementwiseShape& s : shapes) {
    cases.push_back(gelu_forward_case(ops, s, case_seed(seed, "gelu_forward", index)));
    cases.push_back(gelu_backward_case(ops, s, case_seed(seed, "gelu_backward", index)));
    cases.push_back(residual_forward_case(ops, s, case_seed(seed, "residual_forward", index)));
    if (!s.in_place) {  // the backward has no in-place form
      cases.push_back(residual_backward_case(ops, s, case_seed(seed, "residual_backward", index)));
    }
    ++index;
  }
  return cases;
}

}  // namespace kiln::ops::check
