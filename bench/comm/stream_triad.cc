/* STREAM triad, a[i] = b[i] + s * c[i], on doubles with T threads: the machine's memory
   bandwidth, which bench/comm/run turns into the memory-traffic limit of a 2-rank allreduce.

   Counted the STREAM way: 24 bytes per element per pass (read b, read c, write a; the
   write-allocate read of a is not counted). Each thread owns one contiguous slice of all three
   arrays, touches it first (so its pages sit near that thread) and triads only it; a pass is
   timed from a barrier before to a barrier after, so the time is that of the slowest thread.
   The figure is the best pass of --passes, as STREAM reports it.

   Invariants: each array is at least kArrayBytesMin (256 MiB, far past every cache here) and the
   three together 3x that; after the timed passes every a[i] is checked against the exact value,
   and a wrong one makes the exit code 1. Prints "triad_GBps" as JSON with --json. */
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "allreduce_bench_common.h"

namespace {

// STREAM's rule: each array at least 4x the last-level cache. 256 MiB is 8x the 32 MiB L3 of
// the EPYC parts these VMs run on.
constexpr uint64_t kArrayBytesMin = uint64_t{256} << 20;
constexpr uint64_t kArrayBytesMax = uint64_t{4} << 30;  // 3 x 4 GiB still fits in 24 GiB
// STREAM counts triad traffic as two 8-byte reads and one 8-byte write per element.
constexpr double kTriadBytesPerElement = 3 * sizeof(double);
constexpr uint64_t kThreadsMax = 256;  // more threads than any host here has CPUs
constexpr uint64_t kPassesMax = 1000;
// Scalar and initial values are exact in binary, so the check can use ==: a = 2 + 3 * 1 = 5.
constexpr double kScalar = 3.0;
constexpr double kInitA = 0.0;
constexpr double kInitB = 2.0;
constexpr double kInitC = 1.0;
constexpr double kExpectedA = kInitB + kScalar * kInitC;

struct Options {
  uint64_t array_bytes = kArrayBytesMin;  // bytes per array
  uint64_t threads = 2;                   // one per vCPU of this machine
  uint64_t passes = 10;                   // timed passes; the best counts
  bool json = false;
};

std::string parse_args(int argc, char** argv, Options* options) {
  std::string error;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--json") {
      options->json = true;
      continue;
    }
    struct Numeric {
      std::string_view name;
      uint64_t* target;
      uint64_t min;
      uint64_t max;
    };
    const Numeric numerics[] = {
        {"--array-bytes", &options->array_bytes, kArrayBytesMin, kArrayBytesMax},
        {"--threads", &options->threads, 1, kThreadsMax},
        {"--passes", &options->passes, 1, kPassesMax},
    };
    bool known = false;
    for (const Numeric& numeric : numerics) {
      if (!kiln_bench::is_flag(arg, numeric.name)) continue;
      std::string_view value;
      if (!kiln_bench::flag_value(argc, argv, &i, numeric.name, &value, &error)) return error;
      if (!kiln_bench::parse_u64(value, numeric.target) || *numeric.target < numeric.min ||
          *numeric.target > numeric.max) {
        return std::string(numeric.name) + ": '" + std::string(value) + "' is not in " +
               std::to_string(numeric.min) + ".." + std::to_string(numeric.max);
      }
      known = true;
      break;
    }
    if (!known) return "unknown flag '" + std::string(arg) + "'";
  }
  return "";
}

// The three arrays, shared by all threads; thread t works only on its slice [begin, end).
// Allocated uninitialised (make_unique_for_overwrite), so that the first write to each page is
// the owning thread's.
struct Arrays {
  size_t count = 0;
  std::unique_ptr<double[]> a;  // (count)
  std::unique_ptr<double[]> b;  // (count)
  std::unique_ptr<double[]> c;  // (count)
};

void first_touch(Arrays* arrays, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) {
    arrays->a[i] = kInitA;
    arrays->b[i] = kInitB;
    arrays->c[i] = kInitC;
  }
}

void triad(double* __restrict a, const double* __restrict b, const double* __restrict c,
           size_t count) {
  for (size_t i = 0; i < count; ++i)
    a[i] = b[i] + kScalar * c[i];
}

// Returns the best pass's bandwidth in GB/s (1e9 bytes per second).
double measure(const Options& options, Arrays* arrays, bool* correct) {
  const size_t count = arrays->count;
  const size_t threads = options.threads;
  std::barrier sync(static_cast<std::ptrdiff_t>(threads + 1));  // workers + the timing thread
  std::vector<std::thread> workers;
  workers.reserve(threads);
  for (size_t t = 0; t < threads; ++t) {
    const size_t begin = count * t / threads;
    const size_t end = count * (t + 1) / threads;
    workers.emplace_back([&, begin, end] {
      first_touch(arrays, begin, end);
      sync.arrive_and_wait();  // all pages touched
      for (uint64_t pass = 0; pass < options.passes; ++pass) {
        sync.arrive_and_wait();  // start of the pass
        triad(arrays->a.get() + begin, arrays->b.get() + begin, arrays->c.get() + begin,
              end - begin);
        sync.arrive_and_wait();  // end of the pass
      }
    });
  }
  sync.arrive_and_wait();
  double best_s = 0;
  for (uint64_t pass = 0; pass < options.passes; ++pass) {
    sync.arrive_and_wait();
    const auto start = std::chrono::steady_clock::now();
    sync.arrive_and_wait();
    const double pass_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (pass == 0 || pass_s < best_s) best_s = pass_s;
  }
  for (std::thread& worker : workers)
    worker.join();
  bool equal = true;
  for (size_t i = 0; i < count; ++i)
    equal &= arrays->a[i] == kExpectedA;
  *correct = equal;
  return kTriadBytesPerElement * static_cast<double>(count) / best_s / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  const std::string error = parse_args(argc, argv, &options);
  if (!error.empty()) {
    std::fprintf(stderr,
                 "stream_triad: %s\nusage: stream_triad [--array-bytes B (>= %llu)] "
                 "[--threads T (2)] [--passes N (10)] [--json]\n",
                 error.c_str(), static_cast<unsigned long long>(kArrayBytesMin));
    return 2;
  }
  const size_t count = options.array_bytes / sizeof(double);
  Arrays arrays{count, std::make_unique_for_overwrite<double[]>(count),
                std::make_unique_for_overwrite<double[]>(count),
                std::make_unique_for_overwrite<double[]>(count)};
  bool correct = false;
  const double gbps = measure(options, &arrays, &correct);
  if (options.json) {
    std::printf(
        "{\"op\":\"triad\",\"threads\":%llu,\"array_bytes\":%llu,\"passes\":%llu,"
        "\"triad_GBps\":%.3f,\"correct\":%s}\n",
        static_cast<unsigned long long>(options.threads),
        static_cast<unsigned long long>(options.array_bytes),
        static_cast<unsigned long long>(options.passes), gbps, correct ? "true" : "false");
  } else {
    std::printf("triad: %.2f GB/s (%llu threads, 3 x %llu MiB, best of %llu)%s\n", gbps,
                static_cast<unsigned long long>(options.threads),
                static_cast<unsigned long long>(options.array_bytes >> 20),
                static_cast<unsigned long long>(options.passes), correct ? "" : " WRONG RESULT");
  }
  return correct ? 0 : 1;
}
