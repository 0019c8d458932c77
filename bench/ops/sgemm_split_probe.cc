/* sgemm split probe: does splitting one single-threaded GEMM into two calls at a row (or column)
   of C change any bit of C? kiln_ops splits each f32 GEMM into one block of rows per thread
   (src/ops/matmul.cc), so this is what decides whether a GEMM's bits follow the thread count
   (docs/ops.md, Threads). For each operand layout of kiln_ops' GEMMs (x w^T, dy w, dy^T x) and
   each split it prints "=" (the same bits as one call) or "X", for OpenBLAS as linked (the core
   it picks for this CPU, or OPENBLAS_CORETYPE's).

   Build and run:
     g++ -O2 bench/ops/sgemm_split_probe.cc -o build/sgemm_split_probe \
       $(pkg-config --cflags --libs openblas) && build/sgemm_split_probe */
#include <cblas.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

namespace {

// C (m x n) = op(A) op(B), op(A) m x k (stored k x m when ta), op(B) k x n (stored n x k when
// tb), as one call and as two split at row (or column) `split`: how many elements differ.
int differing(bool ta, bool tb, int m, int n, int k, int split, bool by_columns) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> a(static_cast<size_t>(m) * k), b(static_cast<size_t>(n) * k);
  std::vector<float> one(static_cast<size_t>(m) * n), two(one.size());
  for (float& v : a)
    v = u(rng);
  for (float& v : b)
    v = u(rng);
  const int lda = ta ? m : k, ldb = tb ? k : n;
  const auto TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
  cblas_sgemm(CblasRowMajor, TA, TB, m, n, k, 1, a.data(), lda, b.data(), ldb, 0, one.data(), n);
  if (!by_columns) {
    const float* a2 = ta ? a.data() + split : a.data() + static_cast<size_t>(split) * k;
    cblas_sgemm(CblasRowMajor, TA, TB, split, n, k, 1, a.data(), lda, b.data(), ldb, 0, two.data(),
                n);
    cblas_sgemm(CblasRowMajor, TA, TB, m - split, n, k, 1, a2, lda, b.data(), ldb, 0,
                two.data() + static_cast<size_t>(split) * n, n);
  } else {
    const float* b2 = tb ? b.data() + static_cast<size_t>(split) * k : b.data() + split;
    cblas_sgemm(CblasRowMajor, TA, TB, m, split, k, 1, a.data(), lda, b.data(), ldb, 0, two.data(),
                n);
    cblas_sgemm(CblasRowMajor, TA, TB, m, n - split, k, 1, a.data(), lda, b2, ldb, 0,
                two.data() + split, n);
  }
  int count = 0;
  for (size_t i = 0; i < one.size(); ++i)
    count += std::memcmp(&one[i], &two[i], sizeof(float)) != 0 ? 1 : 0;
  return count;
}

}  // namespace

int main() {
  openblas_set_num_threads(1);
  std::printf("OpenBLAS core %s; C 600 x 600, k 150; '=' same bits as one call, 'X' not\n",
              openblas_get_corename());
  const int splits[] = {8, 16, 24, 32, 48, 72, 96, 120, 128, 144, 192, 256, 288, 384};
  for (const bool by_columns : {false, true}) {
    for (const auto& [ta, tb] : {std::pair{false, true}, {false, false}, {true, false}}) {
      std::printf("split %s, %s:", by_columns ? "columns" : "rows",
                  ta ? "dy^T x" : (tb ? "x w^T" : "dy w"));
      for (const int split : splits)
        std::printf(" %d%s", split,
                    differing(ta, tb, 600, 600, 150, split, by_columns) ? "X" : "=");
      std::printf("\n");
    }
  }
  return 0;
}
