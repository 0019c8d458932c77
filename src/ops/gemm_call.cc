// See gemm_call.h.
#include "ops/gemm_call.h"

#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <kiln/base/check.h>

namespace kiln::ops {

void sgemm_single_threaded(GemmLibrary library, bool trans_a, bool trans_b, int64_t m, int64_t n,
                           int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                           float beta, float* c, int64_t ldc) {
  if (library == GemmLibrary::kOneDnn) {
    // Debian's oneDNN runs on OpenMP: called from a thread that is not in an OpenMP team, it
    // would start a team of as many threads as CPUs under every one of kiln_ops' tasks. One
    // thread per calling thread, set once per thread (the setting is the calling thread's own).
    // (A bf16 GEMM, gemm_bf16.cc, may have set another team size on this thread since.)
    if (omp_get_max_threads() != 1) omp_set_num_threads(1);
    const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, 1.0f,
                                            a, lda, b, ldb, beta, c, ldc);
    // The callers validated every shape and stride, so a refusal is a bug here, not bad input.
    KILN_CHECK(status == dnnl_success)
        << "dnnl_sgemm m=" << m << " n=" << n << " k=" << k << " lda=" << lda << " ldb=" << ldb
        << " ldc=" << ldc << " status=" << static_cast<int>(status);
    return;
  }
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(ldc));
}

}  // namespace kiln::ops
