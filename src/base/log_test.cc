#include <kiln/base/log.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/testing/temp_path.h"

namespace kiln {
namespace {

std::vector<nlohmann::json> parse_lines(const std::string& text) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    lines.push_back(nlohmann::json::parse(line));
  return lines;
}

TEST(LogTest, LineHasFixedFieldsThenKeyValuesInOrder) {
  const std::string line =
      format_log_line(1'700'000'000'000'000'000LL, LogLevel::kWarn, "comm", "peer slow",
                      {{"peer_rank", 3},
                       {"wait_ms", 812.5},
                       {"host", "node7"},
                       {"ok", false},
                       {"bytes", uint64_t{1} << 40}});
  EXPECT_EQ(line, R"({"ts":"2023-11-14T22:13:20.000000Z","level":"warn","component":"comm",)"
                  R"("msg":"peer slow","peer_rank":3,"wait_ms":812.5,"host":"node7","ok":false,)"
                  R"("bytes":1099511627776})");
}

TEST(LogTest, EscapesAndKeepsFixedFieldsAuthoritative) {
  const std::string line = format_log_line(0, LogLevel::kInfo, "cfg", "bad \"key\"\nnext line",
                                           {{"msg", "spoofed"}, {"path", "a\\b"}});
  nlohmann::json obj = nlohmann::json::parse(line);
  EXPECT_EQ(obj["msg"], "bad \"key\"\nnext line");
  EXPECT_EQ(obj["path"], "a\\b");
  EXPECT_EQ(line.find('\n'), std::string::npos);  // one line, always
}

TEST(LogTest, InvalidUtf8IsReplacedNotThrown) {
  const std::string bad = std::string("abc") + static_cast<char>(0xff) + "def";
  nlohmann::json obj =
      nlohmann::json::parse(format_log_line(0, LogLevel::kInfo, "x", bad, {{"v", bad}}));
  EXPECT_EQ(obj["msg"].get<std::string>().substr(0, 3), "abc");
}

TEST(LogTest, SinkFiltersByLevelAndLoggersTagTheirComponent) {
  std::ostringstream out;
  auto sink = LogSink::to_stream(out, LogLevel::kInfo);
  Logger comm(sink, "comm");
  Logger tcp = comm.child("tcp");
  comm.debug("dropped");
  comm.info("ring built", {{"ranks", 4}});
  tcp.error("connect failed", {{"peer", "10.0.0.2:29500"}});
  sink->set_level(LogLevel::kError);
  comm.warn("dropped too");
  std::vector<nlohmann::json> lines = parse_lines(out.str());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["component"], "comm");
  EXPECT_EQ(lines[0]["level"], "info");
  EXPECT_EQ(lines[0]["ranks"], 4);
  EXPECT_EQ(lines[1]["component"], "comm.tcp");
  EXPECT_EQ(lines[1]["level"], "error");
  EXPECT_FALSE(comm.enabled(LogLevel::kWarn));
}

TEST(LogTest, DefaultLoggerDropsEverything) {
  Logger nobody;
  EXPECT_FALSE(nobody.enabled(LogLevel::kError));
  nobody.error("goes nowhere");  // must not crash
}

TEST(LogTest, ParsesLevelNames) {
  EXPECT_EQ(*parse_log_level("debug"), LogLevel::kDebug);
  EXPECT_EQ(*parse_log_level("off"), LogLevel::kOff);
  Result<LogLevel> bad = parse_log_level("verbose");
  EXPECT_TRUE(bad.status().is_invalid_argument());
  EXPECT_NE(bad.status().message().find("verbose"), std::string::npos);
}

TEST(LogTest, OpenFailsNamingAnUnwritablePath) {
  // A regular file where a directory should be: no amount of mkdir makes this writable.
  const std::string blocker = kiln::testing::unique_temp_path("blocker");
  std::ofstream(blocker) << "not a directory";
  LogOptions options;
  options.file_path = blocker + "/kiln.log";
  Result<std::shared_ptr<LogSink>> sink = LogSink::open(options);
  std::remove(blocker.c_str());
  ASSERT_FALSE(sink.ok());
  EXPECT_TRUE(sink.status().is_io_error());
  EXPECT_NE(sink.status().message().find(options.file_path), std::string::npos);
}

TEST(LogTest, FileSinkAppendsCompleteLines) {
  const std::string path = kiln::testing::unique_temp_path("append.log");
  std::remove(path.c_str());
  for (int run = 0; run < 2; ++run) {
    LogOptions options;
    options.file_path = path;
    Result<std::shared_ptr<LogSink>> sink = LogSink::open(options);
    ASSERT_TRUE(sink.ok()) << sink.status().to_string();
    Logger(*sink, "test").info("run", {{"run", run}});
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::vector<nlohmann::json> lines = parse_lines(text.str());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["run"], 0);
  EXPECT_EQ(lines[1]["run"], 1);
  std::remove(path.c_str());
}

TEST(LogRateLimiterTest, AllowsABurstPerIntervalAndCountsTheRest) {
  FakeClock clock(1'000'000'000);
  LogRateLimiter limiter(/*interval_ms=*/1000, /*burst=*/2, clock);
  int64_t suppressed = -1;
  EXPECT_TRUE(limiter.allow(&suppressed));
  EXPECT_EQ(suppressed, 0);
  EXPECT_TRUE(limiter.allow());
  EXPECT_FALSE(limiter.allow());
  EXPECT_FALSE(limiter.allow());
  EXPECT_FALSE(limiter.allow());
  clock.advance_ns(999'000'000);
  EXPECT_FALSE(limiter.allow());
  clock.advance_ns(1'000'000);
  EXPECT_TRUE(limiter.allow(&suppressed));
  EXPECT_EQ(suppressed, 4);  // the four refused since the last line that passed
}

}  // namespace
}  // namespace kiln
