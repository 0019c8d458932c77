// See include/kiln/comm/bench.h.
#include <kiln/base/clock.h>
#include <kiln/comm/bench.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "comm/typed_values.h"

namespace kiln::comm {
namespace {

// Most ops in one checked batch. Small sizes would otherwise get one buffer pair per timed op
// (thousands), spread over more memory than the caches hold, and every op would start with
// cache misses that have nothing to do with communication.
constexpr size_t kSlotsMax = 1024;

// The buffers of one benchmark size: a template of this rank's input, the expected output, and
// `slots` (send, recv) pairs so a batch of ops can each keep its result until it is checked.
struct SizeBuffers {
  size_t count = 0;            // elements per rank (see per-op meaning below)
  size_t send_elems = 0;       // elements in a send buffer
  size_t recv_elems = 0;       // elements in a recv buffer
  std::vector<char> input;     // send_elems: this rank's data
  std::vector<char> expected;  // recv_elems: what recv must hold afterwards
  std::vector<std::vector<char>> send;
  std::vector<std::vector<char>> recv;
  bool check = true;  // false on ranks whose output is not defined (reduce's non-roots)
};

bool supported(OpKind op) {
  return op == OpKind::kAllreduce || op == OpKind::kReduceScatter || op == OpKind::kAllgather ||
         op == OpKind::kBroadcast || op == OpKind::kReduce || op == OpKind::kAllToAll;
}

// Elements per rank for a whole-buffer size of `bytes`, as nccl-tests count them.
size_t count_for(OpKind op, size_t bytes, size_t elem, int n) {
  const bool per_rank_blocks =
      op == OpKind::kReduceScatter || op == OpKind::kAllgather || op == OpKind::kAllToAll;
  const size_t divisor = elem * (per_rank_blocks ? static_cast<size_t>(n) : 1);
  return std::max<size_t>(1, bytes / divisor);
}

size_t whole_bytes(OpKind op, size_t count, size_t elem, int n) {
  const bool per_rank_blocks =
      op == OpKind::kReduceScatter || op == OpKind::kAllgather || op == OpKind::kAllToAll;
  return count * elem * (per_rank_blocks ? static_cast<size_t>(n) : 1);
}

void prepare(const BenchOptions& o, int rank, int n, size_t count, size_t slots, SizeBuffers* b) {
  const DataType t = o.dtype;
  const size_t e = dtype_size(t);
  b->count = count;
  switch (o.op) {
    case OpKind::kAllreduce:
    case OpKind::kBroadcast:
    case OpKind::kReduce: b->send_elems = b->recv_elems = count; break;
    case OpKind::kReduceScatter:
      b->send_elems = count * n;
      b->recv_elems = count;
      break;
    case OpKind::kAllgather:
      b->send_elems = count;
      b->recv_elems = count * n;
      break;
    default:  // all_to_all
      b->send_elems = b->recv_elems = count * n;
      break;
  }
  b->input.assign(b->send_elems * e, 0);
  b->expected.assign(b->recv_elems * e, 0);
  for (size_t i = 0; i < b->send_elems; ++i)
    store(b->input.data(), t, i, input_value(rank, i, n));
  for (size_t i = 0; i < b->recv_elems; ++i) {
    double v = 0;
    switch (o.op) {
      case OpKind::kAllreduce:
      case OpKind::kReduce: v = expected_reduction(t, o.reduce, n, i); break;
      case OpKind::kReduceScatter: v = expected_reduction(t, o.reduce, n, rank * count + i); break;
      case OpKind::kAllgather: v = input_value(static_cast<int>(i / count), i % count, n); break;
      case OpKind::kBroadcast: v = input_value(0, i, n); break;
      default: v = input_value(static_cast<int>(i / count), rank * count + i % count, n); break;
    }
    store(b->expected.data(), t, i, v);
  }
  b->check = !(o.op == OpKind::kReduce && rank != 0);
  // Every slot is touched now, so no page fault lands in a timed op.
  b->send.assign(slots, std::vector<char>(b->send_elems * e + 1, 0));
  b->recv.assign(slots, std::vector<char>(b->recv_elems * e + 1, 0));
}

// The op for slot k. In place means: the result lands in the send buffer.
CollectiveArgs op_args(const BenchOptions& o, int rank, SizeBuffers& b, size_t k) {
  char* send = b.send[k].data();
  char* recv = o.in_place ? send : b.recv[k].data();
  const size_t e = dtype_size(o.dtype);
  switch (o.op) {
    case OpKind::kAllreduce:
      return CollectiveArgs::allreduce(send, recv, b.count, o.dtype, o.reduce);
    case OpKind::kReduceScatter:
      return CollectiveArgs::reduce_scatter(send, o.in_place ? send + rank * b.count * e : recv,
                                            b.count, o.dtype, o.reduce);
    case OpKind::kAllgather:
      // In place: the input already sits at this rank's block of the output.
      return o.in_place ? CollectiveArgs::allgather(b.recv[k].data() + rank * b.count * e,
                                                    b.recv[k].data(), b.count, o.dtype)
                        : CollectiveArgs::allgather(send, recv, b.count, o.dtype);
    case OpKind::kBroadcast:
      return CollectiveArgs::broadcast(b.recv[k].data(), b.count, o.dtype, 0);
    case OpKind::kReduce: return CollectiveArgs::reduce(send, recv, b.count, o.dtype, o.reduce, 0);
    default: return CollectiveArgs::all_to_all(send, b.recv[k].data(), b.count, o.dtype);
  }
}

// Readies slot k for an op (untimed): fresh input where the op consumes it, a sentinel (all ones)
// where the result goes, so a result that is not written fails the check.
void reset_slot(const BenchOptions& o, int rank, SizeBuffers& b, size_t k) {
  const size_t e = dtype_size(o.dtype);
  std::memcpy(b.send[k].data(), b.input.data(), b.input.size());
  std::memset(b.recv[k].data(), 0xff, b.recv[k].size());
  if (o.op == OpKind::kBroadcast && rank == 0) {
    std::memcpy(b.recv[k].data(), b.input.data(), b.input.size());
  }
  if (o.op == OpKind::kAllgather && o.in_place) {
    std::memcpy(b.recv[k].data() + rank * b.count * e, b.input.data(), b.input.size());
  }
}

const char* result_of(const BenchOptions& o, SizeBuffers& b, size_t k) {
  const bool result_in_send =
      o.in_place &&
      (o.op == OpKind::kAllreduce || o.op == OpKind::kReduceScatter || o.op == OpKind::kReduce);
  return result_in_send ? b.send[k].data() : b.recv[k].data();
}

bool check_slot(const BenchOptions& o, int rank, SizeBuffers& b, size_t k) {
  if (!b.check) return true;
  const char* got = result_of(o, b, k);
  if (o.op == OpKind::kReduceScatter && o.in_place) got += rank * b.count * dtype_size(o.dtype);
  return std::memcmp(got, b.expected.data(), b.expected.size()) == 0;
}

}  // namespace

double bus_factor(OpKind op, int n) {
  switch (op) {
    case OpKind::kAllreduce: return 2.0 * (n - 1) / n;
    case OpKind::kReduceScatter:
    case OpKind::kAllgather:
    case OpKind::kAllToAll: return static_cast<double>(n - 1) / n;
    default: return 1.0;
  }
}

Status validate_bench_options(const BenchOptions& o) {
  if (!supported(o.op)) {
    return Status::invalid_argument("--op " + std::string(op_kind_name(o.op)) +
                                    ": comm-bench does not benchmark it (allreduce, "
                                    "reduce_scatter, allgather, broadcast, reduce, all_to_all)");
  }
  if (o.iters < 1) {
    return Status::invalid_argument("--iters " + std::to_string(o.iters) + ": must be at least 1");
  }
  if (o.warmup < 0) {
    return Status::invalid_argument("--warmup " + std::to_string(o.warmup) +
                                    ": must be at least 0");
  }
  if (o.min_bytes < 1) {
    return Status::invalid_argument("--min-bytes " + std::to_string(o.min_bytes) +
                                    ": must be at least 1");
  }
  if (o.max_bytes < o.min_bytes) {
    return Status::invalid_argument("--max-bytes " + std::to_string(o.max_bytes) +
                                    ": must be at least --min-bytes (" +
                                    std::to_string(o.min_bytes) + ")");
  }
  // Sizes double from min_bytes while they stay at most max_bytes; a max_bytes within a factor
  // 2 of SIZE_MAX would wrap the doubling around and never end.
  if (o.max_bytes > (SIZE_MAX >> 1)) {
    return Status::invalid_argument("--max-bytes " + std::to_string(o.max_bytes) +
                                    ": too large (at most " + std::to_string(SIZE_MAX >> 1) + ")");
  }
  return Status();
}

Result<std::vector<BenchRow>> run_comm_bench(Communicator& comm, const BenchOptions& o,
                                             FunctionRef<void(const BenchRow&)> on_row) {
  KILN_RETURN_IF_ERROR(validate_bench_options(o));
  const int n = comm.world_size();
  const int rank = comm.rank();
  const size_t e = dtype_size(o.dtype);
  std::vector<BenchRow> rows;
  for (size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
    const size_t count = count_for(o.op, bytes, e, n);
    const size_t per_op_bytes = std::max(count * e * static_cast<size_t>(n), size_t{1});
    const size_t slots =
        std::clamp<size_t>(o.check_bytes_max / per_op_bytes, 1, static_cast<size_t>(o.iters));
    SizeBuffers b;
    prepare(o, rank, n, count, slots, &b);
    for (int w = 0; w < o.warmup; ++w) {
      reset_slot(o, rank, b, 0);
      KILN_RETURN_IF_ERROR(comm.run(op_args(o, rank, b, 0)));
    }
    int64_t timed_ns = 0;
    bool correct = true;
    for (int done = 0; done < o.iters;) {
      const size_t batch = std::min<size_t>(slots, static_cast<size_t>(o.iters - done));
      for (size_t k = 0; k < batch; ++k)
        reset_slot(o, rank, b, k);
      KILN_RETURN_IF_ERROR(comm.run(CollectiveArgs::barrier()));
      const int64_t t0 = monotonic_now_ns();
      for (size_t k = 0; k < batch; ++k)
        KILN_RETURN_IF_ERROR(comm.run(op_args(o, rank, b, k)));
      timed_ns += monotonic_now_ns() - t0;
      for (size_t k = 0; k < batch; ++k)
        correct = correct && check_slot(o, rank, b, k);
      done += static_cast<int>(batch);
    }
    // The slowest rank's mean time, and whether every rank's every result was right.
    double mean_us = static_cast<double>(timed_ns) / o.iters / 1000.0;
    int32_t ok = correct ? 1 : 0;
    KILN_RETURN_IF_ERROR(
        comm.run(CollectiveArgs::allreduce(&mean_us, &mean_us, 1, DataType::kF64, ReduceOp::kMax)));
    KILN_RETURN_IF_ERROR(
        comm.run(CollectiveArgs::allreduce(&ok, &ok, 1, DataType::kI32, ReduceOp::kMin)));
    BenchRow row;
    row.op = o.op;
    row.bytes = whole_bytes(o.op, count, e, n);
    row.ranks = n;
    row.transport = o.transport_name;
    row.dtype = o.dtype;
    row.in_place = o.in_place;
    row.iters = o.iters;
    row.time_us = mean_us;
    row.algbw_GBps = mean_us > 0 ? static_cast<double>(row.bytes) / (mean_us * 1e3) : 0;
    row.busbw_GBps = row.algbw_GBps * bus_factor(o.op, n);
    row.correct = ok == 1;
    rows.push_back(row);
    on_row(row);
    if (bytes > o.max_bytes / 2) break;  // the next doubling would pass the maximum
  }
  return rows;
}

std::string bench_row_json(const BenchRow& row) {
  nlohmann::ordered_json j;
  j["op"] = std::string(op_kind_name(row.op));
  j["bytes"] = row.bytes;
  j["ranks"] = row.ranks;
  j["transport"] = row.transport;
  j["dtype"] = std::string(dtype_name(row.dtype));
  j["in_place"] = row.in_place;
  j["iters"] = row.iters;
  j["time_us"] = row.time_us;
  j["algbw_GBps"] = row.algbw_GBps;
  j["busbw_GBps"] = row.busbw_GBps;
  j["correct"] = row.correct;
  return j.dump();
}

}  // namespace kiln::comm
