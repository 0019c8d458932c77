/* sgemm peak: the machine's fp32 matmul ceiling, which bench/ops/run divides every matmul and
   attention figure by and bench/train/run its MFU: the better of the two GEMM libraries
   kiln_ops can call (kiln/ops/gemm_library.h), OpenBLAS under the core the environment names
   and oneDNN, so that MFU is against the best kernel the CPU has.

   Linked against the OpenBLAS Kiln links (pkg-config openblas: Debian's pthread build) and
   Debian's oneDNN (OpenMP). For each thread count of --threads it sets the library's thread
   count (openblas_set_num_threads, omp_set_num_threads), runs one untimed sgemm (thread pool
   start-up, page faults), then --reps timed C = A * B on row-major M = N = K = --size and
   keeps the best, as a peak is reported; "gflops" is the better library's.

   Invariants: 2*M*N*K flops per sgemm; A and B hold small integers (exact in fp32, and every
   dot product of the default size stays below 2^24, so the result is exact in any summation
   order); after the timed runs kCheckedEntries entries of C are compared with == against a
   dot product computed here, and a wrong one makes the exit code 1. Prints one JSON line per
   thread count with --json. */
#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr uint64_t kSizeMin = 64;  // below this a single call is noise, not a peak
// 8192^2 floats = 256 MiB per matrix, 768 MiB for three: fits this 24 GiB host with room.
constexpr uint64_t kSizeMax = 8192;
constexpr uint64_t kThreadsMax = 256;  // more threads than any host here has CPUs
constexpr uint64_t kRepsMax = 1000;
constexpr size_t kThreadCountsMax = 16;  // entries of --threads 1,2,...
// Inputs are ((i * kStride) % kPeriod) - kOffset: integers in [-3, 3]. A dot product of K such
// products is at most 9K in magnitude, exact in fp32 while 9K < 2^24, i.e. K < 1.8M.
constexpr uint64_t kPeriod = 7;
constexpr uint64_t kOffset = 3;
constexpr uint64_t kStrideA = 5;
constexpr uint64_t kStrideB = 3;
constexpr uint64_t kCheckedEntries = 64;  // spread over C; each costs one K-long dot product
// Only for the exactness argument above; kSizeMax is far below it.
static_assert(9 * kSizeMax < (uint64_t{1} << 24));

struct Options {
  uint64_t size = 2048;                 // the brief's M = N = K
  std::vector<uint64_t> threads{1, 2};  // 2 = one per vCPU of this machine
  uint64_t reps = 5;                    // timed sgemms; the best counts
  bool json = false;
};

bool parse_u64(std::string_view text, uint64_t* value) {
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, *value);
  return ec == std::errc() && ptr == end && !text.empty();
}

std::string parse_args(int argc, char** argv, Options* options) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--json") {
      options->json = true;
      continue;
    }
    if (i + 1 >= argc) return "unknown flag or missing value: '" + std::string(arg) + "'";
    const std::string_view value = argv[++i];
    uint64_t number = 0;
    if (arg == "--size" || arg == "--reps") {
      const uint64_t min = arg == "--size" ? kSizeMin : 1;
      const uint64_t max = arg == "--size" ? kSizeMax : kRepsMax;
      if (!parse_u64(value, &number) || number < min || number > max) {
        return std::string(arg) + ": '" + std::string(value) + "' is not in " +
               std::to_string(min) + ".." + std::to_string(max);
      }
      (arg == "--size" ? options->size : options->reps) = number;
    } else if (arg == "--threads") {
      options->threads.clear();
      std::string_view rest = value;
      while (!rest.empty()) {
        const size_t comma = std::min(rest.find(','), rest.size());
        if (!parse_u64(rest.substr(0, comma), &number) || number < 1 || number > kThreadsMax ||
            options->threads.size() == kThreadCountsMax) {
          return "--threads: '" + std::string(value) + "' is not a list of at most " +
                 std::to_string(kThreadCountsMax) + " counts in 1.." + std::to_string(kThreadsMax);
        }
        options->threads.push_back(number);
        rest.remove_prefix(std::min(comma + 1, rest.size()));
      }
      if (options->threads.empty()) return "--threads: empty list";
    } else {
      return "unknown flag '" + std::string(arg) + "'";
    }
  }
  return "";
}

float input(uint64_t index, uint64_t stride) {
  return static_cast<float>(static_cast<int64_t>((index * stride) % kPeriod) -
                            static_cast<int64_t>(kOffset));
}

// C (n, n) = A (n, n) * B (n, n), row-major, with OpenBLAS or (onednn) oneDNN.
void sgemm(bool onednn, const std::vector<float>& a, const std::vector<float>& b,
           std::vector<float>* c, int n) {
  if (onednn) {
    dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c->data(), n);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
              0.0f, c->data(), n);
}

// The best of `reps` timed runs after one untimed one, in seconds.
double best_seconds(bool onednn, const std::vector<float>& a, const std::vector<float>& b,
                    std::vector<float>* c, int n, uint64_t reps) {
  sgemm(onednn, a, b, c, n);  // warmup, untimed
  double best_s = 0;
  for (uint64_t rep = 0; rep < reps; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    sgemm(onednn, a, b, c, n);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (rep == 0 || s < best_s) best_s = s;
  }
  return best_s;
}

bool check(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& c,
           uint64_t n) {
  for (uint64_t e = 0; e < kCheckedEntries; ++e) {
    // A spread of rows and columns, corners included (e = 0 and the last e).
    const uint64_t row = e * (n - 1) / (kCheckedEntries - 1);
    const uint64_t col = (n - 1) - row;
    double sum = 0;
    for (uint64_t k = 0; k < n; ++k)
      sum += static_cast<double>(a[row * n + k]) * b[k * n + col];
    if (static_cast<double>(c[row * n + col]) != sum) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  const std::string error = parse_args(argc, argv, &options);
  if (!error.empty()) {
    std::fprintf(stderr,
                 "sgemm_peak: %s\nusage: sgemm_peak [--size N (2048, %llu..%llu)] "
                 "[--threads T,T,... (1,2)] [--reps N (5)] [--json]\n",
                 error.c_str(), static_cast<unsigned long long>(kSizeMin),
                 static_cast<unsigned long long>(kSizeMax));
    return 2;
  }
  const uint64_t n = options.size;
  std::vector<float> a(n * n);  // (n, n)
  std::vector<float> b(n * n);  // (n, n)
  std::vector<float> c(n * n);  // (n, n)
  for (uint64_t i = 0; i < n * n; ++i) {
    a[i] = input(i, kStrideA);
    b[i] = input(i, kStrideB);
  }
  const double flops =
      2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  const int parallel = openblas_get_parallel();  // 0 serial, 1 pthreads, 2 OpenMP
  const char* threading = parallel == 2 ? "openmp" : parallel == 1 ? "pthread" : "serial";
  bool all_correct = true;
  const dnnl_version_t* dv = dnnl_version();
  for (const uint64_t threads : options.threads) {
    openblas_set_num_threads(static_cast<int>(threads));
    omp_set_num_threads(static_cast<int>(threads));
    const double blas_s = best_seconds(false, a, b, &c, static_cast<int>(n), options.reps);
    bool correct = check(a, b, c, n);
    std::fill(c.begin(), c.end(), 0.0f);
    const double dnnl_s = best_seconds(true, a, b, &c, static_cast<int>(n), options.reps);
    correct = correct && check(a, b, c, n);
    all_correct &= correct;
    const double blas_gflops = flops / blas_s / 1e9;
    const double dnnl_gflops = flops / dnnl_s / 1e9;
    const bool dnnl_best = dnnl_gflops > blas_gflops;
    const double gflops = dnnl_best ? dnnl_gflops : blas_gflops;
    const double best_s = dnnl_best ? dnnl_s : blas_s;
    if (options.json) {
      std::printf(
          "{\"op\":\"sgemm\",\"m\":%llu,\"n\":%llu,\"k\":%llu,\"threads\":%llu,\"reps\":%llu,"
          "\"best_ms\":%.4f,\"gflops\":%.3f,\"best_library\":\"%s\",\"openblas_gflops\":%.3f,"
          "\"onednn_gflops\":%.3f,\"onednn_version\":\"%d.%d.%d\",\"blas_threading\":\"%s\","
          "\"blas_config\":\"%s\",\"blas_core\":\"%s\",\"correct\":%s}\n",
          static_cast<unsigned long long>(n), static_cast<unsigned long long>(n),
          static_cast<unsigned long long>(n), static_cast<unsigned long long>(threads),
          static_cast<unsigned long long>(options.reps), best_s * 1e3, gflops,
          dnnl_best ? "onednn" : "openblas", blas_gflops, dnnl_gflops, dv->major, dv->minor,
          dv->patch, threading, openblas_get_config(), openblas_get_corename(),
          correct ? "true" : "false");
    } else {
      std::printf(
          "sgemm %llu^3, %llu threads, best of %llu: OpenBLAS (%s, %s) %.1f GFLOP/s, oneDNN "
          "%d.%d.%d %.1f GFLOP/s%s\n",
          static_cast<unsigned long long>(n), static_cast<unsigned long long>(threads),
          static_cast<unsigned long long>(options.reps), openblas_get_corename(), threading,
          blas_gflops, dv->major, dv->minor, dv->patch, dnnl_gflops,
          correct ? "" : " WRONG RESULT");
    }
    std::fflush(stdout);
  }
  return all_correct ? 0 : 1;
}
