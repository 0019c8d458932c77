// Faults with ranks as threads: timeouts name the peer an op waited for, abort stops every rank
// within milliseconds, an aborted communicator fails every later op, and the flight recorder
// says what each rank was doing. Process-level faults (kill -9) are in tests/comm/.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "base/testing/temp_path.h"
#include "comm/testing/comm_test_util.h"

namespace kiln::comm {
namespace {

using testing::ClusterSpec;
using testing::ThreadCluster;

struct FaultMode {
  const char* name;
  TransportPolicy transport;
};

class FaultsTest : public ::testing::TestWithParam<FaultMode> {
 protected:
  std::unique_ptr<ThreadCluster> make(int n, int64_t timeout_ms, const std::string& dir = "") {
    ClusterSpec spec;
    spec.world_size = n;
    spec.transport = GetParam().transport;
    spec.timeout_ms = timeout_ms;
    spec.flight_recorder_dir = dir;
    Result<std::unique_ptr<ThreadCluster>> c = ThreadCluster::create(spec);
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    return c.ok() ? std::move(*c) : nullptr;
  }
};

TEST_P(FaultsTest, ARankThatNeverEntersMakesTheOthersTimeOutNamingIt) {
  const std::string dir = kiln::testing::unique_temp_dir("flight");
  auto cluster = make(3, 400, dir);
  ASSERT_NE(cluster, nullptr);
  std::vector<float> buf(1000, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  std::vector<Status> s = cluster->run([&](int rank) -> Status {
    if (rank == 2) return Status();  // never enters the collective
    std::vector<float> mine = buf;
    return cluster->comm(rank).run(CollectiveArgs::allreduce(mine.data(), mine.data(), mine.size(),
                                                             DataType::kF32, ReduceOp::kSum));
  });
  const double elapsed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(elapsed_s, 0.4 + 2.0);  // the timeout plus the 2 s the issue allows
  for (int r : {0, 1}) {
    ASSERT_FALSE(s[r].ok()) << "rank " << r;
    EXPECT_NE(s[r].message().find("allreduce seq=0 bytes=4000"), std::string::npos)
        << s[r].message();
  }
  // Over shared memory the ranks see each other's state: whichever times out first follows the
  // chain of waits and says rank 2 never entered, and the other reports that abort. Over TCP a
  // rank sees only its own wait, so only the one waiting on rank 2 can name it; the other names
  // the peer it waited for (comparing the flight recorder dumps of all ranks finds rank 2).
  const bool shm = GetParam().transport == TransportPolicy::kAuto;
  int naming_rank2 = 0;
  for (int r : {0, 1}) {
    if (shm) {
      EXPECT_NE(s[r].message().find("rank 2 (host h0) has not entered this collective"),
                std::string::npos)
          << "rank " << r << ": " << s[r].message();
    }
    if (s[r].message().find("rank 2 (host h0)") != std::string::npos) ++naming_rank2;
  }
  EXPECT_GE(naming_rank2, 1) << s[0].message() << " / " << s[1].message();
  // The flight recorder dumps, as JSON, point at rank 2 too.
  int dumps_naming_rank2 = 0;
  for (int r : {0, 1}) {
    std::ifstream in(dir + "/flight-rank" + std::to_string(r) + ".json");
    ASSERT_TRUE(in.good()) << "no flight recorder dump of rank " << r << " in " << dir;
    nlohmann::json dump = nlohmann::json::parse(in);
    EXPECT_EQ(dump["rank"], r);
    const auto& last = dump["entries"].back();
    EXPECT_EQ(last["op"], "allreduce");
    EXPECT_EQ(last["state"], "failed");
    EXPECT_EQ(last["bytes"], 4000);
    if (last["culprit_rank"] == 2) ++dumps_naming_rank2;
  }
  EXPECT_GE(dumps_naming_rank2, shm ? 2 : 1) << s[0].message() << " / " << s[1].message();
  std::remove((dir + "/flight-rank0.json").c_str());
  std::remove((dir + "/flight-rank1.json").c_str());
}

TEST_P(FaultsTest, AbortStopsEveryRankQuicklyAndLaterOpsFailAtOnce) {
  auto cluster = make(4, 30'000);
  ASSERT_NE(cluster, nullptr);
  std::atomic<bool> others_waiting{false};
  const auto start = std::chrono::steady_clock::now();
  std::vector<Status> s = cluster->run([&](int rank) -> Status {
    if (rank == 0) {
      // Let the others block in the collective, then give up on it.
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      cluster->comm(0).abort(Status::aborted("operator pressed stop"));
      return Status();
    }
    std::vector<float> mine(1 << 16, 1.0f);
    others_waiting = true;
    return cluster->comm(rank).run(CollectiveArgs::allreduce(mine.data(), mine.data(), mine.size(),
                                                             DataType::kF32, ReduceOp::kSum));
  });
  const double elapsed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(elapsed_s, 5.0) << "ranks must not wait for their 30 s deadline";
  for (int r = 1; r < 4; ++r) {
    ASSERT_FALSE(s[r].ok()) << "rank " << r;
    EXPECT_TRUE(s[r].message().find("rank 0") != std::string::npos) << s[r].message();
  }
  // Every later op fails at once with the original cause.
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(cluster->comm(r).aborted() || r != 0);
    Status again = cluster->comm(r).run(CollectiveArgs::barrier());
    EXPECT_FALSE(again.ok()) << "rank " << r;
    Work w = cluster->comm(r).barrier();
    EXPECT_FALSE(w.wait(1000).ok()) << "rank " << r;
  }
  EXPECT_NE(cluster->comm(0).run(CollectiveArgs::barrier()).message().find("operator pressed stop"),
            std::string::npos);
}

TEST_P(FaultsTest, MismatchedCollectivesAreDetectedNotMisread) {
  auto cluster = make(2, 5'000);
  ASSERT_NE(cluster, nullptr);
  std::vector<Status> s = cluster->run([&](int rank) -> Status {
    std::vector<float> buf(64, 1.0f);
    if (rank == 0) {
      return cluster->comm(rank).run(CollectiveArgs::broadcast(buf.data(), 64, DataType::kF32, 0));
    }
    return cluster->comm(rank).run(
        CollectiveArgs::allreduce(buf.data(), buf.data(), 64, DataType::kF32, ReduceOp::kSum));
  });
  ASSERT_FALSE(s[1].ok());
  EXPECT_NE(s[1].message().find("not running the same collectives"), std::string::npos)
      << s[1].message();
}

TEST_P(FaultsTest, InvalidArgumentsFailWithoutTouchingPeers) {
  auto cluster = make(2, 5'000);
  ASSERT_NE(cluster, nullptr);
  Communicator& c = cluster->comm(0);
  float x = 0;
  EXPECT_TRUE(c.run(CollectiveArgs::broadcast(&x, 1, DataType::kF32, 2)).is_invalid_argument());
  EXPECT_TRUE(c.run(CollectiveArgs::allreduce(nullptr, &x, 1, DataType::kF32, ReduceOp::kSum))
                  .is_invalid_argument());
  EXPECT_TRUE(c.run(CollectiveArgs::send_to(&x, 4, 0, 1)).is_invalid_argument());  // to itself
  EXPECT_TRUE(c.run(CollectiveArgs::send_to(&x, 4, 1, 1u << 24)).is_invalid_argument());
  EXPECT_TRUE(c.run(CollectiveArgs::all_to_all(&x, &x, 1, DataType::kF32)).is_invalid_argument());
  EXPECT_FALSE(c.aborted());  // bad arguments are the caller's problem, not the communicator's
  std::vector<Status> s =
      cluster->run([&](int rank) { return cluster->comm(rank).run(CollectiveArgs::barrier()); });
  EXPECT_TRUE(s[0].ok() && s[1].ok());
}

INSTANTIATE_TEST_SUITE_P(Transports, FaultsTest,
                         ::testing::Values(FaultMode{"shm", TransportPolicy::kAuto},
                                           FaultMode{"tcp", TransportPolicy::kTcp}),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

}  // namespace
}  // namespace kiln::comm
