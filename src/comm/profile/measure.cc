// measure_machine_profile(): the measurements behind a MachineProfile (machine_profile.h).
//
// Hand-off: two threads on two CPUs bounce one cache line; thread A stores 2i+1 and spins until it
// reads 2i+2, thread B the reverse. A batch of kRoundTripsPerBatch round trips is timed as one, so
// the clock's own cost (~20 ns) is amortised, and a batch's one-way figure is its time over twice
// its round trips; the percentiles are over batches.
//
// Wake-up: thread W announces that it is about to sleep and calls FUTEX_WAIT on a word; thread R
// sees the announcement, waits kSettleNs more so that W is surely asleep in the kernel, reads the
// clock, changes the word and calls FUTEX_WAKE; W reads the clock as soon as it runs. The
// difference is what a sleeping rank costs its peer: the time from the bell to running again.
// Non-private futexes, as the shared-memory transport uses.
//
// Bandwidth: one thread, best of kBandwidthReps over buffers written beforehand (no page faults).
#include <kiln/comm/machine_profile.h>

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

#include <immintrin.h>

#include <kiln/base/clock.h>
#include <kiln/base/cpu_set.h>
#include <kiln/base/cpu_topology.h>
#include <kiln/base/machine_cache.h>

#include "comm/reduce/reduce_kernels.h"

namespace kiln::comm {
namespace {

constexpr int kRoundTripsPerBatch = 100;
// How long the ringer waits after the waiter said it is going to sleep: FUTEX_WAIT enters the
// kernel within a few microseconds, so 50 us leaves it asleep with a wide margin.
constexpr int64_t kSettleNs = 50'000;
// A measurement that takes longer than this has lost a thread (descheduled for good, or a CPU
// taken away): it is abandoned instead of hanging the caller.
constexpr int64_t kMeasureTimeoutNs = 5'000'000'000;
constexpr int kBandwidthReps = 3;
// Time budgets: on a busy machine (CPUs shared with other work) a round trip can take a
// scheduler time slice, so the measurements stop at their budget with fewer samples rather than
// run for seconds; fewer than kSamplesMin samples leave the machine unmeasured (cross_core
// false: the built-in spin and costs).
constexpr int64_t kHandoffBudgetNs = 50'000'000;
constexpr int64_t kWakeupBudgetNs = 150'000'000;
constexpr size_t kSamplesMin = 10;
// Written to a shared word to say "stop": no count reaches it.
constexpr uint64_t kDone = UINT64_MAX;
// Bandwidth buffers: twice the last-level cache so that they live in memory, but at least 16 MiB
// and at most 64 MiB each (three of them; a VM may report a whole socket's 260 MiB L3).
constexpr size_t kBandwidthBytesMin = size_t{16} << 20;
constexpr size_t kBandwidthBytesMax = size_t{64} << 20;
// The reduce sweep's piece: CommOptions' default shared-memory message.
constexpr size_t kSweepPieceBytes = size_t{64} << 10;

struct alignas(64) PaddedWord {
  std::atomic<uint64_t> value{0};
};

LatencyNs percentiles(std::vector<double> samples) {
  LatencyNs out;
  if (samples.empty()) return out;
  std::sort(samples.begin(), samples.end());
  const auto at = [&](double q) {
    const size_t i = std::min(samples.size() - 1, static_cast<size_t>(q * samples.size()));
    return samples[i];
  };
  out.p50 = at(0.50);
  out.p90 = at(0.90);
  out.p99 = at(0.99);
  return out;
}

// Two distinct CPUs to measure between, preferring two physical cores of one NUMA node; from
// this thread's affinity, or the machine's online CPUs when that has only one. Empty if none.
std::vector<int> pick_two_cpus() {
  if (Result<CpuTopology> topo = this_machine_topology(); topo.ok() && topo->cores.size() >= 2) {
    return {topo->cores[0].cpus.cpus()[0], topo->cores[1].cpus.cpus()[0]};
  }
  std::ifstream in("/sys/devices/system/cpu/online");
  std::string list;
  std::getline(in, list);
  Result<CpuSet> online = CpuSet::parse(list);
  if (!online.ok() || online->size() < 2) return {};
  return {online->cpus()[0], online->cpus()[1]};
}

// Runs `a` on cpus[0] (in a new thread) and `b` on cpus[1] (in another), and joins both.
// False if either could not be bound.
template <typename A, typename B>
bool run_pair(const std::vector<int>& cpus, A&& a, B&& b) {
  std::atomic<int> bound{0};
  std::atomic<bool> failed{false};
  const auto wrap = [&](int cpu, auto& body) {
    return std::thread([&, cpu] {
      if (!bind_this_thread(CpuSet({cpu})).ok()) failed.store(true);
      bound.fetch_add(1);
      while (bound.load() < 2)
        _mm_pause();
      if (!failed.load()) body();
    });
  };
  std::thread ta = wrap(cpus[0], a);
  std::thread tb = wrap(cpus[1], b);
  ta.join();
  tb.join();
  return !failed.load();
}

// Spins until `word` holds `want` or `other`; false if the deadline passed first.
bool spin_until_either(const std::atomic<uint64_t>& word, uint64_t want, uint64_t other,
                       int64_t deadline_ns) {
  for (uint64_t i = 1;; ++i) {
    const uint64_t v = word.load(std::memory_order_acquire);
    if (v == want || v == other) return true;
    _mm_pause();
    if (i % 4096 == 0 && monotonic_now_ns() > deadline_ns) return false;
  }
}

Result<LatencyNs> measure_handoff(const std::vector<int>& cpus, int round_trips) {
  PaddedWord line;
  const int batches = std::max(1, round_trips / kRoundTripsPerBatch);
  std::vector<double> one_way_ns;
  one_way_ns.reserve(static_cast<size_t>(batches));
  std::atomic<bool> lost{false};
  const int64_t start_ns = monotonic_now_ns();
  const int64_t deadline = start_ns + kMeasureTimeoutNs;
  const int64_t budget_end = start_ns + kHandoffBudgetNs;
  auto pinger = [&] {
    uint64_t v = 0;
    for (int b = 0; b < batches && !lost.load() && monotonic_now_ns() < budget_end; ++b) {
      const int64_t t0 = monotonic_now_ns();
      for (int i = 0; i < kRoundTripsPerBatch; ++i) {
        line.value.store(++v, std::memory_order_release);
        if (!spin_until_either(line.value, ++v, kDone, deadline)) {
          lost.store(true);
          break;
        }
      }
      if (lost.load()) break;
      one_way_ns.push_back(static_cast<double>(monotonic_now_ns() - t0) /
                           (2.0 * kRoundTripsPerBatch));
    }
    line.value.store(kDone, std::memory_order_release);
  };
  auto ponger = [&] {
    for (uint64_t v = 1;; v += 2) {
      if (!spin_until_either(line.value, v, kDone, deadline)) {
        lost.store(true);
        return;
      }
      if (line.value.load(std::memory_order_acquire) == kDone) return;
      line.value.store(v + 1, std::memory_order_release);
    }
  };
  if (!run_pair(cpus, pinger, ponger)) return Status::io_error("cannot bind a thread");
  if (lost.load()) return Status::timeout("cache-line hand-off: a thread stopped answering");
  if (one_way_ns.size() < kSamplesMin) {
    return Status::unavailable("cache-line hand-off: only " + std::to_string(one_way_ns.size()) +
                               " batches within the time budget (the CPUs are busy)");
  }
  return percentiles(std::move(one_way_ns));
}

long futex(std::atomic<uint32_t>* word, int op, uint32_t value) {
  timespec ts{0, 100'000'000};  // a wake that never comes ends the wait after 100 ms
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value,
                 op == FUTEX_WAIT ? &ts : nullptr, nullptr, 0);
}

Result<LatencyNs> measure_wakeup(const std::vector<int>& cpus, int wakeups) {
  std::atomic<uint32_t> bell{0};
  std::atomic<bool> done{false};  // set by the ringer when it stops ringing
  PaddedWord asleep;              // k + 1 once the waiter is about to sleep for round k
  PaddedWord woken;               // k + 1 once the waiter ran after round k's bell
  std::vector<int64_t> rang_ns(static_cast<size_t>(wakeups));
  std::vector<int64_t> ran_ns(static_cast<size_t>(wakeups));
  int completed = 0;  // rounds both threads finished; written by the ringer
  std::atomic<bool> lost{false};
  const int64_t start_ns = monotonic_now_ns();
  const int64_t deadline = start_ns + kMeasureTimeoutNs;
  const int64_t budget_end = start_ns + kWakeupBudgetNs;
  auto waiter = [&] {
    for (int k = 0; k < wakeups && !lost.load(); ++k) {
      const uint32_t seen = bell.load(std::memory_order_acquire);
      asleep.value.store(static_cast<uint64_t>(k) + 1, std::memory_order_release);
      while (bell.load(std::memory_order_acquire) == seen &&
             !done.load(std::memory_order_acquire)) {
        futex(&bell, FUTEX_WAIT, seen);
        if (monotonic_now_ns() > deadline) {
          lost.store(true);
          return;
        }
      }
      if (done.load(std::memory_order_acquire)) return;
      ran_ns[static_cast<size_t>(k)] = monotonic_now_ns();
      woken.value.store(static_cast<uint64_t>(k) + 1, std::memory_order_release);
    }
  };
  auto ringer = [&] {
    for (int k = 0; k < wakeups && !lost.load() && monotonic_now_ns() < budget_end; ++k) {
      if (!spin_until_either(asleep.value, static_cast<uint64_t>(k) + 1, kDone, deadline)) {
        lost.store(true);
        break;
      }
      const int64_t settle_until = monotonic_now_ns() + kSettleNs;
      while (monotonic_now_ns() < settle_until)
        _mm_pause();
      rang_ns[static_cast<size_t>(k)] = monotonic_now_ns();
      bell.fetch_add(1, std::memory_order_release);
      futex(&bell, FUTEX_WAKE, 1);
      if (!spin_until_either(woken.value, static_cast<uint64_t>(k) + 1, kDone, deadline)) {
        lost.store(true);
        break;
      }
      completed = k + 1;
    }
    // Tell a waiter that may be asleep for one more round to stop.
    done.store(true, std::memory_order_release);
    bell.fetch_add(1, std::memory_order_release);
    futex(&bell, FUTEX_WAKE, 1);
  };
  if (!run_pair(cpus, waiter, ringer)) return Status::io_error("cannot bind a thread");
  if (lost.load()) return Status::timeout("futex wake-up: a thread stopped answering");
  if (static_cast<size_t>(completed) < kSamplesMin) {
    return Status::unavailable("futex wake-up: only " + std::to_string(completed) +
                               " samples within the time budget (the CPUs are busy)");
  }
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(completed));
  for (int k = 0; k < completed; ++k)
    samples.push_back(
        static_cast<double>(ran_ns[static_cast<size_t>(k)] - rang_ns[static_cast<size_t>(k)]));
  return percentiles(std::move(samples));
}

// Best of kBandwidthReps of `body`, in GB/s for `bytes` moved per call.
template <typename F>
double best_gbps(size_t bytes, F&& body) {
  int64_t best_ns = INT64_MAX;
  for (int r = 0; r < kBandwidthReps; ++r) {
    const int64_t t0 = monotonic_now_ns();
    body();
    best_ns = std::min(best_ns, monotonic_now_ns() - t0);
  }
  return static_cast<double>(bytes) / static_cast<double>(std::max<int64_t>(best_ns, 1));
}

uint64_t read_cache_bytes(int level) {
  uint64_t best = 0;
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index);
    std::ifstream lv(dir + "/level");
    std::ifstream type(dir + "/type");
    std::ifstream size(dir + "/size");
    int l = 0;
    std::string t;
    std::string s;
    if (!(lv >> l) || !(type >> t) || !(size >> s)) continue;
    if (l != level || t == "Instruction" || s.empty()) continue;
    uint64_t n = 0;
    size_t i = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9' && n < (uint64_t{1} << 40))
      n = n * 10 + static_cast<uint64_t>(s[i++] - '0');
    if (i < s.size() && (s[i] == 'K' || s[i] == 'k')) n <<= 10;
    if (i < s.size() && s[i] == 'M') n <<= 20;
    best = std::max(best, n);
  }
  return best;
}

}  // namespace

Result<MachineProfile> measure_machine_profile(const MeasureOptions& options) {
  const int64_t start_ns = monotonic_now_ns();
  MachineProfile p;
  p.machine = this_boot_id();
  p.cpu_model = this_cpu_model();
  p.l2_bytes = read_cache_bytes(2);
  p.llc_bytes = std::max(read_cache_bytes(3), p.l2_bytes);
  p.cpus = pick_two_cpus();
  if (p.cpus.size() == 2) {
    Result<LatencyNs> handoff = measure_handoff(p.cpus, options.handoff_round_trips);
    Result<LatencyNs> wakeup =
        handoff.ok() ? measure_wakeup(p.cpus, options.wakeups) : Result<LatencyNs>(LatencyNs{});
    // A failure here (a CPU that cannot be bound, a thread that stopped answering, too few
    // samples on busy CPUs) leaves cross_core false: the built-in spin and costs apply.
    if (handoff.ok() && wakeup.ok()) {
      p.cross_core = true;
      p.handoff_ns = *handoff;
      p.wakeup_ns = *wakeup;
    }
  }
  size_t bytes = options.bandwidth_bytes;
  if (bytes == 0)
    bytes = std::clamp<size_t>(2 * p.llc_bytes, kBandwidthBytesMin, kBandwidthBytesMax);
  const size_t count = bytes / sizeof(float);
  std::vector<float> a(count, 1.0f);
  std::vector<float> b(count, 2.0f);
  std::vector<float> dst(count, 0.0f);
  p.copy_gbps = best_gbps(bytes, [&] { std::memcpy(dst.data(), a.data(), bytes); });
  ReduceArgs args;
  args.dst = dst.data();
  args.a = a.data();
  args.b = b.data();
  args.count = count;
  // As a collective reduces: one shared-memory message (kSweepPieceBytes) at a time over the
  // whole buffers, dst stored plainly, then non-temporally (ReduceArgs::stream_dst).
  ReduceArgs streamed = args;
  streamed.count = std::min(count, kSweepPieceBytes / sizeof(float));
  streamed.stream_dst = true;
  ReduceArgs plain = streamed;
  plain.stream_dst = false;
  const size_t piece_bytes = streamed.count * sizeof(float);
  // Many calls over fresh parts of the buffers, as a collective's messages walk its output.
  const auto sweep = [&](ReduceArgs one) {
    for (size_t off = 0; off + streamed.count <= count; off += streamed.count) {
      one.dst = dst.data() + off;
      one.a = a.data() + off;
      one.b = b.data() + off;
      reduce(one);
    }
  };
  const size_t swept = count / streamed.count * piece_bytes;
  p.reduce_gbps = best_gbps(3 * swept, [&] { sweep(plain); });
  p.reduce_stream_gbps = best_gbps(3 * swept, [&] { sweep(streamed); });
  if (dst[count / 2] != 3.0f) return Status::corruption("measuring this machine: 1 + 2 != 3");
  p.measure_ms = (monotonic_now_ns() - start_ns) / 1'000'000;
  p.measured_at = format_wall_time_utc(wall_now_ns());
  return p;
}

}  // namespace kiln::comm
