// See include/kiln/ops/matmul.h.
//
// Every GEMM is split over the Context's pool, each task calling the Context's GEMM library
// (OpenBLAS or oneDNN, kiln/ops/gemm_library.h) single-threaded on a block of output rows (or
// columns, when there are too few rows): one set of compute threads per process, and each
// element of the output is computed by one call with the whole reduction dimension, so the
// result does not depend on the thread count.
#include <kiln/ops/matmul.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "ops/cpu/kernels_linear.h"
#include "ops/dispatch.h"
#include "ops/gemm_call.h"
#include "ops/parallel.h"
#include "ops/validate.h"

namespace kiln::ops {
namespace {

// Fewer rows than this per task and a split costs more than it saves.
constexpr int64_t kMinRowsPerTask = 32;

// One row-major GEMM: C (m x n) = alpha * op(A) @ op(B) + beta * C, where op(A) is m x k
// (A stored k x m when trans_a) and op(B) is k x n (B stored n x k when trans_b).
struct Gemm {
  bool trans_a = false;
  bool trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  const float* a = nullptr;
  int64_t lda = 0;
  const float* b = nullptr;
  int64_t ldb = 0;
  float beta = 0;
  float* c = nullptr;
  int64_t ldc = 0;
  GemmLibrary library = GemmLibrary::kOpenBlas;
};

void run_block(const Gemm& g, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  if (m1 <= m0 || n1 <= n0) return;
  const float* a = g.trans_a ? g.a + m0 : g.a + m0 * g.lda;
  const float* b = g.trans_b ? g.b + n0 * g.ldb : g.b + n0;
  sgemm_single_threaded(g.library, g.trans_a, g.trans_b, m1 - m0, n1 - n0, g.k, a, g.lda, b, g.ldb,
                        g.beta, g.c + m0 * g.ldc + n0, g.ldc);
}

// Splits the GEMM into one block per thread, by rows when there are enough of them, else by
// columns; block edges are multiples of 16 (whole cache lines of C).
void run_gemm(const Gemm& g, const Context& ctx) {
  if (g.m == 0 || g.n == 0) return;
  const int threads = ctx.threads();
  const bool by_rows = g.m >= threads * kMinRowsPerTask || g.m >= g.n;
  const int64_t extent = by_rows ? g.m : g.n;
  const int64_t tasks = std::max<int64_t>(1, std::min<int64_t>(threads, extent / 16));
  const int64_t chunk = (extent + tasks - 1) / tasks;
  const int64_t step = (chunk + 15) / 16 * 16;
  run_parallel(ctx, tasks, [&](int64_t task, int) {
    const int64_t lo = std::min(extent, task * step);
    const int64_t hi = std::min(extent, lo + step);
    if (by_rows) {
      run_block(g, lo, hi, 0, g.n);
    } else {
      run_block(g, 0, g.m, lo, hi);
    }
  });
}

// The checks shared by forward and backward: f32, 2-d, unit inner stride, and the sizes that
// must agree. OpenBLAS takes int dimensions and leading dimensions.
Status check_matrix(const char* op, const char* name, const TensorView& t, int64_t rows,
                    int64_t cols) {
  KILN_RETURN_IF_ERROR(expect_shape(op, name, t, DType::kF32, {rows, cols}));
  KILN_RETURN_IF_ERROR(expect_unit_inner_stride(op, name, t));
  if (t.stride[0] < t.shape[1] || t.stride[0] > INT32_MAX || t.shape[0] > INT32_MAX) {
    return Status::invalid_argument(std::string(op) + ": " + name + " (" + t.describe() +
                                    ") needs a row stride in [columns, 2^31)");
  }
  return Status();
}

}  // namespace

Status matmul_forward(const MatmulParams& p, const Context& ctx) {
  constexpr const char* kOp = "matmul_forward";
  KILN_RETURN_IF_ERROR(check_cpu_dispatch(ctx, kOp));
  KILN_RETURN_IF_ERROR(expect_present(kOp, "x", p.x));
  KILN_RETURN_IF_ERROR(expect_present(kOp, "w", p.w));
  const int64_t m = p.x.ndim == 2 ? p.x.shape[0] : -1;
  const int64_t k = p.x.ndim == 2 ? p.x.shape[1] : -1;
  const int64_t n = p.w.ndim == 2 ? p.w.shape[0] : -1;
  KILN_RETURN_IF_ERROR(check_matrix(kOp, "x", p.x, -1, -1));
  KILN_RETURN_IF_ERROR(check_matrix(kOp, "w", p.w, n, k));
  KILN_RETURN_IF_ERROR(check_matrix(kOp, "y", p.y, m, n));
  if (p.bias.present()) {
    KILN_RETURN_IF_ERROR(expect_shape(kOp, "bias", p.bias, DType::kF32, {n}));
    KILN_RETURN_IF_ERROR(expect_contiguous(kOp, "bias", p.bias));
  }
  float* y = p.y.f32_ptr();
  const int64_t ldy = p.y.stride[0];
  if (k == 0) {  // an empty reduction: y is the bias (or zero)
    for (int64_t r = 0; r < m; ++r) {
      if (p.bias.present()) {
        std::memcpy(y + r * ldy, p.bias.f32_ptr(), n * sizeof(float));
      } else {
        std::memset(y + r * ldy, 0, n * sizeof(float));
      }
    }
    return Status();
  }
  Gemm g;
  g.library = ctx.gemm;
  g.trans_b = true;
  g.m = m, g.n = n, g.k = k;
  g.a = p.x.f32_ptr(), g.lda = p.x.stride[0];
  g.b = p.w.f32_ptr(), g.ldb = p.w.stride[0];
  g.c = y, g.ldc = ldy;
  if (p.bias.present()) {
    // y = bias, then y += x @ w^T: the bias row is copied in the same task that computes the
    // rows, while they are in cache.
    g.beta = 1.0f;
    const float* bias = p.bias.f32_ptr();
    const int threads = ctx.threads();
    const int64_t tasks = std::max<int64_t>(1, std::min<int64_t>(threads, m / kMinRowsPerTask));
    const int64_t step = ((m + tasks - 1) / tasks + 15) / 16 * 16;
    run_parallel(ctx, tasks, [&](int64_t task, int) {
      const int64_t lo = std::min(m, task * step);
      const int64_t hi = std::min(m, lo + step);
      for (int64_t r = lo; r < hi; ++r)
        std::memcpy(y + r * ldy, bias, n * sizeof(float));
      run_block(g, lo, hi, 0, n);
    });
    return Status();
  }
  run_gemm(g, ctx);
  return Status();
}

Status matmul_backward(const MatmulBackwardParams& p, const Context& ctx) {
  constexpr const char* kOp = "matmul_backward";
  KILN_RETURN_IF_ERROR(check_cpu_dispatch(ctx, kOp));
  KILN_RETURN_IF_ERROR(expect_present(kOp, "dy", p.dy));
  KILN_RETURN_IF_ERROR(expect_present(kOp, "x", p.x));
  KILN_RETURN_IF_ERROR(expect_present(kOp, "w", p.w));
  const int64_t m = p.x.ndim == 2 ? p.x.shape[0] : -1;
  const int64_t k = p.x.ndim == 2 ? p.x.shape[1] : -1;
  const int64_t n = p.w.ndim == 2 ? p.w.shape[0] : -1;
  KILN_RETURN_IF_ERROR(check_matrix(kOp, "x", p.x, -1, -1));
  KILN_RETURN_IF_ERROR(check_matrix(kOp, "w", p.w, n, k));
  KILN_RETURN_IF_ERROR(check_matrix(kOp, "dy", p.dy, m, n));
  if (p.dx.present()) KILN_RETURN_IF_ERROR(check_matrix(kOp, "dx", p.dx, m, k));
  if (p.dw.present()) KILN_RETURN_IF_ERROR(check_matrix(kOp, "dw", p.dw, n, k));
  if (p.dbias.present()) {
    KILN_RETURN_IF_ERROR(expect_shape(kOp, "dbias", p.dbias, DType::kF32, {n}));
    KILN_RETURN_IF_ERROR(expect_contiguous(kOp, "dbias", p.dbias));
  }
  if (p.dx.present()) {  // dx (=|+=) dy @ w: (m x n) @ (n x k)
    Gemm g;
    g.library = ctx.gemm;
    g.m = m, g.n = k, g.k = n;
    g.a = p.dy.f32_ptr(), g.lda = p.dy.stride[0];
    g.b = p.w.f32_ptr(), g.ldb = p.w.stride[0];
    g.beta = p.accumulate_dx ? 1.0f : 0.0f;
    g.c = p.dx.f32_ptr(), g.ldc = p.dx.stride[0];
    if (n == 0 && !p.accumulate_dx) {
      for (int64_t r = 0; r < m; ++r)
        std::memset(g.c + r * g.ldc, 0, k * sizeof(float));
    } else if (n > 0) {
      run_gemm(g, ctx);
    }
  }
  if (p.dw.present() && m > 0) {  // dw += dy^T @ x: (n x m) @ (m x k)
    Gemm g;
    g.library = ctx.gemm;
    g.trans_a = true;
    g.m = n, g.n = k, g.k = m;
    g.a = p.dy.f32_ptr(), g.lda = p.dy.stride[0];
    g.b = p.x.f32_ptr(), g.ldb = p.x.stride[0];
    g.beta = 1.0f;
    g.c = p.dw.f32_ptr(), g.ldc = p.dw.stride[0];
    run_gemm(g, ctx);
  }
  if (p.dbias.present() && m > 0) {
    return KILN_OPS_DISPATCH(ctx, kOp, column_sums_accumulate, p.dy, p.dbias, ctx);
  }
  return Status();
}

}  // namespace kiln::ops
