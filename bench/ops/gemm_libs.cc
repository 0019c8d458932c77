/* GEMM libraries side by side: OpenBLAS (whatever core it loaded, which OPENBLAS_CORETYPE
   decides) and oneDNN (which dispatches on the CPU's ISA flags at run time) on the shapes a
   GPT-2 training step runs, called the way kiln_ops calls a GEMM: each of T threads runs the
   library single-threaded on its own block of output rows (src/ops/matmul.cc). What the
   decision in docs/ops.md ("Which GEMM library") is measured with; bench/ops/gemm_choice runs
   it under each OpenBLAS core.

   Invariants: 2*M*N*K flops per GEMM; inputs are small integers in [-3, 3], so every dot
   product (K <= 8192: |sum| <= 73728 < 2^24) is exact in fp32 in any summation order, and the
   two libraries' outputs must be equal element for element; a mismatch is reported and makes
   the exit code 1. Each cell is the best of --reps timed runs after one untimed run.

   Build: g++ -O2 -std=c++20 gemm_libs.cc $(pkg-config --cflags --libs openblas) -ldnnl -lpthread
   Run:   OMP_NUM_THREADS=1 ./gemm_libs [--tokens 2048] [--threads 1,2] [--reps 5] [--json] */
#include <cblas.h>
#include <dnnl.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

extern "C" char* openblas_get_corename(void);
extern "C" void openblas_set_num_threads(int);

namespace {

struct Shape {
  const char* name;
  bool trans_a;
  bool trans_b;
  int64_t m, n, k;
};

// GPT-2 124M's step at B*T = `tokens` rows, C = 768 (row-major, weights stored (out, in) as in
// llm.c, so forward is A @ W^T): forward projections, the two backward products of the MLP's
// first layer, the tied head on half the tokens, and the square reference shape of sgemm_peak.
std::vector<Shape> shapes_for(int64_t tokens) {
  return {
      {"square 2048^3 (NN)", false, false, 2048, 2048, 2048},
      {"qkv fwd (NT)", false, true, tokens, 2304, 768},
      {"fc fwd (NT)", false, true, tokens, 3072, 768},
      {"fcproj fwd (NT)", false, true, tokens, 768, 3072},
      {"fc dinp (NN)", false, false, tokens, 768, 3072},
      {"fc dW (TN)", true, false, 3072, 768, tokens},
      {"head fwd (NT)", false, true, std::max<int64_t>(16, tokens / 2), 50304, 768},
  };
}
constexpr int kThreadsMax = 64;

struct Buffers {
  std::vector<float> a, b, c_blas, c_dnnl;
};

void fill(std::vector<float>& v, uint64_t stride) {
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>(static_cast<int64_t>((i * stride) % 7) - 3);
}

// Rows [m0, m1) of C = op(A) op(B) with one library, single-threaded.
void run_rows(bool dnnl, const Shape& s, const Buffers& buf, float* c, int64_t m0, int64_t m1) {
  if (m1 <= m0) return;
  const int64_t lda = s.trans_a ? s.m : s.k;
  const int64_t ldb = s.trans_b ? s.k : s.n;
  const float* a = s.trans_a ? buf.a.data() + m0 : buf.a.data() + m0 * lda;
  float* cc = c + m0 * s.n;
  if (dnnl) {
    dnnl_sgemm(s.trans_a ? 'T' : 'N', s.trans_b ? 'T' : 'N', m1 - m0, s.n, s.k, 1.0f, a, lda,
               buf.b.data(), ldb, 0.0f, cc, s.n);
  } else {
    cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans,
                s.trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m1 - m0),
                static_cast<int>(s.n), static_cast<int>(s.k), 1.0f, a, static_cast<int>(lda),
                buf.b.data(), static_cast<int>(ldb), 0.0f, cc, static_cast<int>(s.n));
  }
}

double time_once(bool dnnl, const Shape& s, const Buffers& buf, float* c, int threads) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  // Block edges on multiples of 16 rows, as kiln_ops splits.
  const int64_t per = ((s.m + threads - 1) / threads + 15) / 16 * 16;
  for (int t = 0; t < threads; ++t) {
    const int64_t m0 = std::min<int64_t>(s.m, t * per);
    const int64_t m1 = std::min<int64_t>(s.m, m0 + per);
    pool.emplace_back([&, m0, m1] { run_rows(dnnl, s, buf, c, m0, m1); });
  }
  for (std::thread& th : pool)
    th.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool parse_list(std::string_view text, std::vector<int>* out) {
  out->clear();
  while (!text.empty()) {
    const size_t comma = std::min(text.find(','), text.size());
    int v = 0;
    const auto [p, ec] = std::from_chars(text.data(), text.data() + comma, v);
    if (ec != std::errc() || p != text.data() + comma || v < 1 || v > kThreadsMax) return false;
    out->push_back(v);
    text.remove_prefix(std::min(comma + 1, text.size()));
  }
  return !out->empty();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> threads{1, 2};
  int reps = 5;
  int tokens = 2048;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--json") {
      json = true;
    } else if (arg == "--threads" && i + 1 < argc && parse_list(argv[i + 1], &threads)) {
      ++i;
    } else if (arg == "--tokens" && i + 1 < argc) {
      const std::string_view v = argv[++i];
      const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), tokens);
      if (ec != std::errc() || p != v.data() + v.size() || tokens < 16 || tokens > 8192) {
        std::fprintf(stderr, "gemm_libs: --tokens '%s' is not in 16..8192\n", argv[i]);
        return 2;
      }
    } else if (arg == "--reps" && i + 1 < argc) {
      const std::string_view v = argv[++i];
      const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), reps);
      if (ec != std::errc() || p != v.data() + v.size() || reps < 1 || reps > 100) {
        std::fprintf(stderr, "gemm_libs: --reps '%s' is not in 1..100\n", argv[i]);
        return 2;
      }
    } else {
      std::fprintf(stderr, "gemm_libs: unknown flag or bad value '%s'\n", argv[i]);
      return 2;
    }
  }
  openblas_set_num_threads(1);
  const dnnl_version_t* dv = dnnl_version();
  const char* core = openblas_get_corename();
  bool all_equal = true;
  for (const Shape& s : shapes_for(tokens)) {
    Buffers buf;
    buf.a.resize(static_cast<size_t>(s.m * s.k));
    buf.b.resize(static_cast<size_t>(s.k * s.n));
    buf.c_blas.assign(static_cast<size_t>(s.m * s.n), 0.0f);
    buf.c_dnnl.assign(static_cast<size_t>(s.m * s.n), 0.0f);
    fill(buf.a, 5);
    fill(buf.b, 3);
    for (int t : threads) {
      double best[2] = {1e30, 1e30};
      for (int lib = 0; lib < 2; ++lib) {
        float* c = lib == 1 ? buf.c_dnnl.data() : buf.c_blas.data();
        time_once(lib == 1, s, buf, c, t);  // untimed: page faults, library start-up
      }
      // Interleaved, so that a noisy moment hurts both.
      for (int r = 0; r < reps; ++r) {
        for (int lib = 0; lib < 2; ++lib) {
          float* c = lib == 1 ? buf.c_dnnl.data() : buf.c_blas.data();
          best[lib] = std::min(best[lib], time_once(lib == 1, s, buf, c, t));
        }
      }
      const bool equal = buf.c_blas == buf.c_dnnl;
      all_equal = all_equal && equal;
      const double flops = 2.0 * static_cast<double>(s.m) * s.n * s.k;
      const double g_blas = flops / best[0] / 1e9;
      const double g_dnnl = flops / best[1] / 1e9;
      if (json) {
        std::printf(
            "{\"shape\": \"%s %lldx%lldx%lld\", \"threads\": %d, \"openblas_core\": \"%s\", "
            "\"openblas_gflops\": %.1f, \"onednn_version\": \"%d.%d.%d\", \"onednn_gflops\": %.1f, "
            "\"onednn_over_openblas\": %.3f, \"equal\": %s}\n",
            s.name, static_cast<long long>(s.m), static_cast<long long>(s.n),
            static_cast<long long>(s.k), t, core, g_blas, dv->major, dv->minor, dv->patch, g_dnnl,
            g_dnnl / g_blas, equal ? "true" : "false");
      } else {
        std::printf(
            "%-20s %5lldx%5lldx%5lld %d thr  OpenBLAS(%s) %7.1f  oneDNN %d.%d %7.1f GFLOP/s  %.2fx "
            " %s\n",
            s.name, static_cast<long long>(s.m), static_cast<long long>(s.n),
            static_cast<long long>(s.k), t, core, g_blas, dv->major, dv->minor, g_dnnl,
            g_dnnl / g_blas, equal ? "equal" : "RESULTS DIFFER");
      }
      std::fflush(stdout);
    }
  }
  return all_equal ? 0 : 1;
}
