// One single-threaded row-major GEMM through the chosen library: the only place kiln_ops calls
// cblas_sgemm or dnnl_sgemm (matmul.cc's tasks and the race of gemm_library.cc both come here,
// so the race times exactly what matmuls run).
//
//   C (m x n) = op(A) @ op(B) + beta * C, op(A) m x k (stored k x m when trans_a), op(B) k x n
//   (stored n x k when trans_b); lda, ldb, ldc are row strides in elements.
//
// REQUIRES: every dimension and stride fits an int (OpenBLAS takes int); the caller checks.
// Thread-safe: each calling thread runs the library on itself alone (OpenBLAS is told to use one
// thread; oneDNN's OpenMP team for the calling thread is set to one thread on its first call).
#ifndef KILN_OPS_GEMM_CALL_H_
#define KILN_OPS_GEMM_CALL_H_

#include <cstdint>

#include <kiln/ops/gemm_library.h>

namespace kiln::ops {

void sgemm_single_threaded(GemmLibrary library, bool trans_a, bool trans_b, int64_t m, int64_t n,
                           int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                           float beta, float* c, int64_t ldc);

}  // namespace kiln::ops

#endif  // KILN_OPS_GEMM_CALL_H_
