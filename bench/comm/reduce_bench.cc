// kiln_reduce_bench: throughput of kiln::comm::reduce() per ISA beside its peer, a plain
// `dst[i] = a[i] + b[i]` loop auto-vectorized by the compiler at -O3 for the same ISA.
//
//   kiln_reduce_bench [--dram-mib N]     (default 64)
//
// Cases: f32 sum and bf16 sum, with 64 KiB operands (all three buffers stay in L2) and with
// N MiB operands (DRAM). Throughput counts 3 x bytes per call (two reads, one write). Each figure
// is the best of several timed trials, after a warm-up call that also faults the pages in. Also
// times copy2 against two memcpy calls, which is the choice its implementation made.
//
// Every kernel is checked against the peer's output before it is timed, so a fast wrong kernel
// cannot post a figure.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/base/cpu.h>
#include <kiln/comm/types.h>

#include "comm/reduce/reduce_kernels.h"

namespace {

using kiln::CpuIsa;
using kiln::comm::DataType;
using kiln::comm::ReduceArgs;

// In-cache size: three 64 KiB buffers (192 KiB) fit the L2 of every AVX2-era core (256 KiB and up).
constexpr size_t kCacheBytes = 64 * 1024;
constexpr size_t kDefaultDramMib = 64;
// A trial is about 1 ms of calls: long against the clock's resolution and the call overhead,
// short enough that many trials fit between the preemptions of a busy machine, so the best trial
// is an undisturbed one. Trials continue until each side has run about kSideSeconds, with at
// least kMinTrials each (a 64 MiB call alone takes longer than a trial).
constexpr double kTrialSeconds = 0.001;
constexpr double kSideSeconds = 0.5;
constexpr int kMinTrials = 15;

// ---- The peers: the plain loop, compiled at -O3, once per ISA level ----

inline float bf16_to_f32(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if (f != f) return static_cast<uint16_t>((u >> 16) | 0x0040);
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

#define KILN_BENCH_PEERS(suffix, target_attr)                                                \
  target_attr void peer_f32_##suffix(float* dst, const float* a, const float* b, size_t n) { \
    for (size_t i = 0; i < n; ++i)                                                           \
      dst[i] = a[i] + b[i];                                                                  \
  }                                                                                          \
  target_attr void peer_bf16_##suffix(uint16_t* dst, const uint16_t* a, const uint16_t* b,   \
                                      size_t n) {                                            \
    for (size_t i = 0; i < n; ++i) {                                                         \
      dst[i] = f32_to_bf16(bf16_to_f32(a[i]) + bf16_to_f32(b[i]));                           \
    }                                                                                        \
  }

KILN_BENCH_PEERS(scalar, )
KILN_BENCH_PEERS(avx2, __attribute__((target("avx2,fma"))))
KILN_BENCH_PEERS(avx512, __attribute__((target("avx2,fma,avx512f,avx512bw,avx512dq,avx512vl"))))

void peer(DataType dtype, CpuIsa isa, void* dst, const void* a, const void* b, size_t n) {
  auto* fd = static_cast<float*>(dst);
  const auto* fa = static_cast<const float*>(a);
  const auto* fb = static_cast<const float*>(b);
  auto* hd = static_cast<uint16_t*>(dst);
  const auto* ha = static_cast<const uint16_t*>(a);
  const auto* hb = static_cast<const uint16_t*>(b);
  const bool f32 = dtype == DataType::kF32;
  switch (isa) {
    case CpuIsa::kScalar:
      return f32 ? peer_f32_scalar(fd, fa, fb, n) : peer_bf16_scalar(hd, ha, hb, n);
    case CpuIsa::kAvx2: return f32 ? peer_f32_avx2(fd, fa, fb, n) : peer_bf16_avx2(hd, ha, hb, n);
    case CpuIsa::kAvx512:
      return f32 ? peer_f32_avx512(fd, fa, fb, n) : peer_bf16_avx512(hd, ha, hb, n);
  }
}

// ---- Timing ----

// A 64-byte-aligned byte buffer, filled (and so faulted in) with random finite values of dtype.
class Buffer {
 public:
  Buffer(size_t bytes, DataType dtype, uint64_t seed) : storage_(bytes + kAlign) {
    const auto base = reinterpret_cast<uintptr_t>(storage_.data());
    data_ = storage_.data() + ((kAlign - base % kAlign) % kAlign);
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::uniform_real_distribution<float> dist(-100.0f, 100.0f);
    const size_t es = kiln::comm::dtype_size(dtype);
    for (size_t i = 0; i < bytes / es; ++i) {
      const float f = dist(rng);
      if (dtype == DataType::kF32) {
        std::memcpy(data_ + i * es, &f, es);
      } else {
        const uint16_t h = f32_to_bf16(f);
        std::memcpy(data_ + i * es, &h, es);
      }
    }
  }
  unsigned char* data() { return data_; }

 private:
  static constexpr size_t kAlign = 64;  // a cache line
  std::vector<unsigned char> storage_;
  unsigned char* data_ = nullptr;
};

struct Timing {
  double kiln_s = 1e30;  // best seconds per call
  double peer_s = 1e30;
};

// Seconds per call of `kiln` and of `peer`: the best of many trials of `calls` calls each,
// `calls` chosen so a trial takes about kTrialSeconds. The two alternate trial by trial, so a
// burst of load from other processes hits both alike.
Timing time_pair(const std::function<void()>& kiln, const std::function<void()>& peer) {
  using Clock = std::chrono::steady_clock;
  kiln();  // warm-up: caches, TLB, and the page faults of a fresh buffer
  peer();
  const auto t0 = Clock::now();
  kiln();
  const double once = std::chrono::duration<double>(Clock::now() - t0).count();
  const size_t calls = once > kTrialSeconds ? 1 : static_cast<size_t>(kTrialSeconds / once) + 1;
  auto trial = [calls](const std::function<void()>& fn) {
    const auto start = Clock::now();
    for (size_t c = 0; c < calls; ++c)
      fn();
    return std::chrono::duration<double>(Clock::now() - start).count() / static_cast<double>(calls);
  };
  Timing t;
  const auto start = Clock::now();
  for (int i = 0; i < kMinTrials ||
                  std::chrono::duration<double>(Clock::now() - start).count() < 2 * kSideSeconds;
       ++i) {
    t.kiln_s = std::min(t.kiln_s, trial(kiln));
    t.peer_s = std::min(t.peer_s, trial(peer));
  }
  return t;
}

double gbps(size_t bytes_per_call, double seconds) {
  return static_cast<double>(bytes_per_call) / seconds / 1e9;
}

std::string size_name(size_t bytes) {
  return bytes >= (1u << 20) ? std::to_string(bytes >> 20) + " MiB"
                             : std::to_string(bytes >> 10) + " KiB";
}

// Times every ISA up to `best` on the same buffers (so their placement, which can matter through
// cache-set and 4 KiB address conflicts, is the same for every row). Returns false (and says
// why) when a kernel's output differs from the peer's.
bool bench_reduce(DataType dtype, size_t bytes, CpuIsa best) {
  const size_t n = bytes / kiln::comm::dtype_size(dtype);
  Buffer a(bytes, dtype, 1), b(bytes, dtype, 2), dst(bytes, dtype, 3), want(bytes, dtype, 4);
  ReduceArgs args;
  args.dst = dst.data();
  args.a = a.data();
  args.b = b.data();
  args.count = n;
  args.dtype = dtype;
  bool ok = true;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(best)) continue;
    peer(dtype, isa, want.data(), a.data(), b.data(), n);
    kiln::comm::reduce_with_isa(args, isa);
    if (std::memcmp(dst.data(), want.data(), bytes) != 0) {
      std::printf("%-5s %-8s %-7s kiln output differs from the peer's; not timed\n",
                  std::string(kiln::comm::dtype_name(dtype)).c_str(), size_name(bytes).c_str(),
                  std::string(kiln::cpu_isa_name(isa)).c_str());
      ok = false;
      continue;
    }
    const Timing t = time_pair([&] { kiln::comm::reduce_with_isa(args, isa); },
                               [&] { peer(dtype, isa, dst.data(), a.data(), b.data(), n); });
    const double k = gbps(3 * bytes, t.kiln_s), p = gbps(3 * bytes, t.peer_s);
    std::printf("%-5s %-8s %-7s %10.1f %10.1f %7.2f\n",
                std::string(kiln::comm::dtype_name(dtype)).c_str(), size_name(bytes).c_str(),
                std::string(kiln::cpu_isa_name(isa)).c_str(), k, p, k / p);
  }
  return ok;
}

void bench_copy2(size_t bytes) {
  Buffer src(bytes, DataType::kF32, 1), dst(bytes, DataType::kF32, 2),
      dst2(bytes, DataType::kF32, 3);
  const Timing t = time_pair([&] { kiln::comm::copy2(dst.data(), dst2.data(), src.data(), bytes); },
                             [&] {
                               std::memcpy(dst.data(), src.data(), bytes);
                               std::memcpy(dst2.data(), src.data(), bytes);
                             });
  const double k = gbps(3 * bytes, t.kiln_s), p = gbps(3 * bytes, t.peer_s);
  std::printf("copy2 %-8s %-7s %10.1f %10.1f %7.2f\n", size_name(bytes).c_str(), "-", k, p, k / p);
}

}  // namespace

int main(int argc, char** argv) {
  size_t dram_mib = kDefaultDramMib;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--dram-mib" && i + 1 < argc) {
      const std::string_view value = argv[++i];
      const auto [end, error] =
          std::from_chars(value.data(), value.data() + value.size(), dram_mib);
      if (error == std::errc() && end == value.data() + value.size() && dram_mib > 0) continue;
      std::fprintf(stderr, "--dram-mib: expected a positive integer, got '%s'\n", argv[i]);
      return 2;
    } else {
      std::fprintf(stderr, "usage: %s [--dram-mib N]\n", argv[0]);
      return 2;
    }
  }
  const CpuIsa best = kiln::detect_cpu_features().best_isa();
  std::printf("cpu best isa: %s; reduce() uses: %s\n",
              std::string(kiln::cpu_isa_name(best)).c_str(),
              std::string(kiln::cpu_isa_name(kiln::comm::reduce_isa())).c_str());
  std::printf(
      "GB/s counts 3 x operand bytes per call; peer = plain loop at -O3 for the same ISA\n");
  std::printf("%-5s %-8s %-7s %10s %10s %7s\n", "dtype", "size", "isa", "kiln GB/s", "peer GB/s",
              "ratio");
  bool ok = true;
  for (DataType dtype : {DataType::kF32, DataType::kBF16}) {
    for (size_t bytes : {kCacheBytes, dram_mib << 20}) {
      ok = bench_reduce(dtype, bytes, best) && ok;
    }
  }
  std::printf("%-5s %-8s %-7s %10s %10s %7s\n", "op", "size", "", "copy2", "2x memcpy", "ratio");
  bench_copy2(kCacheBytes);
  bench_copy2(dram_mib << 20);
  return ok ? 0 : 1;
}
