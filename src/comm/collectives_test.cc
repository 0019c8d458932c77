// Correctness of every collective x dtype x reduce op x size x world size 1..8, over shared
// memory, over TCP, and over a mix of both (ranks on fake hosts), against analytic expectations
// (testing/typed_values.h). Ranks run as threads over the real transports.
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

struct Mode {
  const char* name;
  TransportPolicy transport;
  int ranks_per_host;  // 0: one host
};

const Mode kModes[] = {
    {"shm", TransportPolicy::kAuto, 0},
    {"tcp", TransportPolicy::kTcp, 0},
    {"hosts2", TransportPolicy::kAuto, 2},  // even hosts: sharded hierarchy
    {"hosts3", TransportPolicy::kAuto, 3},  // uneven hosts for most sizes: leader hierarchy
};

constexpr DataType kDtypes[] = {DataType::kF32, DataType::kF64, DataType::kBF16, DataType::kI32,
                                DataType::kI64};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg};
constexpr size_t kSizes[] = {0, 1, 7, 4096 + 3};

std::string describe(const char* what, DataType dtype, ReduceOp op, size_t count, bool in_place) {
  return std::string(what) + " " + std::string(dtype_name(dtype)) + " " +
         std::string(reduce_op_name(op)) + " count=" + std::to_string(count) +
         (in_place ? " in-place" : "");
}

// Compares one element; returns a Corruption naming the rank and index on mismatch.
Status expect_element(const void* buf, DataType dtype, size_t i, double want, int rank,
                      const std::string& what) {
  const double got = load(buf, dtype, i);
  if (got == want) return Status();
  return Status::corruption(what + ": rank " + std::to_string(rank) + " element " +
                            std::to_string(i) + " is " + std::to_string(got) + ", expected " +
                            std::to_string(want));
}

void expect_all_ok(const std::vector<Status>& statuses, const std::string& what) {
  for (size_t r = 0; r < statuses.size(); ++r) {
    EXPECT_TRUE(statuses[r].ok()) << what << ": rank " << r << ": " << statuses[r].to_string();
  }
}

class CollectivesTest : public ::testing::TestWithParam<std::tuple<int, Mode>> {
 protected:
  void SetUp() override {
    ClusterSpec spec;
    spec.world_size = std::get<0>(GetParam());
    spec.transport = std::get<1>(GetParam()).transport;
    spec.ranks_per_host = std::get<1>(GetParam()).ranks_per_host;
    Result<std::unique_ptr<ThreadCluster>> c = ThreadCluster::create(spec);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    cluster_ = std::move(*c);
  }

  int n() const { return cluster_->size(); }

  void check_allreduce(DataType dtype, ReduceOp op, size_t count, bool in_place, bool async) {
    const std::string what = describe("allreduce", dtype, op, count, in_place);
    expect_all_ok(cluster_->run([&](int rank) -> Status {
      std::vector<char> in = make_buffer(dtype, count);
      std::vector<char> out = make_buffer(dtype, count);
      for (size_t i = 0; i < count; ++i)
        store(in.data(), dtype, i, input_value(rank, i));
      void* dst = in_place ? in.data() : out.data();
      const CollectiveArgs args = CollectiveArgs::allreduce(in.data(), dst, count, dtype, op);
      KILN_RETURN_IF_ERROR(async ? cluster_->comm(rank).submit(args).wait()
                                 : cluster_->comm(rank).run(args));
      for (size_t i = 0; i < count; ++i) {
        KILN_RETURN_IF_ERROR(
            expect_element(dst, dtype, i, expected_reduction(dtype, op, n(), i), rank, what));
      }
      return Status();
    }),
                  what);
  }

  void check_reduce_scatter(DataType dtype, ReduceOp op, size_t count, bool in_place) {
    const std::string what = describe("reduce_scatter", dtype, op, count, in_place);
    expect_all_ok(cluster_->run([&](int rank) -> Status {
      const size_t total = count * n();
      std::vector<char> in = make_buffer(dtype, total);
      std::vector<char> out = make_buffer(dtype, count);
      for (size_t i = 0; i < total; ++i)
        store(in.data(), dtype, i, input_value(rank, i));
      char* dst = in_place ? in.data() + rank * count * dtype_size(dtype) : out.data();
      KILN_RETURN_IF_ERROR(cluster_->comm(rank).run(
          CollectiveArgs::reduce_scatter(in.data(), dst, count, dtype, op)));
      for (size_t i = 0; i < count; ++i) {
        KILN_RETURN_IF_ERROR(expect_element(
            dst, dtype, i, expected_reduction(dtype, op, n(), rank * count + i), rank, what));
      }
      return Status();
    }),
                  what);
  }

  void check_reduce(DataType dtype, ReduceOp op, size_t count, int root) {
    const std::string what =
        describe("reduce", dtype, op, count, false) + " root=" + std::to_string(root);
    expect_all_ok(cluster_->run([&](int rank) -> Status {
      std::vector<char> in = make_buffer(dtype, count);
      std::vector<char> out = make_buffer(dtype, count);
      for (size_t i = 0; i < count; ++i)
        store(in.data(), dtype, i, input_value(rank, i));
      void* dst = rank == root ? out.data() : nullptr;
      KILN_RETURN_IF_ERROR(
          cluster_->comm(rank).run(CollectiveArgs::reduce(in.data(), dst, count, dtype, op, root)));
      if (rank != root) return Status();
      for (size_t i = 0; i < count; ++i) {
        KILN_RETURN_IF_ERROR(
            expect_element(dst, dtype, i, expected_reduction(dtype, op, n(), i), rank, what));
      }
      return Status();
    }),
                  what);
  }

  void check_allgather(DataType dtype, size_t count, bool in_place) {
    const std::string what = describe("allgather", dtype, ReduceOp::kSum, count, in_place);
    expect_all_ok(cluster_->run([&](int rank) -> Status {
      const size_t e = dtype_size(dtype);
      std::vector<char> in = make_buffer(dtype, count);
      std::vector<char> out = make_buffer(dtype, count * n());
      char* src = in_place ? out.data() + rank * count * e : in.data();
      for (size_t i = 0; i < count; ++i)
        store(src, dtype, i, input_value(rank, i));
      KILN_RETURN_IF_ERROR(
          cluster_->comm(rank).run(CollectiveArgs::allgather(src, out.data(), count, dtype)));
      for (int from = 0; from < n(); ++from) {
        for (size_t i = 0; i < count; ++i) {
          KILN_RETURN_IF_ERROR(expect_element(out.data(), dtype, from * count + i,
                                              input_value(from, i), rank, what));
        }
      }
      return Status();
    }),
                  what);
  }

  void check_broadcast(DataType dtype, size_t count, int root) {
    const std::string what = describe("broadcast", dtype, ReduceOp::kSum, count, false) +
                             " root=" + std::to_string(root);
    expect_all_ok(cluster_->run([&](int rank) -> Status {
      std::vector<char> buf = make_buffer(dtype, count);
      for (size_t i = 0; i < count; ++i)
        store(buf.data(), dtype, i, input_value(rank, i));
      KILN_RETURN_IF_ERROR(
          cluster_->comm(rank).run(CollectiveArgs::broadcast(buf.data(), count, dtype, root)));
      for (size_t i = 0; i < count; ++i) {
        KILN_RETURN_IF_ERROR(
            expect_element(buf.data(), dtype, i, input_value(root, i), rank, what));
      }
      return Status();
    }),
                  what);
  }

  void check_all_to_all(DataType dtype, size_t count) {
    const std::string what = describe("all_to_all", dtype, ReduceOp::kSum, count, false);
    expect_all_ok(cluster_->run([&](int rank) -> Status {
      const size_t total = count * n();
      std::vector<char> in = make_buffer(dtype, total);
      std::vector<char> out = make_buffer(dtype, total);
      for (size_t i = 0; i < total; ++i)
        store(in.data(), dtype, i, input_value(rank, i));
      KILN_RETURN_IF_ERROR(cluster_->comm(rank).run(
          CollectiveArgs::all_to_all(in.data(), out.data(), count, dtype)));
      for (int from = 0; from < n(); ++from) {
        for (size_t i = 0; i < count; ++i) {
          // Block `from` of my output is block `rank` of rank `from`'s input.
          KILN_RETURN_IF_ERROR(expect_element(out.data(), dtype, from * count + i,
                                              input_value(from, rank * count + i), rank, what));
        }
      }
      return Status();
    }),
                  what);
  }

  std::unique_ptr<ThreadCluster> cluster_;
};

TEST_P(CollectivesTest, EveryCollectiveDtypeOpAndSize) {
  for (size_t count : kSizes) {
    for (DataType dtype : kDtypes) {
      for (ReduceOp op : kOps) {
        check_allreduce(dtype, op, count, /*in_place=*/false, /*async=*/false);
        check_allreduce(dtype, op, count, /*in_place=*/true, /*async=*/true);
        check_reduce_scatter(dtype, op, count, /*in_place=*/false);
        check_reduce_scatter(dtype, op, count, /*in_place=*/true);
        check_reduce(dtype, op, count, static_cast<int>(count % n()));
      }
      check_allgather(dtype, count, /*in_place=*/false);
      check_allgather(dtype, count, /*in_place=*/true);
      check_broadcast(dtype, count, static_cast<int>((count + 1) % n()));
      check_all_to_all(dtype, count);
      if (HasFailure()) return;  // one report per failing combination is enough
    }
  }
}

TEST_P(CollectivesTest, BarrierAndPointToPoint) {
  expect_all_ok(
      cluster_->run([&](int rank) { return cluster_->comm(rank).run(CollectiveArgs::barrier()); }),
      "barrier");
  // Pairs (0,1), (2,3), ...: the even rank sends then receives, the odd one the reverse, with
  // messages larger than a link's buffering so that both sides must make progress together.
  const size_t bytes = 100'003;
  expect_all_ok(cluster_->run([&](int rank) -> Status {
    const int peer = rank ^ 1;
    if (peer >= n()) return Status();
    std::vector<uint8_t> out(bytes);
    std::vector<uint8_t> in(bytes);
    for (size_t i = 0; i < bytes; ++i)
      out[i] = static_cast<uint8_t>(i * 31 + rank);
    Communicator& c = cluster_->comm(rank);
    const CollectiveArgs send = CollectiveArgs::send_to(out.data(), bytes, peer, 7);
    const CollectiveArgs recv = CollectiveArgs::recv_from(in.data(), bytes, peer, 7);
    if (rank % 2 == 0) {
      KILN_RETURN_IF_ERROR(c.run(send));
      KILN_RETURN_IF_ERROR(c.run(recv));
    } else {
      KILN_RETURN_IF_ERROR(c.run(recv));
      KILN_RETURN_IF_ERROR(c.run(send));
    }
    for (size_t i = 0; i < bytes; ++i) {
      if (in[i] != static_cast<uint8_t>(i * 31 + peer)) {
        return Status::corruption("send/recv: rank " + std::to_string(rank) + " byte " +
                                  std::to_string(i));
      }
    }
    return Status();
  }),
                "send/recv");
}

TEST_P(CollectivesTest, AsyncOpsQueueInOrder) {
  // Many ops in flight per rank, waited on at the end: the queue must run them in order.
  constexpr int kOpsInFlight = 20;
  constexpr size_t kCount = 1000;
  expect_all_ok(cluster_->run([&](int rank) -> Status {
    std::vector<std::vector<float>> bufs(kOpsInFlight, std::vector<float>(kCount));
    std::vector<Work> works;
    for (int k = 0; k < kOpsInFlight; ++k) {
      for (size_t i = 0; i < kCount; ++i)
        bufs[k][i] = static_cast<float>(k + rank);
      works.push_back(cluster_->comm(rank).allreduce(bufs[k].data(), bufs[k].data(), kCount,
                                                     DataType::kF32, ReduceOp::kSum));
    }
    for (int k = 0; k < kOpsInFlight; ++k) {
      KILN_RETURN_IF_ERROR(works[k].wait());
      const float want = static_cast<float>(k * n() + n() * (n() - 1) / 2);
      if (bufs[k][kCount - 1] != want) {
        return Status::corruption("op " + std::to_string(k) + " has " +
                                  std::to_string(bufs[k][kCount - 1]));
      }
    }
    return Status();
  }),
                "async queue");
}

std::string mode_name(const ::testing::TestParamInfo<std::tuple<int, Mode>>& info) {
  return std::string(std::get<1>(info.param).name) + "_ws" +
         std::to_string(std::get<0>(info.param));
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CollectivesTest,
                         ::testing::Combine(::testing::Range(1, 9), ::testing::ValuesIn(kModes)),
                         mode_name);

// Allreduce with each algorithm forced, at sizes that take many pieces.
class AllreduceAlgorithmTest : public ::testing::TestWithParam<std::tuple<int, Mode, Algorithm>> {};

TEST_P(AllreduceAlgorithmTest, MatchesTheReference) {
  ClusterSpec spec;
  spec.world_size = std::get<0>(GetParam());
  spec.transport = std::get<1>(GetParam()).transport;
  spec.ranks_per_host = std::get<1>(GetParam()).ranks_per_host;
  spec.allreduce_algorithm = std::get<2>(GetParam());
  Result<std::unique_ptr<ThreadCluster>> cluster = ThreadCluster::create(spec);
  ASSERT_TRUE(cluster.ok()) << cluster.status().to_string();
  const int n = spec.world_size;
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{4099}, size_t{65537}}) {
    for (DataType dtype : {DataType::kF32, DataType::kBF16, DataType::kI64}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
        const std::string what = describe("allreduce", dtype, op, count, false);
        expect_all_ok((*cluster)->run([&](int rank) -> Status {
          std::vector<char> in = make_buffer(dtype, count);
          std::vector<char> out = make_buffer(dtype, count);
          for (size_t i = 0; i < count; ++i)
            store(in.data(), dtype, i, input_value(rank, i));
          KILN_RETURN_IF_ERROR((*cluster)->comm(rank).run(
              CollectiveArgs::allreduce(in.data(), out.data(), count, dtype, op)));
          for (size_t i = 0; i < count; ++i) {
            KILN_RETURN_IF_ERROR(expect_element(out.data(), dtype, i,
                                                expected_reduction(dtype, op, n, i), rank, what));
          }
          return Status();
        }),
                      what);
      }
    }
  }
}

std::string algo_name(const ::testing::TestParamInfo<std::tuple<int, Mode, Algorithm>>& info) {
  return std::string(std::get<1>(info.param).name) + "_ws" +
         std::to_string(std::get<0>(info.param)) + "_" +
         std::string(algorithm_name(std::get<2>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(Algorithms, AllreduceAlgorithmTest,
                         ::testing::Combine(::testing::Values(2, 3, 5, 8),
                                            ::testing::ValuesIn(kModes),
                                            ::testing::Values(Algorithm::kRing,
                                                              Algorithm::kRecursiveDoubling,
                                                              Algorithm::kHierarchical)),
                         algo_name);

}  // namespace
}  // namespace kiln::comm
