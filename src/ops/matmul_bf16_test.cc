// Matmul with bf16 inputs (kiln/ops/matmul.h, "Precision"), against the double-precision
// reference twice:
//   - on the bf16-rounded inputs: a bf16 product is exact in f32 and oneDNN sums in f32, so the
//     result must be as close as an f32 matmul's (the same kTolerance as matmul_test.cc);
//   - on the f32 inputs before rounding: bf16 keeps 8 significant bits, so round to nearest
//     moves each input by at most 2^-8 of itself, each product by at most 2^-7 + 2^-16 of
//     itself, and each output element by at most that fraction of sum_k |x_k w_k| (plus the f32
//     sums): the error mixed precision adds, bounded element by element. (The worst seen here
//     is 0.0064 of the bound's 0.0078, on a 3-term reduction.)
// Also what callers rely on: the result does not depend on the thread count, mixed inputs are
// refused naming the operand, and dbias sums a bf16 dy in f32.
#include <kiln/base/thread_pool.h>
#include <kiln/ops/attention.h>
#include <kiln/ops/convert.h>
#include <kiln/ops/matmul.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "ops/gemm_bf16.h"
#include "ops/ref/ref.h"
#include "ops/ref/ref_test_util.h"

namespace kiln::ops {
namespace {

using ref::testing::max_rel_err;
using ref::testing::uniform;

constexpr double kTolerance = 1e-4;  // matmul_test.cc's: f32 sums over the reduction
constexpr double kFloorFraction = 1e-2;
// The rounding of both inputs, per product (see the top): 2^-7 + 2^-16, and 1e-6 of the
// magnitude for the f32 sums.
const double kRoundingBound = std::ldexp(1.0, -7) + std::ldexp(1.0, -16) + 1e-6;

double buffer_err(const std::vector<float>& got, const std::vector<float>& want) {
  double scale = 0;
  for (float w : want)
    scale = std::max(scale, static_cast<double>(std::fabs(w)));
  return max_rel_err(got, want, std::max(kFloorFraction * scale, 1e-30));
}

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(std::max<size_t>(v.size(), 1));
  KILN_CHECK(ref::convert_f32_to_bf16(
                 TensorView::f32(const_cast<float*>(v.data()), {static_cast<int64_t>(v.size())}),
                 TensorView::of(out.data(), DType::kBF16, {static_cast<int64_t>(v.size())}))
                 .ok());
  return out;
}
std::vector<float> to_f32(const std::vector<uint16_t>& v, size_t n) {
  std::vector<float> out(std::max<size_t>(n, 1));
  KILN_CHECK(ref::convert_bf16_to_f32(TensorView::of(const_cast<uint16_t*>(v.data()), DType::kBF16,
                                                     {static_cast<int64_t>(n)}),
                                      TensorView::f32(out.data(), {static_cast<int64_t>(n)}))
                 .ok());
  out.resize(n);
  return out;
}

struct Dims {
  int64_t m, n, k;
};

// One forward and backward: bf16 x, w, dy; f32 outputs that start non-zero (accumulation).
struct Case {
  Case(const Dims& dims, uint64_t seed)
      : d(dims),
        x(uniform(dims.m * dims.k, seed)),
        w(uniform(dims.n * dims.k, seed + 1)),
        bias(uniform(dims.n, seed + 2)),
        dy(uniform(dims.m * dims.n, seed + 3)),
        dw0(uniform(dims.n * dims.k, seed + 5)),
        dbias0(uniform(dims.n, seed + 6)),
        x16(to_bf16(x)),
        w16(to_bf16(w)),
        dy16(to_bf16(dy)) {}

  Dims d;
  std::vector<float> x, w, bias, dy, dw0, dbias0;
  std::vector<uint16_t> x16, w16, dy16;

  struct Out {
    std::vector<float> y, dx, dw, dbias;
  };

  // With `packed`, w is packed first (pack_bf16_weights) and read packed by y and dx.
  Status run(const Context& ctx, Out* out, bool packed = false) {
    PackedWeight local;
    return run_packed_into(ctx, out, packed ? &local : nullptr);
  }

  // As run, packing w into *w_packed (the caller's) when it is not null.
  Status run_packed_into(const Context& ctx, Out* out, PackedWeight* w_packed) {
    out->y.assign(d.m * d.n, -3.0f);
    out->dx.assign(d.m * d.k, -5.0f);
    out->dw = dw0;
    out->dbias = dbias0;
    MatmulParams p;
    p.x = TensorView::of(x16.data(), DType::kBF16, {d.m, d.k});
    p.w = TensorView::of(w16.data(), DType::kBF16, {d.n, d.k});
    p.bias = TensorView::f32(bias.data(), {d.n});
    p.y = TensorView::f32(out->y.data(), {d.m, d.n});
    if (w_packed != nullptr) {
      KILN_RETURN_IF_ERROR(pack_bf16_weights({&p.w, 1}, {w_packed, 1}, ctx));
      p.w_packed = w_packed;
    }
    KILN_RETURN_IF_ERROR(matmul_forward(p, ctx));
    MatmulBackwardParams b;
    b.dy = TensorView::of(dy16.data(), DType::kBF16, {d.m, d.n});
    b.x = p.x;
    b.w = p.w;
    b.w_packed = p.w_packed;
    b.dx = TensorView::f32(out->dx.data(), {d.m, d.k});
    b.dw = TensorView::f32(out->dw.data(), {d.n, d.k});
    b.dbias = TensorView::f32(out->dbias.data(), {d.n});
    return matmul_backward(b, ctx);
  }

  // The double reference on the given f32 inputs.
  Out reference(const std::vector<float>& rx, const std::vector<float>& rw,
                const std::vector<float>& rdy) {
    Out out;
    out.y.assign(d.m * d.n, -3.0f);
    out.dx.assign(d.m * d.k, -5.0f);
    out.dw = dw0;
    out.dbias = dbias0;
    std::vector<float> cx = rx, cw = rw, cdy = rdy;
    MatmulParams p;
    p.x = TensorView::f32(cx.data(), {d.m, d.k});
    p.w = TensorView::f32(cw.data(), {d.n, d.k});
    p.bias = TensorView::f32(bias.data(), {d.n});
    p.y = TensorView::f32(out.y.data(), {d.m, d.n});
    KILN_CHECK(ref::matmul_forward(p).ok());
    MatmulBackwardParams b;
    b.dy = TensorView::f32(cdy.data(), {d.m, d.n});
    b.x = p.x;
    b.w = p.w;
    b.dx = TensorView::f32(out.dx.data(), {d.m, d.k});
    b.dw = TensorView::f32(out.dw.data(), {d.n, d.k});
    b.dbias = TensorView::f32(out.dbias.data(), {d.n});
    KILN_CHECK(ref::matmul_backward(b).ok());
    return out;
  }
};

Context cpu_context(ThreadPool* pool, CpuIsa isa = supported_isas().back()) {
  Context ctx;
  ctx.isa = isa;
  ctx.pool = pool;
  return ctx;
}

// One ISA for each bf16 GEMM path this CPU has (gemm_bf16.h): its best, which is oneDNN's path
// at AVX-512 where oneDNN has a bf16 matmul, and then AVX2's, the widened path.
std::vector<CpuIsa> bf16_path_isas() {
  std::vector<CpuIsa> out{supported_isas().back()};
  if (bf16_gemm_kernel(out[0]) != kBf16WidenedKernel) out.push_back(CpuIsa::kAvx2);
  return out;
}

std::string path_name(CpuIsa isa) {
  return std::string(cpu_isa_name(isa)) + " (" + bf16_gemm_kernel(isa) + ")";
}

// The last two cross matmul.cc's kBf16Span (3,072): {130, 3500, 40} has a forward wider than
// the span (computed in column spans through the scratch) and a dx whose reduction is longer
// (accumulated span by span); {16, 130, 3300} a dw wider than the span, accumulated (+=);
// {64, 3200, 200} a dx of too few rows to split by rows, split by columns, whose reduction is
// longer than the span; {130, 6144, 40} two spans of the same shape, whose packed pieces only
// their values tell apart.
const Dims kDims[] = {{1, 1, 1},       {3, 5, 7},       {64, 48, 33},    {130, 97, 70},
                      {2, 300, 5},     {257, 3, 1000},  {40, 700, 16},   {256, 192, 768},
                      {130, 3500, 40}, {16, 130, 3300}, {64, 3200, 200}, {130, 6144, 40}};

TEST(MatmulBf16Test, IsTheF32MatmulOfTheRoundedInputs) {
  for (const CpuIsa isa : bf16_path_isas()) {
    SCOPED_TRACE(path_name(isa));
    for (int threads : {1, 3}) {
      ThreadPool pool(threads);
      const Context ctx = cpu_context(&pool, isa);
      for (const Dims& d : kDims) {
        for (const bool packed : {false, true}) {
          const std::string what = "M=" + std::to_string(d.m) + " N=" + std::to_string(d.n) +
                                   " K=" + std::to_string(d.k) +
                                   " threads=" + std::to_string(threads) +
                                   (packed ? " packed" : "");
          Case c(d, 11);
          Case::Out got;
          ASSERT_TRUE(c.run(ctx, &got, packed).ok()) << what;
          Case::Out want = c.reference(to_f32(c.x16, c.x.size()), to_f32(c.w16, c.w.size()),
                                       to_f32(c.dy16, c.dy.size()));
          EXPECT_LE(buffer_err(got.y, want.y), kTolerance) << what << " y";
          EXPECT_LE(buffer_err(got.dx, want.dx), kTolerance) << what << " dx";
          EXPECT_LE(buffer_err(got.dw, want.dw), kTolerance) << what << " dw";
          EXPECT_LE(buffer_err(got.dbias, want.dbias), kTolerance) << what << " dbias";
        }
      }
    }
  }
}

TEST(MatmulBf16Test, AWideInputGradientOfASplitReductionIsTheF32MatmulOfTheRoundedInputs) {
  // dx = dy @ w, 128 x 3,080 over a reduction of 3,100, neither operand transposed: both past
  // kBf16Span at once (column spans through the scratch, each accumulated over two spans of the
  // reduction, dy's spans copied dense). Only dx: the double reference of the whole Case would
  // take seconds at this size.
  ThreadPool pool(2);
  for (const CpuIsa isa : bf16_path_isas()) {
    SCOPED_TRACE(path_name(isa));
    const int64_t m = 128, n = 3100, k = 3080;  // dy (m x n), w (n x k), dx (m x k)
    std::vector<uint16_t> dy16 = to_bf16(uniform(static_cast<size_t>(m * n), 71));
    std::vector<uint16_t> w16 = to_bf16(uniform(static_cast<size_t>(n * k), 72));
    std::vector<uint16_t> x16 = to_bf16(uniform(static_cast<size_t>(m * k), 73));
    std::vector<float> dx(static_cast<size_t>(m * k), -7.0f);
    MatmulBackwardParams b;
    b.dy = TensorView::of(dy16.data(), DType::kBF16, {m, n});
    b.x = TensorView::of(x16.data(), DType::kBF16, {m, k});
    b.w = TensorView::of(w16.data(), DType::kBF16, {n, k});
    b.dx = TensorView::f32(dx.data(), {m, k});
    ASSERT_TRUE(matmul_backward(b, cpu_context(&pool, isa)).ok());
    const std::vector<float> dyf = to_f32(dy16, dy16.size()), wf = to_f32(w16, w16.size());
    std::vector<float> want(static_cast<size_t>(m * k));
    std::vector<double> row(static_cast<size_t>(k));
    for (int64_t i = 0; i < m; ++i) {
      std::fill(row.begin(), row.end(), 0.0);
      for (int64_t l = 0; l < n; ++l) {
        const double g = dyf[static_cast<size_t>(i * n + l)];
        const float* wrow = wf.data() + l * k;
        for (int64_t j = 0; j < k; ++j)
          row[static_cast<size_t>(j)] += g * wrow[j];
      }
      for (int64_t j = 0; j < k; ++j)
        want[static_cast<size_t>(i * k + j)] = static_cast<float>(row[static_cast<size_t>(j)]);
    }
    EXPECT_LE(buffer_err(dx, want), kTolerance);
  }
}

// |got - want| <= bound * sum_k |a_k b_k| per element, want from the unrounded inputs.
void expect_within_rounding(const std::vector<float>& got, const std::vector<float>& want,
                            const std::vector<double>& magnitude, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    worst = std::max(worst, err / std::max(magnitude[i], 1e-30));
  }
  EXPECT_LE(worst, kRoundingBound) << what;
}

TEST(MatmulBf16Test, ErrorFromTheUnroundedInputsIsWithinTheRoundingBound) {
  ThreadPool pool(2);
  for (const CpuIsa isa : bf16_path_isas()) {
    const Context ctx = cpu_context(&pool, isa);
    for (const Dims& d : {Dims{64, 48, 33}, Dims{257, 3, 1000}, Dims{128, 384, 768}}) {
      Case c(d, 21);
      Case::Out got;
      ASSERT_TRUE(c.run(ctx, &got).ok());
      const Case::Out want = c.reference(c.x, c.w, c.dy);
      // sum |x||w| for y, |dy||w| for dx, |dy||x| for dw (the dw and y outputs also carry their
      // start value or bias exactly: those add no rounding).
      std::vector<double> my(d.m * d.n, 0), mdx(d.m * d.k, 0), mdw(d.n * d.k, 0);
      for (int64_t i = 0; i < d.m; ++i)
        for (int64_t j = 0; j < d.n; ++j)
          for (int64_t l = 0; l < d.k; ++l) {
            const double x = std::fabs(c.x[i * d.k + l]), w = std::fabs(c.w[j * d.k + l]);
            const double g = std::fabs(c.dy[i * d.n + j]);
            my[i * d.n + j] += x * w;
            mdx[i * d.k + l] += g * w;
            mdw[j * d.k + l] += g * x;
          }
      const std::string what = path_name(isa) + " M=" + std::to_string(d.m) +
                               " N=" + std::to_string(d.n) + " K=" + std::to_string(d.k);
      expect_within_rounding(got.y, want.y, my, what + " y");
      expect_within_rounding(got.dx, want.dx, mdx, what + " dx");
      expect_within_rounding(got.dw, want.dw, mdw, what + " dw");
    }
  }
}

TEST(MatmulBf16Test, ResultsDoNotDependOnThreadCount) {
  // A long reduction over several blocks of rows (where oneDNN's order of sums depends on the
  // block's shape), and few rows split by columns.
  // Also a forward past kBf16Span's columns whose dx reduces over more than the span.
  // With packed weights as without, on each path.
  for (const CpuIsa isa : bf16_path_isas()) {
    SCOPED_TRACE(path_name(isa));
    for (const bool packed : {false, true}) {
      for (const Dims& d :
           {Dims{300, 200, 150}, Dims{7, 900, 64}, Dims{400, 96, 3072}, Dims{300, 3500, 64}}) {
        Case::Out first;
        for (int threads : {1, 2, 5}) {
          ThreadPool pool(threads);
          Case c(d, 31);
          Case::Out got;
          ASSERT_TRUE(c.run(cpu_context(&pool, isa), &got, packed).ok());
          if (threads == 1) {
            first = got;
            continue;
          }
          EXPECT_EQ(got.y, first.y) << threads << " packed " << packed;
          EXPECT_EQ(got.dx, first.dx) << threads << " packed " << packed;
          EXPECT_EQ(got.dw, first.dw) << threads << " packed " << packed;
          EXPECT_EQ(got.dbias, first.dbias) << threads << " packed " << packed;
        }
      }
    }
  }
}

// The calls of GPT-2's shapes read the packed weights, none falling back to repacking w:
// blocks of 128 rows and a last block of fewer (300 rows), the head's wide forward and its
// input gradient split over the reduction. Run on a fresh thread without a pool, whose counts
// are exactly these calls'.
void run_packed_gpt2_shapes(CpuIsa isa, PackedBUse* use) {
  const Context ctx = cpu_context(nullptr, isa);
  for (const Dims& d : {Dims{300, 3 * 768, 768}, Dims{256, 768, 768}, Dims{256, 3072, 768},
                        Dims{256, 768, 3072}, Dims{300, 3500, 768}}) {
    Case c(d, 81);
    Case::Out out;
    ASSERT_TRUE(c.run(ctx, &out, true).ok());
  }
  // The tied head's forward has no bias (another primitive than the Case's, which has one).
  Case head(Dims{256, 3500, 768}, 82);
  std::vector<float> y(256 * 3500);
  MatmulParams p;
  p.x = TensorView::of(head.x16.data(), DType::kBF16, {256, 768});
  p.w = TensorView::of(head.w16.data(), DType::kBF16, {3500, 768});
  p.y = TensorView::f32(y.data(), {256, 3500});
  PackedWeight packed;
  ASSERT_TRUE(pack_bf16_weights({&p.w, 1}, {&packed, 1}, ctx).ok());
  p.w_packed = &packed;
  ASSERT_TRUE(matmul_forward(p, ctx).ok());
  *use = packed_b_use_here();
}

TEST(MatmulBf16Test, Gpt2ShapesReadTheirPackedWeights) {
  for (const CpuIsa isa : bf16_path_isas()) {
    SCOPED_TRACE(path_name(isa));
    PackedBUse use;
    std::thread fresh(run_packed_gpt2_shapes, isa, &use);
    fresh.join();
    // y and dx of 3 + 2 + 2 + 2 + 3 blocks, the head-like shape's in 2 spans each, then the
    // bias-free head forward's 2 blocks of 2 spans.
    EXPECT_EQ(use.read_packed, 2 * (3 + 2 + 2 + 2) + 3 * 2 * 2 + 2 * 2);
    EXPECT_EQ(use.read_plain, 0);
  }
}

// A pack laid out for one path is not read by the other (oneDNN's blocked layout is not the
// widened f32 one, nor the reverse): each call reads the plain weight, and the results are still
// the rounded inputs' product. Run on a fresh thread whose counts are this test's calls.
void run_across_paths(CpuIsa packed_for, CpuIsa run_on, PackedBUse* use, double* worst) {
  Case c(Dims{130, 97, 70}, 121);
  PackedWeight packed;
  const TensorView w = TensorView::of(c.w16.data(), DType::kBF16, {97, 70});
  ASSERT_TRUE(pack_bf16_weights({&w, 1}, {&packed, 1}, cpu_context(nullptr, packed_for)).ok());
  std::vector<float> y(130 * 97);
  MatmulParams p;
  p.x = TensorView::of(c.x16.data(), DType::kBF16, {130, 70});
  p.w = w;
  p.bias = TensorView::f32(c.bias.data(), {97});
  p.y = TensorView::f32(y.data(), {130, 97});
  p.w_packed = &packed;
  ASSERT_TRUE(matmul_forward(p, cpu_context(nullptr, run_on)).ok());
  *use = packed_b_use_here();
  const Case::Out want = c.reference(to_f32(c.x16, c.x.size()), to_f32(c.w16, c.w.size()),
                                     to_f32(c.dy16, c.dy.size()));
  *worst = buffer_err(y, want.y);
}

TEST(MatmulBf16Test, APackForOnePathIsNotReadByTheOther) {
  const std::vector<CpuIsa> paths = bf16_path_isas();
  if (paths.size() < 2) {
    GTEST_SKIP() << "one bf16 GEMM path on this CPU (" << path_name(paths[0])
                 << "): no other path's pack to refuse";
  }
  for (const auto& [packed_for, run_on] : {std::pair{paths[0], paths[1]}, {paths[1], paths[0]}}) {
    SCOPED_TRACE("packed for " + path_name(packed_for) + ", run on " + path_name(run_on));
    PackedBUse use;
    double worst = 1;
    std::thread fresh(run_across_paths, packed_for, run_on, &use, &worst);
    fresh.join();
    EXPECT_EQ(use.read_packed, 0);
    EXPECT_EQ(use.read_plain, 2);  // two blocks of rows (130 = 128 + 2)
    EXPECT_LE(worst, kTolerance);
  }
}

TEST(MatmulBf16Test, APackedWeightFromAnotherWeightOrForF32IsRefusedByName) {
  const Dims d{8, 6, 4};
  Case c(d, 91);
  std::vector<float> y(d.m * d.n), dx(d.m * d.k);
  const Context ctx = cpu_context(nullptr);
  MatmulParams p;
  p.x = TensorView::of(c.x16.data(), DType::kBF16, {d.m, d.k});
  p.w = TensorView::of(c.w16.data(), DType::kBF16, {d.n, d.k});
  p.y = TensorView::f32(y.data(), {d.m, d.n});
  PackedWeight empty;
  p.w_packed = &empty;
  Status s = matmul_forward(p, ctx);
  EXPECT_NE(s.to_string().find("matmul_forward: w_packed is empty"), std::string::npos)
      << s.to_string();
  // Packed from a copy of w: the same values, another weight.
  std::vector<uint16_t> other = c.w16;
  const TensorView other_w = TensorView::of(other.data(), DType::kBF16, {d.n, d.k});
  PackedWeight packed;
  ASSERT_TRUE(pack_bf16_weights({&other_w, 1}, {&packed, 1}, ctx).ok());
  EXPECT_EQ(packed.empty(), false);
  EXPECT_GT(packed.bytes(), 0u);
  p.w_packed = &packed;
  s = matmul_forward(p, ctx);
  EXPECT_NE(s.to_string().find("matmul_forward: w_packed was packed from another weight (6 x 4, "
                               "row stride 4) than w (bf16[6,4])"),
            std::string::npos)
      << s.to_string();
  MatmulBackwardParams b;
  b.dy = TensorView::of(c.dy16.data(), DType::kBF16, {d.m, d.n});
  b.x = p.x;
  b.w = p.w;
  b.dx = TensorView::f32(dx.data(), {d.m, d.k});
  b.w_packed = &packed;
  s = matmul_backward(b, ctx);
  EXPECT_NE(s.to_string().find("matmul_backward: w_packed was packed from another weight"),
            std::string::npos)
      << s.to_string();
  // A shape that differs over the same memory.
  const TensorView narrower = TensorView::of(other.data(), DType::kBF16, {d.n - 1, d.k});
  ASSERT_TRUE(pack_bf16_weights({&narrower, 1}, {&packed, 1}, ctx).ok());
  p.w = other_w;
  s = matmul_forward(p, ctx);
  EXPECT_NE(s.to_string().find("packed from another weight (5 x 4"), std::string::npos)
      << s.to_string();
  // f32 inputs with a packed weight, and packing an f32 weight.
  std::vector<float> xf = c.x, wf = c.w;
  p.x = TensorView::f32(xf.data(), {d.m, d.k});
  p.w = TensorView::f32(wf.data(), {d.n, d.k});
  s = matmul_forward(p, ctx);
  EXPECT_NE(s.to_string().find("w_packed is for bf16 inputs, and these are f32"), std::string::npos)
      << s.to_string();
  const TensorView views[2] = {other_w, p.w};
  PackedWeight outs[2];
  s = pack_bf16_weights(views, outs, ctx);
  EXPECT_NE(s.to_string().find("pack_bf16_weights: w[1] is f32[6,4] but must be bf16"),
            std::string::npos)
      << s.to_string();
  s = pack_bf16_weights(views, {outs, 1}, ctx);
  EXPECT_NE(s.to_string().find("2 weights but 1 outputs"), std::string::npos) << s.to_string();
}

TEST(MatmulBf16Test, PackingAgainAfterTheWeightChangesReadsTheNewWeight) {
  // The caller's contract (a packed weight is a copy): what a training step relies on after
  // each optimizer step, packing into the same PackedWeight again. A second split reduction
  // (k = 3,500 in dx) and a second column span (y) are packed again too. On each path.
  ThreadPool pool(2);
  for (const CpuIsa isa : bf16_path_isas()) {
    const Context ctx = cpu_context(&pool, isa);
    for (const Dims& d : {Dims{256, 192, 768}, Dims{130, 3500, 40}}) {
      Case c(d, 101);
      PackedWeight packed;
      Case::Out before;
      ASSERT_TRUE(c.run_packed_into(ctx, &before, &packed).ok());
      for (uint16_t& v : c.w16)
        v ^= 0x8000;  // every weight negated
      Case::Out after;
      ASSERT_TRUE(c.run_packed_into(ctx, &after, &packed).ok());
      const Case::Out want = c.reference(to_f32(c.x16, c.x.size()), to_f32(c.w16, c.w.size()),
                                         to_f32(c.dy16, c.dy.size()));
      EXPECT_LE(buffer_err(after.y, want.y), kTolerance) << path_name(isa) << " " << d.n;
      EXPECT_LE(buffer_err(after.dx, want.dx), kTolerance) << path_name(isa) << " " << d.n;
    }
  }
}

TEST(MatmulBf16Test, AFailedPackLeavesThePackedWeightsEmpty) {
  // A weight that cannot be packed (bf16 of the wrong rank) beside a good one: the call fails,
  // and the PackedWeight that held the good one's earlier pack is refused, not read stale.
  const Context ctx = cpu_context(nullptr);
  const Dims d{8, 6, 4};
  Case c(d, 111);
  PackedWeight packed;
  Case::Out out;
  ASSERT_TRUE(c.run_packed_into(ctx, &out, &packed).ok());
  const TensorView w = TensorView::of(c.w16.data(), DType::kBF16, {d.n, d.k});
  const TensorView flat = TensorView::of(c.w16.data(), DType::kBF16, {d.n * d.k});
  const TensorView both[2] = {w, flat};
  PackedWeight outs[2];
  ASSERT_TRUE(pack_bf16_weights({&w, 1}, {&outs[0], 1}, ctx).ok());
  EXPECT_FALSE(outs[0].empty());
  EXPECT_FALSE(pack_bf16_weights(both, outs, ctx).ok());
  EXPECT_TRUE(outs[0].empty());
  std::vector<float> y(d.m * d.n);
  MatmulParams p;
  p.x = TensorView::of(c.x16.data(), DType::kBF16, {d.m, d.k});
  p.w = w;
  p.y = TensorView::f32(y.data(), {d.m, d.n});
  p.w_packed = &outs[0];
  const Status s = matmul_forward(p, ctx);
  EXPECT_NE(s.to_string().find("w_packed is empty"), std::string::npos) << s.to_string();
  ASSERT_TRUE(pack_bf16_weights({&w, 1}, {&outs[0], 1}, ctx).ok());
  EXPECT_TRUE(matmul_forward(p, ctx).ok());  // packed again, read again
}

TEST(MatmulBf16Test, MixedOrWrongDtypesAreRefusedByName) {
  const Dims d{8, 6, 4};
  Case c(d, 41);
  std::vector<float> y(d.m * d.n), wf = c.w;
  const Context ctx = cpu_context(nullptr);
  MatmulParams p;
  p.x = TensorView::of(c.x16.data(), DType::kBF16, {d.m, d.k});
  p.w = TensorView::f32(wf.data(), {d.n, d.k});
  p.y = TensorView::f32(y.data(), {d.m, d.n});
  Status s = matmul_forward(p, ctx);
  EXPECT_NE(s.to_string().find("matmul_forward: w is f32[6,4] but must be bf16"), std::string::npos)
      << s.to_string();
  p.w = TensorView::of(c.w16.data(), DType::kBF16, {d.n, d.k});
  std::vector<uint16_t> y16(d.m * d.n);
  p.y = TensorView::of(y16.data(), DType::kBF16, {d.m, d.n});
  s = matmul_forward(p, ctx);
  EXPECT_NE(s.to_string().find("y is bf16[8,6] but must be f32"), std::string::npos)
      << s.to_string();
  std::vector<int32_t> xi(d.m * d.k);
  p.x = TensorView::i32(xi.data(), {d.m, d.k});
  s = matmul_forward(p, ctx);
  EXPECT_NE(s.to_string().find("x (i32[8,4]) must be f32 or bf16"), std::string::npos)
      << s.to_string();
  MatmulBackwardParams b;
  std::vector<float> dyf = c.dy, dx(d.m * d.k);
  b.dy = TensorView::f32(dyf.data(), {d.m, d.n});
  b.x = TensorView::of(c.x16.data(), DType::kBF16, {d.m, d.k});
  b.w = TensorView::of(c.w16.data(), DType::kBF16, {d.n, d.k});
  b.dx = TensorView::f32(dx.data(), {d.m, d.k});
  s = matmul_backward(b, ctx);
  EXPECT_NE(s.to_string().find("matmul_backward: dy is f32[8,6] but must be bf16"),
            std::string::npos)
      << s.to_string();
}

// Every bf16 GEMM of a GPT-2 block (its linears forward and backward, attention forward and
// backward on the thirds of a fused qkv) runs oneDNN's brgemm kernel: the operands kiln_ops hands
// it are dense, which its AMX and AVX512-BF16 kernels need (a strided one falls back to
// gemm:jit). Run without a pool on a thread of its own, so that its primitives are exactly the
// ones listed (a thread's cache keeps what earlier tests ran).
void run_gpt2_block_bf16() {
  const Context ctx = cpu_context(nullptr);
  // Two of the block's shapes, and one like the tied head's: a forward wider than kBf16Span
  // (computed span by span) whose dx reduces over more than the span (accumulated span by span,
  // each span of dy a strided block of its rows).
  for (const Dims& d : {Dims{256, 3 * 768, 768}, Dims{256, 768, 3072}, Dims{256, 3500, 768}}) {
    Case c(d, 51);
    Case::Out out;
    ASSERT_TRUE(c.run(ctx, &out).ok());
  }
  const int64_t B = 2, T = 200, H = 3, D = 64, C = H * D;
  std::vector<uint16_t> qkv = to_bf16(uniform(B * T * 3 * C, 61)),
                        dout = to_bf16(uniform(B * T * C, 62));
  std::vector<float> o(B * T * C), lse(B * H * T), dqkv(B * T * 3 * C);
  const auto third = [&](void* base, DType dtype, int64_t i) {
    return TensorView::strided(static_cast<char*>(base) + i * C * dtype_bytes(dtype), dtype,
                               {B, T, H, D}, {T * 3 * C, 3 * C, D, 1});
  };
  AttentionParams f{third(qkv.data(), DType::kBF16, 0),
                    third(qkv.data(), DType::kBF16, 1),
                    third(qkv.data(), DType::kBF16, 2),
                    TensorView::f32(o.data(), {B, T, H, D}),
                    TensorView::f32(lse.data(), {B, H, T}),
                    true,
                    0.0f};
  ASSERT_TRUE(attention_forward(f, ctx).ok());
  AttentionBackwardParams b{f.q,
                            f.k,
                            f.v,
                            f.o,
                            f.lse,
                            TensorView::of(dout.data(), DType::kBF16, {B, T, H, D}),
                            third(dqkv.data(), DType::kF32, 0),
                            third(dqkv.data(), DType::kF32, 1),
                            third(dqkv.data(), DType::kF32, 2),
                            true,
                            0.0f};
  ASSERT_TRUE(attention_backward(b, ctx).ok());
  const std::vector<std::string> kernels = bf16_gemm_kernels_run_here();
  ASSERT_FALSE(kernels.empty());
  for (const std::string& k : kernels)
    EXPECT_EQ(k.rfind("brg:", 0), 0u) << k;
}

TEST(MatmulBf16Test, AGpt2BlockRunsOnlyBrgemmKernels) {
  if (bf16_gemm_kernel(supported_isas().back()) == kBf16WidenedKernel) {
    GTEST_SKIP() << "no oneDNN bf16 path on this CPU (" << bf16_gemm_widened_reason()
                 << "): its GEMMs are widened to f32";
  }
  std::ifstream cpuinfo("/proc/cpuinfo");
  const std::string flags((std::istreambuf_iterator<char>(cpuinfo)), {});
  if (flags.find("avx512_bf16") == std::string::npos) {
    GTEST_SKIP() << "no AVX512-BF16: oneDNN's bf16 matmul is gemm:jit here by design";
  }
  std::thread fresh(run_gpt2_block_bf16);
  fresh.join();
}

TEST(MatmulBf16Test, NamesItsKernel) {
  // oneDNN's implementation string at AVX-512 (a brgemm or gemm kernel of an AVX-512 ISA);
  // below it, and on an AVX-512 CPU for which oneDNN has no bf16 matmul, the widened path, saying
  // why in the latter case.
  for (const CpuIsa isa : supported_isas()) {
    const std::string kernel = bf16_gemm_kernel(isa);
    if (isa == CpuIsa::kAvx512 && bf16_gemm_widened_reason().empty()) {
      EXPECT_NE(kernel.find("avx512"), std::string::npos) << kernel;
    } else {
      EXPECT_EQ(kernel, kBf16WidenedKernel) << cpu_isa_name(isa);
    }
  }
  // oneDNN's refusal is given exactly when it has no bf16 matmul here: on every CPU without
  // AVX-512, and on one with it only when oneDNN is capped below (ONEDNN_MAX_CPU_ISA).
  EXPECT_EQ(bf16_gemm_widened_reason().empty(),
            supported_isas().back() == CpuIsa::kAvx512 &&
                bf16_gemm_kernel(CpuIsa::kAvx512) != kBf16WidenedKernel);
}

}  // namespace
}  // namespace kiln::ops
