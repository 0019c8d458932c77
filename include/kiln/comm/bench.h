// The collective benchmark behind `kiln comm-bench`, run by every rank of a communicator.
//
// Conventions of nccl-tests: `bytes` is the size of the whole buffer (for reduce_scatter the
// input, for allgather the output, for all_to_all either); time is the mean per-op time over
// `iters` timed ops, taken as the slowest rank's; algbw = bytes / time; busbw = algbw times the
// op's bus factor (allreduce 2(n-1)/n; reduce_scatter, allgather, all_to_all (n-1)/n; broadcast,
// reduce 1), which makes figures comparable across world sizes.
//
// Every op's result is checked. Timed ops run back to back in batches; each op of a batch writes
// its own output buffer (at most check_bytes_max of them in total), which is verified after the
// batch, outside the timed region. Batches start with an untimed barrier.
#ifndef KILN_COMM_BENCH_H_
#define KILN_COMM_BENCH_H_

#include <cstddef>
#include <string>
#include <vector>

#include <kiln/base/function_ref.h>
#include <kiln/base/result.h>
#include <kiln/comm/communicator.h>
#include <kiln/comm/types.h>

namespace kiln::comm {

struct BenchOptions {
  OpKind op = OpKind::kAllreduce;
  size_t min_bytes = 8;
  size_t max_bytes = 64 << 20;
  int iters = 20;
  int warmup = 5;
  DataType dtype = DataType::kF32;
  ReduceOp reduce = ReduceOp::kSum;
  bool in_place = false;
  // Memory for the per-op output buffers of one batch; a large size gets batches of one op.
  size_t check_bytes_max = 256 << 20;
  std::string transport_name;  // reported in each row ("shm", "tcp")
};

struct BenchRow {
  OpKind op = OpKind::kAllreduce;
  size_t bytes = 0;
  int ranks = 1;
  std::string transport;
  DataType dtype = DataType::kF32;
  bool in_place = false;
  int iters = 0;
  double time_us = 0;
  double algbw_GBps = 0;
  double busbw_GBps = 0;
  bool correct = false;
};

// The factor that turns algbw into busbw for `op` on `n` ranks.
double bus_factor(OpKind op, int n);

// OK, or kInvalidArgument naming the `kiln comm-bench` flag that is wrong (an op the benchmark
// does not cover, --iters below 1, --min-bytes 0 or above --max-bytes). Pure: the launcher calls
// it before it starts any rank.
Status validate_bench_options(const BenchOptions& options);

// Runs the sweep (sizes doubling from min_bytes to max_bytes) collectively; every rank gets the
// same rows, and on_row is called for each as soon as it is measured. kInvalidArgument when
// validate_bench_options() refuses the options; a failed collective aborts the sweep with its
// error.
Result<std::vector<BenchRow>> run_comm_bench(Communicator& comm, const BenchOptions& options,
                                             FunctionRef<void(const BenchRow&)> on_row);

// One JSON object: op, bytes, ranks, transport, dtype, in_place, iters, time_us, algbw_GBps,
// busbw_GBps, correct.
std::string bench_row_json(const BenchRow& row);

}  // namespace kiln::comm

#endif  // KILN_COMM_BENCH_H_
