// Collectives on large buffers: 64 MiB at every world size 1..8 over shared memory and over TCP
// (many pipelined slices, every FIFO slot reused thousands of times), and one allreduce of more
// than 2 GiB (no 32-bit byte count anywhere on the path).
//
// The full cross product of collective x dtype x reduce op runs at the small sizes in
// collectives_test.cc. Here every collective runs at 64 MiB for every world size and transport,
// with the dtype and reduce op rotating across world sizes so that each appears at 64 MiB too;
// the expected output is computed once per case and compared byte for byte.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <tuple>

#include "comm/testing/comm_test_util.h"
#include "comm/typed_values.h"

namespace kiln::comm {
namespace {

using testing::ClusterSpec;
using testing::ThreadCluster;

constexpr size_t kBigBytes = 64 << 20;
constexpr DataType kDtypes[] = {DataType::kF32, DataType::kF64, DataType::kBF16, DataType::kI32,
                                DataType::kI64};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg};

std::vector<char> typed(DataType dtype, size_t count, const std::function<double(size_t)>& f) {
  std::vector<char> buf = make_buffer(dtype, count);
  for (size_t i = 0; i < count; ++i)
    store(buf.data(), dtype, i, f(i));
  return buf;
}

void expect_all_ok(const std::vector<Status>& statuses, const std::string& what) {
  for (size_t r = 0; r < statuses.size(); ++r) {
    EXPECT_TRUE(statuses[r].ok()) << what << ": rank " << r << ": " << statuses[r].to_string();
  }
}

Status compare(const std::vector<char>& got, const std::vector<char>& want, size_t bytes, int rank,
               const std::string& what) {
  if (std::memcmp(got.data(), want.data(), bytes) == 0) return Status();
  size_t i = 0;
  while (i < bytes && got[i] == want[i])
    ++i;
  return Status::corruption(what + ": rank " + std::to_string(rank) + " differs at byte " +
                            std::to_string(i));
}

class BigBuffersTest : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(BigBuffersTest, EveryCollectiveAt64MiB) {
  const int n = std::get<0>(GetParam());
  ClusterSpec spec;
  spec.world_size = n;
  spec.transport = std::get<1>(GetParam()) ? TransportPolicy::kTcp : TransportPolicy::kAuto;
  spec.shm_message_bytes = 64 << 10;  // the production sizes: this is about volume
  spec.tcp_message_bytes = 512 << 10;
  spec.timeout_ms = 120'000;
  Result<std::unique_ptr<ThreadCluster>> c = ThreadCluster::create(spec);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  ThreadCluster& cluster = **c;
  const DataType dtype = kDtypes[n % 5];
  const ReduceOp op = kOps[n % 4];
  const size_t e = dtype_size(dtype);
  const std::string tag = std::string(dtype_name(dtype)) + " " + std::string(reduce_op_name(op));

  // allreduce, in place: every rank ends with the reduction.
  {
    const size_t count = kBigBytes / e;
    const std::vector<char> want =
        typed(dtype, count, [&](size_t i) { return expected_reduction(dtype, op, n, i); });
    expect_all_ok(cluster.run([&](int rank) -> Status {
      std::vector<char> buf = typed(dtype, count, [&](size_t i) { return input_value(rank, i); });
      KILN_RETURN_IF_ERROR(cluster.comm(rank).run(
          CollectiveArgs::allreduce(buf.data(), buf.data(), count, dtype, op)));
      return compare(buf, want, count * e, rank, "allreduce " + tag);
    }),
                  "allreduce " + tag);
  }
  // reduce_scatter and allgather: 64 MiB in total, count per rank.
  {
    const size_t count = kBigBytes / e / n;
    const std::vector<char> full =
        typed(dtype, count * n, [&](size_t i) { return expected_reduction(dtype, op, n, i); });
    expect_all_ok(cluster.run([&](int rank) -> Status {
      std::vector<char> in =
          typed(dtype, count * n, [&](size_t i) { return input_value(rank, i); });
      std::vector<char> out = make_buffer(dtype, count);
      KILN_RETURN_IF_ERROR(cluster.comm(rank).run(
          CollectiveArgs::reduce_scatter(in.data(), out.data(), count, dtype, op)));
      std::vector<char> want(full.begin() + rank * count * e,
                             full.begin() + (rank + 1) * count * e);
      return compare(out, want, count * e, rank, "reduce_scatter " + tag);
    }),
                  "reduce_scatter " + tag);
    const std::vector<char> gathered = typed(dtype, count * n, [&](size_t i) {
      return input_value(static_cast<int>(i / count), i % count);
    });
    expect_all_ok(cluster.run([&](int rank) -> Status {
      std::vector<char> in = typed(dtype, count, [&](size_t i) { return input_value(rank, i); });
      std::vector<char> out = make_buffer(dtype, count * n);
      KILN_RETURN_IF_ERROR(
          cluster.comm(rank).run(CollectiveArgs::allgather(in.data(), out.data(), count, dtype)));
      return compare(out, gathered, count * n * e, rank, "allgather " + tag);
    }),
                  "allgather " + tag);
  }
  // broadcast from the last rank and reduce to it.
  {
    const size_t count = kBigBytes / e;
    const int root = n - 1;
    const std::vector<char> from_root =
        typed(dtype, count, [&](size_t i) { return input_value(root, i); });
    expect_all_ok(cluster.run([&](int rank) -> Status {
      std::vector<char> buf = typed(dtype, count, [&](size_t i) { return input_value(rank, i); });
      KILN_RETURN_IF_ERROR(
          cluster.comm(rank).run(CollectiveArgs::broadcast(buf.data(), count, dtype, root)));
      return compare(buf, from_root, count * e, rank, "broadcast " + tag);
    }),
                  "broadcast " + tag);
    const std::vector<char> reduced =
        typed(dtype, count, [&](size_t i) { return expected_reduction(dtype, op, n, i); });
    expect_all_ok(cluster.run([&](int rank) -> Status {
      std::vector<char> in = typed(dtype, count, [&](size_t i) { return input_value(rank, i); });
      std::vector<char> out = make_buffer(dtype, count);
      KILN_RETURN_IF_ERROR(cluster.comm(rank).run(CollectiveArgs::reduce(
          in.data(), rank == root ? out.data() : nullptr, count, dtype, op, root)));
      return rank == root ? compare(out, reduced, count * e, rank, "reduce " + tag) : Status();
    }),
                  "reduce " + tag);
  }
  // all_to_all: 64 MiB per rank in blocks of count.
  {
    const size_t count = kBigBytes / e / n;
    expect_all_ok(cluster.run([&](int rank) -> Status {
      std::vector<char> in =
          typed(dtype, count * n, [&](size_t i) { return input_value(rank, i); });
      std::vector<char> out = make_buffer(dtype, count * n);
      KILN_RETURN_IF_ERROR(
          cluster.comm(rank).run(CollectiveArgs::all_to_all(in.data(), out.data(), count, dtype)));
      const std::vector<char> want = typed(dtype, count * n, [&](size_t i) {
        return input_value(static_cast<int>(i / count), rank * count + i % count);
      });
      return compare(out, want, count * n * e, rank, "all_to_all " + tag);
    }),
                  "all_to_all " + tag);
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, BigBuffersTest,
                         ::testing::Combine(::testing::Range(1, 9), ::testing::Bool()),
                         [](const auto& param_info) {
                           return std::string(std::get<1>(param_info.param) ? "tcp" : "shm") +
                                  "_ws" + std::to_string(std::get<0>(param_info.param));
                         });

TEST(HugeBufferTest, AllreduceOfMoreThanTwoGiB) {
  ClusterSpec spec;
  spec.world_size = 2;
  spec.shm_message_bytes = 64 << 10;
  spec.timeout_ms = 300'000;
  Result<std::unique_ptr<ThreadCluster>> c = ThreadCluster::create(spec);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  // 2^29 + 7 int32 elements: 2 GiB + 28 bytes, so byte offsets pass 2^31.
  const size_t count = (size_t{1} << 29) + 7;
  expect_all_ok((*c)->run([&](int rank) -> Status {
    std::vector<int32_t> buf(count);
    for (size_t i = 0; i < count; ++i)
      buf[i] = static_cast<int32_t>((i % 1000) + rank * 3);
    KILN_RETURN_IF_ERROR((*c)->comm(rank).run(
        CollectiveArgs::allreduce(buf.data(), buf.data(), count, DataType::kI32, ReduceOp::kSum)));
    for (size_t i = 0; i < count; ++i) {
      if (buf[i] != static_cast<int32_t>(2 * (i % 1000) + 3)) {
        return Status::corruption("element " + std::to_string(i) + " is " + std::to_string(buf[i]));
      }
    }
    return Status();
  }),
                "allreduce of 2 GiB + 28 bytes");
}

}  // namespace
}  // namespace kiln::comm
