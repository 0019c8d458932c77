// Matmul against the double-precision reference (src/ops/ref/matmul_ref.cc), and what callers
// rely on: which gradients accumulate, absent operands untouched, strided views, results that do
// not depend on the thread count, errors naming the operand.
#include <kiln/base/thread_pool.h>
#include <kiln/ops/matmul.h>

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

// |got - want| / max(|want|, floor), floor a fraction of the buffer's largest |want|. OpenBLAS
// accumulates in f32 over the reduction (blocked): measured at most 1.8e-5 (dx, a 700-term
// reduction, on an element near the floor).
constexpr double kTolerance = 1e-4;
constexpr double kFloorFraction = 1e-2;

double buffer_err(const std::vector<float>& got, const std::vector<float>& want) {
  double scale = 0;
  for (float w : want)
    scale = std::max(scale, static_cast<double>(std::fabs(w)));
  return max_rel_err(got, want, std::max(kFloorFraction * scale, 1e-30));
}

struct Dims {
  int64_t m, n, k;
};

std::string describe(const Dims& d, int threads) {
  return "M=" + std::to_string(d.m) + " N=" + std::to_string(d.n) + " K=" + std::to_string(d.k) +
         " threads=" + std::to_string(threads);
}

// The buffers of one forward and backward, contiguous. Gradients start non-zero so that
// accumulation is visible.
struct Buffers {
  Buffers(const Dims& d, uint64_t seed)
      : x(uniform(d.m * d.k, seed)),
        w(uniform(d.n * d.k, seed + 1)),
        bias(uniform(d.n, seed + 2)),
        dy(uniform(d.m * d.n, seed + 3)),
        y(d.m * d.n, -3.0f),
        dx(uniform(d.m * d.k, seed + 4)),
        dw(uniform(d.n * d.k, seed + 5)),
        dbias(uniform(d.n, seed + 6)) {
    // A view with a null pointer is absent; empty shapes still get an address.
    for (auto* v : {&x, &w, &bias, &dy, &y, &dx, &dw, &dbias})
      v->reserve(1);
  }
  std::vector<float> x, w, bias, dy, y, dx, dw, dbias;

  MatmulParams forward(const Dims& d, bool with_bias) {
    MatmulParams p;
    p.x = TensorView::f32(x.data(), {d.m, d.k});
    p.w = TensorView::f32(w.data(), {d.n, d.k});
    if (with_bias) p.bias = TensorView::f32(bias.data(), {d.n});
    p.y = TensorView::f32(y.data(), {d.m, d.n});
    return p;
  }
  MatmulBackwardParams backward(const Dims& d, bool accumulate_dx) {
    MatmulBackwardParams p;
    p.dy = TensorView::f32(dy.data(), {d.m, d.n});
    p.x = TensorView::f32(x.data(), {d.m, d.k});
    p.w = TensorView::f32(w.data(), {d.n, d.k});
    p.dx = TensorView::f32(dx.data(), {d.m, d.k});
    p.dw = TensorView::f32(dw.data(), {d.n, d.k});
    p.dbias = TensorView::f32(dbias.data(), {d.n});
    p.accumulate_dx = accumulate_dx;
    return p;
  }
};

Context cpu_context(CpuIsa isa, ThreadPool* pool, GemmLibrary gemm = GemmLibrary::kOpenBlas) {
  Context ctx;
  ctx.isa = isa;
  ctx.pool = pool;
  ctx.gemm = gemm;
  return ctx;
}

constexpr GemmLibrary kGemmLibraries[] = {GemmLibrary::kOpenBlas, GemmLibrary::kOneDnn};

// Single rows and columns, odd sizes, a long reduction, few rows with many columns (split by
// columns), many rows (split by rows).
const Dims kDims[] = {{1, 1, 1},   {3, 5, 7},      {64, 48, 33}, {130, 97, 70},
                      {2, 300, 5}, {257, 3, 1000}, {40, 700, 16}};

// Both GEMM libraries (kiln/ops/gemm_library.h): whichever a machine's race picks is checked.
TEST(MatmulTest, MatchesReferenceWithAndWithoutBias) {
  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    for (CpuIsa isa : supported_isas()) {
      for (GemmLibrary gemm : kGemmLibraries) {
        const Context ctx = cpu_context(isa, &pool, gemm);
        for (const Dims& d : kDims) {
          for (bool with_bias : {true, false}) {
            for (bool accumulate_dx : {false, true}) {
              const std::string what =
                  describe(d, threads) + " isa=" + std::string(cpu_isa_name(isa)) +
                  " gemm=" + std::string(gemm_library_name(gemm)) + (with_bias ? " bias" : "") +
                  (accumulate_dx ? " accumulate_dx" : "");
              Buffers got(d, 1), want(d, 1);
              ASSERT_TRUE(matmul_forward(got.forward(d, with_bias), ctx).ok()) << what;
              ASSERT_TRUE(ref::matmul_forward(want.forward(d, with_bias)).ok()) << what;
              ASSERT_TRUE(matmul_backward(got.backward(d, accumulate_dx), ctx).ok()) << what;
              ASSERT_TRUE(ref::matmul_backward(want.backward(d, accumulate_dx)).ok()) << what;
              EXPECT_LE(buffer_err(got.y, want.y), kTolerance) << what << " y";
              EXPECT_LE(buffer_err(got.dx, want.dx), kTolerance) << what << " dx";
              EXPECT_LE(buffer_err(got.dw, want.dw), kTolerance) << what << " dw";
              EXPECT_LE(buffer_err(got.dbias, want.dbias), kTolerance) << what << " dbias";
            }
          }
        }
      }
    }
  }
}

// dw and dbias accumulate and dx is overwritten: twice the same backward from zeroed gradients
// gives dw, dbias doubled and dx unchanged.
TEST(MatmulTest, ParameterGradientsAccumulateAndDxIsOverwritten) {
  const Dims d{50, 40, 30};
  ThreadPool pool(2);
  const Context ctx = cpu_context(supported_isas().back(), &pool);
  Buffers b(d, 2);
  std::fill(b.dw.begin(), b.dw.end(), 0.0f);
  std::fill(b.dbias.begin(), b.dbias.end(), 0.0f);
  ASSERT_TRUE(matmul_backward(b.backward(d, false), ctx).ok());
  const std::vector<float> dx1 = b.dx, dw1 = b.dw, dbias1 = b.dbias;
  ASSERT_TRUE(matmul_backward(b.backward(d, false), ctx).ok());
  EXPECT_EQ(b.dx, dx1);
  for (size_t i = 0; i < dw1.size(); ++i)
    ASSERT_EQ(b.dw[i], 2 * dw1[i]) << i;
  for (size_t i = 0; i < dbias1.size(); ++i)
    ASSERT_EQ(b.dbias[i], 2 * dbias1[i]) << i;
}

TEST(MatmulTest, AbsentGradientsAreSkippedAndLeftUntouched) {
  const Dims d{20, 12, 9};
  const Context ctx = cpu_context(supported_isas().back(), nullptr);
  for (int present = 0; present < 8; ++present) {  // bit 0 dx, bit 1 dw, bit 2 dbias
    Buffers got(d, 3), want(d, 3);
    const Buffers initial(d, 3);
    MatmulBackwardParams p = got.backward(d, false);
    if (!(present & 1)) p.dx = TensorView();
    if (!(present & 2)) p.dw = TensorView();
    if (!(present & 4)) p.dbias = TensorView();
    ASSERT_TRUE(matmul_backward(p, ctx).ok()) << present;
    ASSERT_TRUE(ref::matmul_backward(want.backward(d, false)).ok());
    EXPECT_TRUE((present & 1) ? buffer_err(got.dx, want.dx) <= kTolerance : got.dx == initial.dx);
    EXPECT_TRUE((present & 2) ? buffer_err(got.dw, want.dw) <= kTolerance : got.dw == initial.dw);
    EXPECT_TRUE((present & 4) ? buffer_err(got.dbias, want.dbias) <= kTolerance
                              : got.dbias == initial.dbias);
  }
}

// Views into wider buffers (a column slice of each row): the results land in the slice and the
// padding keeps its sentinel.
TEST(MatmulTest, StridedViewsReadAndWriteOnlyTheirElements) {
  const Dims d{33, 21, 17};
  const int64_t pad = 3;
  ThreadPool pool(2);
  const Context ctx = cpu_context(supported_isas().back(), &pool);
  Buffers flat(d, 4);
  ASSERT_TRUE(matmul_forward(flat.forward(d, true), ctx).ok());
  ASSERT_TRUE(matmul_backward(flat.backward(d, false), ctx).ok());

  const Buffers initial(d, 4);
  auto widen = [&](const std::vector<float>& v, int64_t rows, int64_t cols) {
    std::vector<float> out(rows * (cols + pad), -9.0f);
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(v.begin() + r * cols, cols, out.begin() + r * (cols + pad));
    return out;
  };
  auto view = [&](std::vector<float>& v, int64_t rows, int64_t cols) {
    return TensorView::strided(v.data(), DType::kF32, {rows, cols}, {cols + pad, 1});
  };
  std::vector<float> x = widen(initial.x, d.m, d.k), w = widen(initial.w, d.n, d.k);
  std::vector<float> y = widen(initial.y, d.m, d.n), dy = widen(initial.dy, d.m, d.n);
  std::vector<float> dx = widen(initial.dx, d.m, d.k), dw = widen(initial.dw, d.n, d.k);
  std::vector<float> bias = initial.bias, dbias = initial.dbias;
  MatmulParams p;
  p.x = view(x, d.m, d.k), p.w = view(w, d.n, d.k), p.y = view(y, d.m, d.n);
  p.bias = TensorView::f32(bias.data(), {d.n});
  ASSERT_TRUE(matmul_forward(p, ctx).ok());
  MatmulBackwardParams bp;
  bp.dy = view(dy, d.m, d.n), bp.x = p.x, bp.w = p.w, bp.dx = view(dx, d.m, d.k);
  bp.dw = view(dw, d.n, d.k), bp.dbias = TensorView::f32(dbias.data(), {d.n});
  ASSERT_TRUE(matmul_backward(bp, ctx).ok());

  EXPECT_EQ(y, widen(flat.y, d.m, d.n));
  EXPECT_EQ(dx, widen(flat.dx, d.m, d.k));
  EXPECT_EQ(dw, widen(flat.dw, d.n, d.k));
  EXPECT_EQ(dbias, flat.dbias);
}

// Every output element is computed by one single-threaded library call over the whole
// reduction, in blocks fixed by the thread count: a thread count gives the same bits run after
// run. Across thread counts the blocks' edges move, and whether the bits move with them is the
// library's kernel's: on the Intel Xeons seen (OpenBLAS's SkylakeX and Cooperlake kernels,
// oneDNN's AVX-512 sgemm) they did not; on an AMD EPYC (Zen 3) they did with both libraries
// (OpenBLAS's kernel there finishes a call's last rows with narrower kernels that order the sums
// otherwise: bench/ops/sgemm_split_probe.cc shows which splits keep the bits). So across thread
// counts the results agree within f32 rounding (kTolerance, as against the reference).
TEST(MatmulTest, ResultsAreFixedForAThreadCountAndCloseAcrossThem) {
  for (GemmLibrary gemm : kGemmLibraries) {
    for (const Dims& d : {Dims{300, 200, 150}, Dims{7, 900, 64}}) {
      std::vector<float> y1, dx1, dw1, dbias1;
      for (int threads : {1, 2, 5}) {
        ThreadPool pool(threads);
        const Context ctx = cpu_context(supported_isas().back(), &pool, gemm);
        const std::string what =
            describe(d, threads) + " gemm=" + std::string(gemm_library_name(gemm));
        Buffers b(d, 6), again(d, 6);
        ASSERT_TRUE(matmul_forward(b.forward(d, true), ctx).ok());
        ASSERT_TRUE(matmul_backward(b.backward(d, false), ctx).ok());
        ASSERT_TRUE(matmul_forward(again.forward(d, true), ctx).ok());
        ASSERT_TRUE(matmul_backward(again.backward(d, false), ctx).ok());
        EXPECT_EQ(again.y, b.y) << what << ": a second run differs";
        EXPECT_EQ(again.dx, b.dx) << what << ": a second run differs";
        EXPECT_EQ(again.dw, b.dw) << what << ": a second run differs";
        if (threads == 1) {
          y1 = b.y, dx1 = b.dx, dw1 = b.dw, dbias1 = b.dbias;
          continue;
        }
        EXPECT_LE(buffer_err(b.y, y1), kTolerance) << what;
        EXPECT_LE(buffer_err(b.dx, dx1), kTolerance) << what;
        EXPECT_LE(buffer_err(b.dw, dw1), kTolerance) << what;
        EXPECT_EQ(b.dbias, dbias1) << what;  // Kiln's own sum, in a fixed order
      }
    }
  }
}

TEST(MatmulTest, EmptyReductionGivesTheBias) {
  const Dims d{4, 6, 0};
  Buffers b(d, 8);
  ASSERT_TRUE(matmul_forward(b.forward(d, true), cpu_context(CpuIsa::kScalar, nullptr)).ok());
  for (int64_t r = 0; r < d.m; ++r) {
    for (int64_t c = 0; c < d.n; ++c)
      ASSERT_EQ(b.y[r * d.n + c], b.bias[c]);
  }
}

void expect_error_mentions(const Status& status, const std::string& needle) {
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.to_string().find(needle), std::string::npos)
      << "'" << status.to_string() << "' should mention '" << needle << "'";
}

TEST(MatmulTest, BadOperandsAreRejectedByNameAndNothingIsWritten) {
  const Dims d{8, 6, 4};
  const Context ctx = cpu_context(CpuIsa::kScalar, nullptr);
  Buffers b(d, 9);
  const std::vector<float> y0 = b.y;
  {
    MatmulParams p = b.forward(d, true);
    p.w = TensorView::f32(b.w.data(), {d.n, d.k - 1});
    expect_error_mentions(matmul_forward(p, ctx), "matmul_forward: w is f32[6,3] but must be");
  }
  {
    MatmulParams p = b.forward(d, true);
    p.bias = TensorView::f32(b.bias.data(), {d.n - 1});
    expect_error_mentions(matmul_forward(p, ctx), "bias is f32[5]");
  }
  {
    MatmulParams p = b.forward(d, false);
    p.y = TensorView::strided(b.y.data(), DType::kF32, {d.m, d.n}, {1, d.m});
    expect_error_mentions(matmul_forward(p, ctx), "y (");
  }
  EXPECT_EQ(b.y, y0);
  {
    MatmulBackwardParams p = b.backward(d, false);
    p.dw = TensorView::f32(b.dw.data(), {d.k, d.n});
    expect_error_mentions(matmul_backward(p, ctx), "matmul_backward: dw is f32[4,6]");
  }
  {
    MatmulBackwardParams p = b.backward(d, false);
    p.dy = TensorView();
    expect_error_mentions(matmul_backward(p, ctx), "dy is missing");
  }
}

}  // namespace
}  // namespace kiln::ops
