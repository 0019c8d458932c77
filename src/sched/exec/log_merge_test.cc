// Tests of merging and filtering a job's rank logs (kiln/sched/log_merge.h).
#include <kiln/sched/log_merge.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kiln::sched {
namespace {

LogRecord rec(const std::string& ts, int rank, const std::string& line) {
  Result<LogRecord> r =
      parse_log_record({{"ts", ts}, {"rank", rank}, {"stream", "stderr"}, {"line", line}},
                       "n" + std::to_string(rank));
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return *r;
}

TEST(LogMerge, RanksAreMergedInTimeOrderAndEqualTimesKeepRankOrder) {
  std::vector<std::vector<LogRecord>> runs = {
      {rec("2026-01-01T00:00:01.000000Z", 0, "a"), rec("2026-01-01T00:00:03.000000Z", 0, "c")},
      {rec("2026-01-01T00:00:02.000000Z", 1, "b"), rec("2026-01-01T00:00:03.000000Z", 1, "d")},
      {}};
  std::vector<std::string> lines;
  for (const LogRecord& r : merge_logs(runs))
    lines.push_back(r.line);
  EXPECT_EQ(lines, (std::vector<std::string>{"a", "b", "c", "d"}));
}

TEST(LogMerge, LevelsComeFromStructuredLinesAndFiltersCombine) {
  const LogRecord plain = rec("2026-01-01T00:00:01.000000Z", 0, "step 1 loss 9.1");
  const LogRecord err =
      rec("2026-01-01T00:00:02.000000Z", 1, R"({"level":"error","msg":"checkpoint failed"})");
  EXPECT_EQ(plain.level, "info");
  EXPECT_EQ(err.level, "error");
  LogFilter warn;
  warn.min_level = log_level_rank("warn");
  EXPECT_FALSE(log_matches(plain, warn));
  EXPECT_TRUE(log_matches(err, warn));
  LogFilter grep;
  grep.grep = std::regex("loss [0-9]");
  EXPECT_TRUE(log_matches(plain, grep));
  EXPECT_FALSE(log_matches(err, grep));
  LogFilter since;
  since.since = "2026-01-01T00:00:01.500000Z";
  EXPECT_FALSE(log_matches(plain, since));
  EXPECT_TRUE(log_matches(err, since));
  EXPECT_EQ(format_log_record(plain),
            "2026-01-01T00:00:01.000000Z rank 0 n0 err | step 1 loss 9.1");
}

TEST(LogMerge, ARecordWithoutItsFieldsIsRefusedNamingTheField) {
  Result<LogRecord> r = parse_log_record({{"ts", "x"}, {"line", "y"}}, "n0");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'rank'"), std::string::npos) << r.status().message();
  EXPECT_FALSE(parse_log_record("not an object", "n0").ok());
}

}  // namespace
}  // namespace kiln::sched
