// Tests of the per-rank log: records are valid JSON with escaping and UTF-8 repair, the size bound
// rotates once to <path>.1, and the reader's offsets hold across rotations (including a reader
// that fell behind by more than a rotation and is told what it missed).
#include <kiln/sched/rank_log.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/testing/temp_path.h"

namespace kiln::sched {
namespace {

// A path no earlier run left a file at (--gtest_repeat runs a test again under the same name).
std::string fresh_path(const std::string& name) {
  const std::string path = testing::unique_temp_path(name);
  std::filesystem::remove(path);
  std::filesystem::remove(path + ".1");
  return path;
}

int64_t file_size(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

std::unique_ptr<RankLogWriter> open_writer(const std::string& path, int64_t bytes_max,
                                           const Clock* clock = &system_clock()) {
  RankLogOptions o;
  o.path = path;
  o.rank = 7;
  o.bytes_max = bytes_max;
  o.clock = clock;
  Result<std::unique_ptr<RankLogWriter>> w = RankLogWriter::open(o);
  EXPECT_TRUE(w.ok()) << w.status().to_string();
  return w.ok() ? std::move(*w) : nullptr;
}

// Reads the whole log from `offset` in one call.
RankLogChunk read_all(const std::string& path, int64_t offset = 0) {
  Result<RankLogChunk> c = read_rank_log(path, offset, 16 << 20);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? *c : RankLogChunk{};
}

TEST(RankLogTest, RecordsAreJsonWithEscapesAndRepairedUtf8) {
  const std::string path = fresh_path("rank.log");
  FakeClock clock(1'700'000'000'000'000'000);
  auto w = open_writer(path, 1 << 20, &clock);
  ASSERT_NE(w, nullptr);
  ASSERT_TRUE(w->append(RankStream::kStdout, "step 1 \"quoted\" \\ tab\there", false).ok());
  ASSERT_TRUE(w->append(RankStream::kStderr, std::string("bad \xff\xfe utf8 \x01"), false).ok());
  ASSERT_TRUE(w->append(RankStream::kStdout, "", false).ok());

  const RankLogChunk c = read_all(path);
  ASSERT_EQ(c.lines.size(), 3u);
  EXPECT_EQ(c.skipped_bytes, 0);
  EXPECT_EQ(c.next_offset, file_size(path));
  EXPECT_EQ(c.next_offset, w->end_offset());
  const auto a = nlohmann::json::parse(c.lines[0]);
  EXPECT_EQ(a["ts"], "2023-11-14T22:13:20.000000Z");
  EXPECT_EQ(a["rank"], 7);
  EXPECT_EQ(a["stream"], "stdout");
  EXPECT_EQ(a["line"], "step 1 \"quoted\" \\ tab\there");
  EXPECT_FALSE(a.contains("truncated"));
  const auto b = nlohmann::json::parse(c.lines[1]);
  EXPECT_EQ(b["stream"], "stderr");
  EXPECT_EQ(b["line"], "bad \xEF\xBF\xBD\xEF\xBF\xBD utf8 \x01") << "U+FFFD for each bad byte";
  EXPECT_NE(c.lines[1].find("\\u0001"), std::string::npos) << "control bytes escaped";
  EXPECT_EQ(nlohmann::json::parse(c.lines[2])["line"], "");
}

TEST(RankLogTest, ALineOverTheBoundIsCutAndMarked) {
  const std::string path = fresh_path("rank.log");
  auto w = open_writer(path, 1 << 20);
  ASSERT_NE(w, nullptr);
  ASSERT_TRUE(w->append(RankStream::kStdout, std::string(100 << 10, 'x'), false).ok());
  const RankLogChunk c = read_all(path);
  ASSERT_EQ(c.lines.size(), 1u);
  const auto j = nlohmann::json::parse(c.lines[0]);
  EXPECT_EQ(j["line"].get<std::string>().size(), kRankLogLineBytesMax);
  EXPECT_EQ(j["truncated"], true);
}

TEST(RankLogTest, RotatesOnceAtTheBoundAndOffsetsHoldAcrossIt) {
  const std::string path = fresh_path("rank.log");
  constexpr int64_t kBound = 8192;
  auto w = open_writer(path, kBound);
  ASSERT_NE(w, nullptr);
  // A reader that keeps up: reads after every few records, never misses a line.
  std::vector<std::string> seen;
  int64_t offset = 0;
  auto catch_up = [&] {
    Result<RankLogChunk> c = read_rank_log(path, offset, kRankLogRecordBytesMax);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_EQ(c->skipped_bytes, 0) << "offset " << offset;
    for (const std::string& l : c->lines)
      seen.push_back(nlohmann::json::parse(l)["line"]);
    offset = c->next_offset;
  };
  constexpr int kLines = 400;  // ~85 bytes a record: about 4 rotations of 8 KiB
  for (int i = 0; i < kLines; ++i) {
    ASSERT_TRUE(w->append(RankStream::kStdout, "line " + std::to_string(i), false).ok());
    EXPECT_LE(file_size(path), kBound) << "after line " << i;
    if (i % 20 == 19) catch_up();
  }
  catch_up();
  EXPECT_GE(w->rotations(), 3);
  ASSERT_EQ(seen.size(), static_cast<size_t>(kLines));
  for (int i = 0; i < kLines; ++i)
    EXPECT_EQ(seen[static_cast<size_t>(i)], "line " + std::to_string(i));
  EXPECT_LE(file_size(path + ".1"), kBound);
  EXPECT_FALSE(std::filesystem::exists(path + ".2")) << "one rotation is kept, no more";

  // A reader from the very start has lost what rotated out of .1, and is told how much; the
  // lines it does get run without a gap from the oldest kept to the newest.
  const RankLogChunk all = read_all(path, 0);
  EXPECT_GT(all.skipped_bytes, 0);
  ASSERT_FALSE(all.lines.empty());
  const int first =
      std::stoi(nlohmann::json::parse(all.lines[0])["line"].get<std::string>().substr(5));
  ASSERT_EQ(all.lines.size(), static_cast<size_t>(kLines - first));
  for (size_t i = 0; i < all.lines.size(); ++i)
    EXPECT_EQ(nlohmann::json::parse(all.lines[i])["line"], "line " + std::to_string(first + i));
  EXPECT_EQ(all.next_offset, w->end_offset());
  // Past the end: nothing, and the offset comes back clamped.
  const RankLogChunk past = read_all(path, w->end_offset() + 1000);
  EXPECT_TRUE(past.lines.empty());
  EXPECT_EQ(past.next_offset, w->end_offset());
}

TEST(RankLogTest, TheBudgetStopsAtALineAndTheNextReadGoesOn) {
  const std::string path = fresh_path("rank.log");
  auto w = open_writer(path, 64 << 20);
  ASSERT_NE(w, nullptr);
  const std::string big(10'000, 'y');
  for (int i = 0; i < 30; ++i)
    ASSERT_TRUE(w->append(RankStream::kStdout, big, false).ok());
  Result<RankLogChunk> first = read_rank_log(path, 0, kRankLogRecordBytesMax);
  ASSERT_TRUE(first.ok());
  EXPECT_GT(first->lines.size(), 0u);
  EXPECT_LT(first->lines.size(), 30u);
  size_t bytes = 0;
  for (const std::string& l : first->lines)
    bytes += l.size() + 1;
  EXPECT_LE(bytes, kRankLogRecordBytesMax);
  Result<RankLogChunk> rest = read_rank_log(path, first->next_offset, 16 << 20);
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(first->lines.size() + rest->lines.size(), 30u);
}

TEST(RankLogTest, AReopenedLogContinuesItsOffsets) {
  const std::string path = fresh_path("rank.log");
  int64_t end = 0;
  {
    auto w = open_writer(path, 1 << 20);
    ASSERT_NE(w, nullptr);
    ASSERT_TRUE(w->append(RankStream::kStdout, "before", false).ok());
    end = w->end_offset();
  }
  // A record cut short by a crash: the next writer ends it on its own line.
  { std::ofstream(path, std::ios::app) << "{\"ts\":\"torn"; }
  auto w = open_writer(path, 1 << 20);
  ASSERT_NE(w, nullptr);
  ASSERT_TRUE(w->append(RankStream::kStdout, "after", false).ok());
  const RankLogChunk c = read_all(path, end);
  ASSERT_EQ(c.lines.size(), 2u);
  EXPECT_EQ(c.lines[0], "{\"ts\":\"torn");
  EXPECT_EQ(nlohmann::json::parse(c.lines[1])["line"], "after");
}

TEST(RankLogTest, ATornRecordAtTheEndOfTheOldFileDoesNotStallAReader) {
  // Written by hand: an old file whose last record was cut short (a crash, a full disk) and the
  // current file that starts where the old one ends.
  const std::string path = fresh_path("rank.log");
  const std::string torn = "{\"ts\":\"to";
  const int64_t torn_size = static_cast<int64_t>(torn.size());
  const std::string old_text =
      "{\"kiln_rank_log\":1,\"rank\":0,\"start_offset\":0}\n{\"line\":\"a\"}\n" + torn;
  const int64_t old_size = static_cast<int64_t>(old_text.size());
  const std::string cur_text =
      "{\"kiln_rank_log\":1,\"rank\":0,\"start_offset\":" + std::to_string(old_size) +
      "}\n{\"line\":\"b\"}\n";
  std::ofstream(path + ".1") << old_text;
  std::ofstream(path) << cur_text;
  const int64_t end = old_size + static_cast<int64_t>(cur_text.size());

  const RankLogChunk all = read_all(path, 0);
  EXPECT_EQ(all.lines, (std::vector<std::string>{"{\"line\":\"a\"}", "{\"line\":\"b\"}"}));
  EXPECT_EQ(all.skipped_bytes, torn_size) << "the torn bytes, counted as lost";
  EXPECT_EQ(all.next_offset, end);
  // From the torn record itself the reader moves on too, instead of waiting for it forever.
  const RankLogChunk from_torn = read_all(path, old_size - torn_size);
  EXPECT_EQ(from_torn.lines, std::vector<std::string>{"{\"line\":\"b\"}"});
  EXPECT_EQ(from_torn.skipped_bytes, torn_size);
  EXPECT_EQ(from_torn.next_offset, end);
}

TEST(RankLogTest, ErrorsNameThePath) {
  const std::string path = fresh_path("rank.log");
  Result<RankLogChunk> missing = read_rank_log(path, 0, 1 << 20);
  ASSERT_TRUE(missing.status().is_not_found());
  EXPECT_NE(missing.status().message().find(path), std::string::npos);
  { std::ofstream(path) << "not a rank log\n"; }
  EXPECT_TRUE(read_rank_log(path, 0, 1 << 20).status().is_corruption());
  RankLogOptions o;
  o.path = path;
  Result<std::unique_ptr<RankLogWriter>> foreign = RankLogWriter::open(o);
  EXPECT_TRUE(foreign.status().is_corruption()) << "a file that is not ours is not appended to";
  o.path = testing::unique_temp_path("no-dir") + "/rank.log";
  Result<std::unique_ptr<RankLogWriter>> no_dir = RankLogWriter::open(o);
  ASSERT_FALSE(no_dir.ok());
  EXPECT_NE(no_dir.status().message().find(o.path), std::string::npos);
  EXPECT_TRUE(read_rank_log(path, -1, 1 << 20).status().is_invalid_argument());
  EXPECT_TRUE(read_rank_log(path, 0, 100).status().is_invalid_argument());
  o.path = fresh_path("small.log");
  o.bytes_max = 100;
  EXPECT_TRUE(RankLogWriter::open(o).status().is_invalid_argument());
}

}  // namespace
}  // namespace kiln::sched
