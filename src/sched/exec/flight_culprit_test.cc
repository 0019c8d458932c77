// Tests of reading flight-recorder dumps for a culprit: hand-written dumps in the documented
// format (include/kiln/comm/flight_recorder.h) for the vote and its tie-break, dumps written by
// the real comm::FlightRecorder, and malformed or foreign files skipped with a warning.
#include <kiln/comm/flight_recorder.h>
#include <kiln/sched/flight_culprit.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "base/testing/temp_path.h"

namespace kiln::sched {
namespace {

nlohmann::json entry(uint64_t seq, const std::string& state, int culprit = -1,
                     const std::string& op = "allreduce") {
  nlohmann::json e = {{"seq", seq},
                      {"coll_seq", seq},
                      {"op", op},
                      {"bytes", 4096},
                      {"dtype", "f32"},
                      {"state", state},
                      {"submitted_at", "2026-11-29T19:39:50.000000Z"},
                      {"started_at", "2026-11-29T19:39:50.000001Z"},
                      {"ended_at", nullptr},
                      {"duration_ms", 1.0}};
  if (state == "failed") {
    e["waiting_on_rank"] = culprit;
    e["waiting_on_host"] = culprit >= 0 ? "n" + std::to_string(culprit) : "";
    e["culprit_rank"] = culprit;
    e["culprit_host"] = culprit >= 0 ? "n" + std::to_string(culprit) : "";
    e["error"] = "Timeout: " + op + " seq=" + std::to_string(seq) + ": recv from rank " +
                 std::to_string(culprit) + " timed out";
  }
  return e;
}

void write_dump(const std::string& dir, int rank, const std::vector<nlohmann::json>& entries) {
  nlohmann::json d = {{"rank", rank},
                      {"world_size", 8},
                      {"host", "n" + std::to_string(rank)},
                      {"pid", 1000 + rank},
                      {"dumped_at", "2026-11-29T19:40:20.000000Z"},
                      {"reason", "timeout"},
                      {"entries", entries}};
  std::ofstream(dir + "/flight-rank" + std::to_string(rank) + ".json") << d.dump() << "\n";
}

// An empty directory, even when --gtest_repeat runs a test again under the same name.
std::string fresh_dir(const std::string& name) {
  std::filesystem::remove_all(testing::unique_temp_path(name));
  return testing::unique_temp_dir(name);
}

FlightDumpReport read(const std::string& dir) {
  Result<FlightDumpReport> r = culprit_from_flight_dumps(dir);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : FlightDumpReport{};
}

TEST(FlightCulpritTest, TheRankNamedByMostDumpsWins) {
  const std::string dir = fresh_dir("flight");
  // Ranks 0, 1 and 3 point at 2 (3 only through its first failure); rank 4 points at 5.
  write_dump(dir, 0, {entry(1, "completed"), entry(2, "failed", 2)});
  write_dump(dir, 1, {entry(2, "failed", 2), entry(3, "failed", 6, "broadcast")});
  write_dump(dir, 3, {entry(7, "failed", 5), entry(5, "failed", 2)});  // seq 5 came first
  write_dump(dir, 4, {entry(2, "failed", 5)});
  write_dump(dir, 6, {entry(2, "running"), entry(3, "failed", -1)});  // names nobody
  const FlightDumpReport r = read(dir);
  EXPECT_EQ(r.dumps_read, 5);
  EXPECT_TRUE(r.warnings.empty());
  ASSERT_TRUE(r.culprit.has_value());
  EXPECT_EQ(r.culprit->rank, 2);
  EXPECT_EQ(r.culprit->votes, 3);
  EXPECT_EQ(r.culprit->host, "n2");
  EXPECT_EQ(r.culprit->op, "allreduce");
  EXPECT_EQ(r.culprit->reporting_rank, 0) << "the lowest rank that named it";
  EXPECT_NE(r.culprit->error.find("recv from rank 2"), std::string::npos) << r.culprit->error;
}

TEST(FlightCulpritTest, ATieGoesToTheLowestRank) {
  const std::string dir = fresh_dir("flight");
  write_dump(dir, 0, {entry(1, "failed", 7)});
  write_dump(dir, 1, {entry(1, "failed", 3)});
  const FlightDumpReport r = read(dir);
  ASSERT_TRUE(r.culprit.has_value());
  EXPECT_EQ(r.culprit->rank, 3);
  EXPECT_EQ(r.culprit->votes, 1);
  EXPECT_EQ(r.culprit->reporting_rank, 1);
}

TEST(FlightCulpritTest, NoFailureNoCulprit) {
  const std::string dir = fresh_dir("flight");
  EXPECT_FALSE(read(dir).culprit.has_value()) << "an empty directory";
  write_dump(dir, 0, {entry(1, "completed"), entry(2, "running")});
  const FlightDumpReport r = read(dir);
  EXPECT_EQ(r.dumps_read, 1);
  EXPECT_FALSE(r.culprit.has_value());
}

TEST(FlightCulpritTest, MalformedAndForeignFilesAreSkippedWithAWarning) {
  const std::string dir = fresh_dir("flight");
  write_dump(dir, 0, {entry(1, "failed", 1)});
  std::ofstream(dir + "/flight-rank1.json") << "{\"rank\":1,\"entries\":[";  // cut short
  std::ofstream(dir + "/flight-rank2.json") << "[1,2,3]";                    // not a dump
  std::ofstream(dir + "/flight-rank3.json.tmp") << "{}";                     // a temporary
  std::ofstream(dir + "/flight-rankX.json") << "{}";                         // not a rank
  std::ofstream(dir + "/notes.txt") << "hello";
  const FlightDumpReport r = read(dir);
  EXPECT_EQ(r.dumps_read, 1);
  ASSERT_EQ(r.warnings.size(), 2u);
  EXPECT_NE(r.warnings[0].find("flight-rank1.json"), std::string::npos) << r.warnings[0];
  EXPECT_NE(r.warnings[1].find("flight-rank2.json"), std::string::npos) << r.warnings[1];
  ASSERT_TRUE(r.culprit.has_value());
  EXPECT_EQ(r.culprit->rank, 1);
}

TEST(FlightCulpritTest, AFileOverTheBoundIsSkipped) {
  const std::string dir = fresh_dir("flight");
  write_dump(dir, 0, {entry(1, "failed", 4)});
  {
    std::ofstream big(dir + "/flight-rank1.json");
    big << "{\"pad\":\"" << std::string(kFlightDumpBytesMax, 'x') << "\"}";
  }
  const FlightDumpReport r = read(dir);
  EXPECT_EQ(r.dumps_read, 1);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("flight-rank1.json"), std::string::npos);
  EXPECT_NE(r.warnings[0].find("bound"), std::string::npos) << r.warnings[0];
}

TEST(FlightCulpritTest, AMissingDirectoryIsNotFound) {
  Result<FlightDumpReport> r = culprit_from_flight_dumps(testing::unique_temp_path("none"));
  ASSERT_TRUE(r.status().is_not_found());
  EXPECT_NE(r.status().message().find("none"), std::string::npos);
}

TEST(FlightCulpritTest, ReadsDumpsOfTheRealFlightRecorder) {
  const std::string dir = fresh_dir("flight");
  // Ranks 0 and 1 time out waiting for rank 2 (on host n2); rank 2 itself completed its ops.
  for (int rank = 0; rank < 3; ++rank) {
    comm::FlightRecorder recorder({rank, 3, "n" + std::to_string(rank), 4000 + rank}, 16);
    recorder.record_submit(0, 0, "allreduce", 4096, "f32", 1'000);
    recorder.record_start(0, 2'000);
    recorder.record_end(0, Status(), {}, {}, 3'000);
    recorder.record_submit(1, 1, "allgather", 8192, "f32", 4'000);
    recorder.record_start(1, 5'000);
    if (rank == 2) {
      recorder.record_end(1, Status(), {}, {}, 6'000);
    } else {
      const Status timeout = Status::timeout("allgather seq=1: recv from rank 2 timed out");
      recorder.record_end(1, timeout, {2, "n2"}, {2, "n2"}, 30'000'000'000);
    }
    Result<std::string> path = recorder.dump_to_dir(dir, "timeout");
    ASSERT_TRUE(path.ok()) << path.status().to_string();
  }
  const FlightDumpReport r = read(dir);
  EXPECT_EQ(r.dumps_read, 3);
  EXPECT_TRUE(r.warnings.empty());
  ASSERT_TRUE(r.culprit.has_value());
  EXPECT_EQ(r.culprit->rank, 2);
  EXPECT_EQ(r.culprit->host, "n2");
  EXPECT_EQ(r.culprit->op, "allgather");
  EXPECT_EQ(r.culprit->votes, 2);
  EXPECT_EQ(r.culprit->reporting_rank, 0);
  EXPECT_NE(r.culprit->error.find("timed out"), std::string::npos) << r.culprit->error;
}

}  // namespace
}  // namespace kiln::sched
