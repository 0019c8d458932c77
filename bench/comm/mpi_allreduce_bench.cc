/* MPI allreduce harness: f32 sum MPI_Allreduce over MPI_COMM_WORLD, one line per size.

   One source, compiled twice by bench/comm/run: with mpicxx.openmpi (peer "openmpi") and with
   mpicxx.mpich (peer "mpich"). The peer name comes from the MPI header it was compiled against.

   Method, per size and mode: Kiln's comm-bench method (src/comm/bench.cc), shared by every
   harness here (see allreduce_bench_common.h and bench/comm/README.md):
     warmup     warmup ops on slot 0, each reset first
     batches    reset the batch's slots (fresh input; NaN where the result goes), barrier,
                time the batch's ops back to back, one slot each, then check every slot
     time_us    timed time / iters on each rank, then the maximum over ranks (nccl-tests)
   Resets, barriers and checks are outside the timed region.

   Exits 0 when every op of every size was correct, 1 when any was wrong (the line says
   "correct":false), 2 on bad flags; an MPI error aborts the job. MPI calls have no timeouts, so
   --timeout-s arms alarm(2) in every rank: a hung run dies by SIGALRM and mpirun ends the job. */
// Only the C API is used; the C++ bindings are deprecated and do not compile warning-free.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "allreduce_bench_common.h"

namespace {

using kiln_bench::BenchOptions;
using kiln_bench::Mode;

#if defined(OPEN_MPI)
constexpr const char* kPeer = "openmpi";
#elif defined(MPICH_VERSION)
constexpr const char* kPeer = "mpich";
#else
constexpr const char* kPeer = "mpi";
#endif

// Default bound on one whole run: the driver's largest default run (64 MiB, both modes, about
// 50 ops at up to 0.1 s each) takes under 10 s; ten minutes means "hung", not "slow".
constexpr uint64_t kTimeoutSDefault = 600;
// alarm(2) takes an unsigned int of seconds; a day is far beyond any sensible run.
constexpr uint64_t kTimeoutSMax = 86'400;

// Aborts the whole job, naming the call and MPI's message, when an MPI call fails. The world
// communicator returns errors (MPI_ERRORS_RETURN) so that this message, not a bare abort, shows.
#define KILN_BENCH_MPI_CHECK(call)                                                        \
  do {                                                                                    \
    const int kiln_bench_rc = (call);                                                     \
    if (kiln_bench_rc != MPI_SUCCESS) fail_mpi(#call, kiln_bench_rc, __FILE__, __LINE__); \
  } while (0)

[[noreturn]] void fail_mpi(const char* call, int rc, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) {
    std::snprintf(text, sizeof text, "error code %d", rc);
  }
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "%s:%d: rank %d: %s failed: %s\n", file, line, rank, call, text);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();  // MPI_Abort does not return; this tells the compiler so
}

struct Args {
  BenchOptions bench;
  uint64_t timeout_s = kTimeoutSDefault;
};

void print_usage() {
  std::fprintf(stderr,
               "usage: allreduce_{openmpi,mpich} [flags]   (run under mpirun / mpiexec)\n%s"
               "  --timeout-s S    kill this rank by SIGALRM after S seconds (default %llu)\n",
               kiln_bench::common_usage(), static_cast<unsigned long long>(kTimeoutSDefault));
}

// Returns an empty string on success, else what was wrong with the flags.
std::string parse_args(int argc, char** argv, Args* args) {
  std::string error;
  for (int i = 1; i < argc; ++i) {
    const int common = kiln_bench::parse_common_flag(argc, argv, &i, &args->bench, &error);
    if (common < 0) return error;
    if (common > 0) continue;
    if (kiln_bench::is_flag(argv[i], "--timeout-s")) {
      std::string_view value;
      if (!kiln_bench::flag_value(argc, argv, &i, "--timeout-s", &value, &error)) return error;
      if (!kiln_bench::parse_u64(value, &args->timeout_s) || args->timeout_s == 0 ||
          args->timeout_s > kTimeoutSMax) {
        return "--timeout-s: '" + std::string(value) + "' is not a number of seconds in 1.." +
               std::to_string(kTimeoutSMax);
      }
      continue;
    }
    return "unknown flag '" + std::string(argv[i]) + "'";
  }
  return kiln_bench::validate(&args->bench);
}

// One f32 sum allreduce on slot k.
void allreduce(kiln_bench::SizeBuffers* buffers, size_t k, Mode mode) {
  const int count = static_cast<int>(buffers->count);  // <= kBytesMax / 4 = 2^28 < INT_MAX
  if (mode == Mode::kInPlace) {
    KILN_BENCH_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buffers->send[k].data(), count, MPI_FLOAT,
                                       MPI_SUM, MPI_COMM_WORLD));
  } else {
    KILN_BENCH_MPI_CHECK(MPI_Allreduce(buffers->send[k].data(), buffers->recv[k].data(), count,
                                       MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
  }
}

// Runs the warmup and timed ops of one size and mode. Returns this rank's mean time per timed op
// in microseconds; clears *correct when any op's result differs from the expected sum.
double run_size(const BenchOptions& options, uint64_t bytes, Mode mode, int rank, int world_size,
                bool* correct) {
  const uint64_t slots =
      kiln_bench::slots_for(bytes, world_size, options.iters, options.check_bytes_max);
  kiln_bench::SizeBuffers buffers(bytes, slots, rank, world_size);
  for (uint64_t op = 0; op < options.warmup; ++op) {
    buffers.reset(0);
    allreduce(&buffers, 0, mode);
    *correct &= buffers.check(0, mode);
  }
  double timed_us = 0;
  for (uint64_t done = 0; done < options.iters;) {
    const uint64_t batch = std::min(slots, options.iters - done);
    for (size_t k = 0; k < batch; ++k)
      buffers.reset(k);
    KILN_BENCH_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    const auto start = std::chrono::steady_clock::now();
    for (size_t k = 0; k < batch; ++k)
      allreduce(&buffers, k, mode);
    const auto stop = std::chrono::steady_clock::now();
    timed_us += std::chrono::duration<double, std::micro>(stop - start).count();
    for (size_t k = 0; k < batch; ++k)
      *correct &= buffers.check(k, mode);
    done += batch;
  }
  return timed_us / static_cast<double>(options.iters);
}

int run(const Args& args, int rank, int world_size) {
  static_assert(kiln_bench::kBytesMax / sizeof(float) < static_cast<uint64_t>(INT32_MAX));
  if (rank == 0 && !args.bench.json) std::printf("%s\n", kiln_bench::text_header());
  bool all_correct = true;
  for (uint64_t bytes : kiln_bench::sizes_of(args.bench)) {
    for (Mode mode : args.bench.modes) {
      bool correct = true;
      const double mine_us = run_size(args.bench, bytes, mode, rank, world_size, &correct);
      double slowest_us = 0;
      KILN_BENCH_MPI_CHECK(
          MPI_Allreduce(&mine_us, &slowest_us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
      int correct_mine = correct ? 1 : 0;
      int correct_all = 0;
      KILN_BENCH_MPI_CHECK(
          MPI_Allreduce(&correct_mine, &correct_all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
      all_correct &= correct_all == 1;
      if (rank == 0) {
        std::printf("%s\n", kiln_bench::result_line(kPeer, bytes, world_size, mode, slowest_us,
                                                    correct_all == 1, args.bench.json)
                                .c_str());
        std::fflush(stdout);
      }
    }
  }
  if (!all_correct && rank == 0) {
    std::fprintf(stderr, "%s allreduce: some results were wrong (see \"correct\":false)\n", kPeer);
  }
  return all_correct ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (MPI_Init(&argc, &argv) != MPI_SUCCESS) {
    std::fprintf(stderr, "MPI_Init failed\n");
    return 1;
  }
  KILN_BENCH_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  int rank = 0;
  int world_size = 0;
  KILN_BENCH_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  KILN_BENCH_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size));

  Args args;
  const std::string error = parse_args(argc, argv, &args);
  if (!error.empty() || world_size > kiln_bench::kWorldSizeMax) {
    if (rank == 0) {
      std::fprintf(stderr, "allreduce (%s): %s\n", kPeer,
                   error.empty() ? "too many ranks for exact f32 sums" : error.c_str());
      print_usage();
    }
    MPI_Finalize();
    return 2;
  }
  alarm(static_cast<unsigned>(args.timeout_s));
  const int rc = run(args, rank, world_size);
  KILN_BENCH_MPI_CHECK(MPI_Finalize());
  return rc;
}
