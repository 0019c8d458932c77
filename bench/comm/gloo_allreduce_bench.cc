/* Gloo allreduce harness: f32 sum gloo::allreduce over Gloo's TCP transport, one line per size.

   One process per rank, started by bench/comm/run (or by hand) with --rank R --size N
   --store-dir D: rendezvous goes through gloo::rendezvous::FileStore in D (a fresh, empty
   directory per run), every connection is TCP on 127.0.0.1, and rank 0 prints the lines.

   The op is called the way PyTorch's ProcessGroupGloo calls it for a CPU tensor: a fresh
   gloo::AllreduceOptions per op, with the reduce function gloo::sum<float>, the next tag, the
   context's timeout and the buffers, then gloo::allreduce (default algorithm: ring).
   ProcessGroupGloo builds the options inside each op, so building them is inside the timed region
   here too. In place passes only the output (Gloo reduces into it); out of place passes input and
   output. The transport is Gloo's default asynchronous mode; its synchronous mode (Pair::setSync)
   deadlocks at 16 MiB and above and PyTorch does not use it.

   Method, per size and mode: Kiln's comm-bench method, as in mpi_allreduce_bench.cc (batches of
   back-to-back ops, one slot each, reset before and checked after the batch outside the timed
   region, an untimed barrier before each batch; time_us is the slowest rank's mean).

   Exits 0 when every op was correct, 1 when any was wrong or Gloo failed (a peer vanished, a
   timeout: every Gloo wait is bounded by --timeout-ms), 2 on bad flags. */
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "allreduce_bench_common.h"

namespace {

using kiln_bench::BenchOptions;
using kiln_bench::Mode;

constexpr const char* kPeer = "gloo";
// Only loopback may be used on this machine; the address also picks the interface.
constexpr const char* kLoopbackAddress = "127.0.0.1";
// Every Gloo wait (rendezvous, barrier, allreduce) gives up after this long: a 64 MiB op takes
// about 0.06 s here, so a minute means a peer is gone, not slow. PyTorch's default is 30 min.
constexpr uint64_t kTimeoutMsDefault = 60'000;
constexpr uint64_t kTimeoutMsMax = 3'600'000;  // an hour; past that a run is certainly hung

struct Args {
  BenchOptions bench;
  int rank = -1;
  int size = 0;
  std::string store_dir;
  uint64_t timeout_ms = kTimeoutMsDefault;
};

void print_usage() {
  std::fprintf(stderr,
               "usage: allreduce_gloo --rank R --size N --store-dir D [flags]\n"
               "  (start N processes, ranks 0..N-1, with the same D: an empty directory)\n%s"
               "  --timeout-ms MS  bound on every Gloo wait (default %llu)\n",
               kiln_bench::common_usage(), static_cast<unsigned long long>(kTimeoutMsDefault));
}

// Parses one Gloo-only flag at argv[*i]: 1 consumed, 0 unknown, -1 bad (message in *error).
int parse_gloo_flag(int argc, char** argv, int* i, Args* args, std::string* error) {
  const std::string_view arg = argv[*i];
  std::string_view value;
  if (kiln_bench::is_flag(arg, "--store-dir")) {
    if (!kiln_bench::flag_value(argc, argv, i, "--store-dir", &value, error)) return -1;
    args->store_dir = std::string(value);
    return 1;
  }
  struct Numeric {
    std::string_view name;
    uint64_t min;
    uint64_t max;
  };
  // Ranks and sizes are bounded by the exact-f32 limit of the input pattern.
  const Numeric numerics[] = {
      {"--rank", 0, kiln_bench::kWorldSizeMax - 1},
      {"--size", 1, kiln_bench::kWorldSizeMax},
      {"--timeout-ms", 1, kTimeoutMsMax},
  };
  for (const Numeric& numeric : numerics) {
    if (!kiln_bench::is_flag(arg, numeric.name)) continue;
    if (!kiln_bench::flag_value(argc, argv, i, numeric.name, &value, error)) return -1;
    uint64_t number = 0;
    if (!kiln_bench::parse_u64(value, &number) || number < numeric.min || number > numeric.max) {
      *error = std::string(numeric.name) + ": '" + std::string(value) + "' is not in " +
               std::to_string(numeric.min) + ".." + std::to_string(numeric.max);
      return -1;
    }
    if (numeric.name == "--rank") args->rank = static_cast<int>(number);
    if (numeric.name == "--size") args->size = static_cast<int>(number);
    if (numeric.name == "--timeout-ms") args->timeout_ms = number;
    return 1;
  }
  return 0;
}

// Returns an empty string on success, else what was wrong with the flags.
std::string parse_args(int argc, char** argv, Args* args) {
  std::string error;
  for (int i = 1; i < argc; ++i) {
    int parsed = kiln_bench::parse_common_flag(argc, argv, &i, &args->bench, &error);
    if (parsed == 0) parsed = parse_gloo_flag(argc, argv, &i, args, &error);
    if (parsed < 0) return error;
    if (parsed == 0) return "unknown flag '" + std::string(argv[i]) + "'";
  }
  if (args->size == 0 || args->rank < 0 || args->store_dir.empty()) {
    return "--rank, --size and --store-dir are required";
  }
  if (args->rank >= args->size) {
    return "--rank " + std::to_string(args->rank) + " is not below --size " +
           std::to_string(args->size);
  }
  return kiln_bench::validate(&args->bench);
}

// A Gloo communicator plus the next free tag. Tags must differ between ops in flight; ops here
// run one at a time, and counting up (as ProcessGroupGloo's nextTag does) keeps them distinct.
struct Comm {
  std::shared_ptr<gloo::Context> context;
  std::chrono::milliseconds timeout;
  uint32_t next_tag = 0;
};

void barrier(Comm* comm) {
  gloo::BarrierOptions options(comm->context);
  options.setTag(comm->next_tag++);
  options.setTimeout(comm->timeout);
  gloo::barrier(options);
}

// One f32 sum allreduce; `input` null means in place on `output`.
void allreduce(Comm* comm, float* input, float* output, size_t count) {
  gloo::AllreduceOptions options(comm->context);
  options.setReduceFunction(
      static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
  options.setTag(comm->next_tag++);
  options.setTimeout(comm->timeout);
  if (input != nullptr) options.setInput(input, count);
  options.setOutput(output, count);
  gloo::allreduce(options);
}

// Element-wise maximum over ranks of a few doubles (used for the slowest time and for "any rank
// saw a wrong result").
void max_over_ranks(Comm* comm, std::span<double> values) {
  gloo::AllreduceOptions options(comm->context);
  options.setReduceFunction(
      static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::max<double>));
  options.setTag(comm->next_tag++);
  options.setTimeout(comm->timeout);
  options.setOutput(values.data(), values.size());
  gloo::allreduce(options);
}

// Runs the warmup and timed ops of one size and mode. Returns this rank's mean time per timed op
// in microseconds; clears *correct when any op's result differs from the expected sum.
double run_size(const BenchOptions& options, uint64_t bytes, Mode mode, int rank, int world_size,
                Comm* comm, bool* correct) {
  const uint64_t slots =
      kiln_bench::slots_for(bytes, world_size, options.iters, options.check_bytes_max);
  kiln_bench::SizeBuffers buffers(bytes, slots, rank, world_size);
  const size_t count = buffers.count;
  // In place Gloo reduces into its output, so the slot's send buffer is passed as the output.
  auto op = [&](size_t k) {
    if (mode == Mode::kInPlace) {
      allreduce(comm, nullptr, buffers.send[k].data(), count);
    } else {
      allreduce(comm, buffers.send[k].data(), buffers.recv[k].data(), count);
    }
  };
  for (uint64_t w = 0; w < options.warmup; ++w) {
    buffers.reset(0);
    op(0);
    *correct &= buffers.check(0, mode);
  }
  double timed_us = 0;
  for (uint64_t done = 0; done < options.iters;) {
    const uint64_t batch = std::min(slots, options.iters - done);
    for (size_t k = 0; k < batch; ++k)
      buffers.reset(k);
    barrier(comm);
    const auto start = std::chrono::steady_clock::now();
    for (size_t k = 0; k < batch; ++k)
      op(k);
    const auto stop = std::chrono::steady_clock::now();
    timed_us += std::chrono::duration<double, std::micro>(stop - start).count();
    for (size_t k = 0; k < batch; ++k)
      *correct &= buffers.check(k, mode);
    done += batch;
  }
  return timed_us / static_cast<double>(options.iters);
}

int run(const Args& args) {
  gloo::transport::tcp::attr attr(kLoopbackAddress);
  std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore file_store(args.store_dir);
  gloo::rendezvous::PrefixStore store("kiln-bench-allreduce", file_store);
  auto context = std::make_shared<gloo::rendezvous::Context>(args.rank, args.size);
  context->setTimeout(std::chrono::milliseconds(args.timeout_ms));
  context->connectFullMesh(store, device);
  Comm comm{context, std::chrono::milliseconds(args.timeout_ms)};

  if (args.rank == 0 && !args.bench.json) std::printf("%s\n", kiln_bench::text_header());
  bool all_correct = true;
  for (uint64_t bytes : kiln_bench::sizes_of(args.bench)) {
    for (Mode mode : args.bench.modes) {
      bool correct = true;
      const double mine_us =
          run_size(args.bench, bytes, mode, args.rank, args.size, &comm, &correct);
      double summary[2] = {mine_us, correct ? 0.0 : 1.0};  // {time_us, any_wrong}, max over ranks
      max_over_ranks(&comm, summary);
      const bool correct_all = summary[1] == 0.0;
      all_correct &= correct_all;
      if (args.rank == 0) {
        std::printf("%s\n", kiln_bench::result_line(kPeer, bytes, args.size, mode, summary[0],
                                                    correct_all, args.bench.json)
                                .c_str());
        std::fflush(stdout);
      }
    }
  }
  if (!all_correct && args.rank == 0) {
    std::fprintf(stderr, "gloo allreduce: some results were wrong (see \"correct\":false)\n");
  }
  return all_correct ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  const std::string error = parse_args(argc, argv, &args);
  if (!error.empty()) {
    std::fprintf(stderr, "allreduce (gloo): %s\n", error.c_str());
    print_usage();
    return 2;
  }
  // Gloo reports every failure (connect, timeout, peer closed) by throwing; this is the one
  // place that turns that into a message naming the rank and an exit code.
  try {
    return run(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce (gloo) rank %d of %d: %s\n", args.rank, args.size, e.what());
    return 1;
  }
}
