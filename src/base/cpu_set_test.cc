#include <kiln/base/cpu_set.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace kiln {
namespace {

TEST(CpuSetTest, ParsesTheKernelsListFormatAndWritesItBackCanonically) {
  Result<CpuSet> set = CpuSet::parse(" 8, 0-3,10-11 ,2\n");
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  EXPECT_EQ(set->cpus(), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(set->to_string(), "0-3,8,10-11");
  EXPECT_TRUE(set->contains(8));
  EXPECT_FALSE(set->contains(9));
  Result<CpuSet> empty = CpuSet::parse("");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  EXPECT_EQ(CpuSet({5, 3, 4, 3}).to_string(), "3-5");
  EXPECT_EQ(CpuSet({0, 2, 3}).intersect(CpuSet({2, 3, 4})).to_string(), "2-3");
}

TEST(CpuSetTest, RangesOnAndAcrossWordEdgesAreTheCpusTheyName) {
  // The parser keeps a bitmap of 64-bit words; a reference that inserts each CPU one by one
  // decides what every list means. Edges of words and of the whole range, then random lists.
  const auto reference = [](const std::vector<std::pair<int, int>>& ranges) {
    std::set<int> cpus;
    for (const auto& [first, last] : ranges)
      for (int cpu = first; cpu <= last; ++cpu)
        cpus.insert(cpu);
    return std::vector<int>(cpus.begin(), cpus.end());
  };
  const auto text_of = [](const std::vector<std::pair<int, int>>& ranges) {
    std::string text;
    for (const auto& [first, last] : ranges) {
      if (!text.empty()) text += ",";
      text += first == last ? std::to_string(first)
                            : std::to_string(first) + "-" + std::to_string(last);
    }
    return text;
  };
  std::vector<std::vector<std::pair<int, int>>> lists = {
      {{0, 63}},
      {{63, 64}},
      {{0, 0}, {63, 63}, {64, 64}},
      {{1, 62}},
      {{60, 130}},
      {{127, 128}},
      {{0, CpuSet::kCpuMax - 1}},
      {{8191, 8191}},
      {{8128, 8191}},
      {{5, 5}, {5, 5}, {4, 6}},
  };
  std::mt19937 rng(3);
  for (int i = 0; i < 200; ++i) {
    std::vector<std::pair<int, int>> ranges;
    const int n = std::uniform_int_distribution<int>(1, 6)(rng);
    for (int r = 0; r < n; ++r) {
      const int first = std::uniform_int_distribution<int>(0, CpuSet::kCpuMax - 1)(rng);
      const int span = std::uniform_int_distribution<int>(0, i % 2 == 0 ? 3 : 300)(rng);
      ranges.emplace_back(first, std::min(first + span, CpuSet::kCpuMax - 1));
    }
    lists.push_back(ranges);
  }
  for (const auto& ranges : lists) {
    const std::string text = text_of(ranges);
    Result<CpuSet> set = CpuSet::parse(text);
    ASSERT_TRUE(set.ok()) << text << ": " << set.status().to_string();
    EXPECT_EQ(set->cpus(), reference(ranges)) << text;
  }
}

TEST(CpuSetTest, BadListsAreErrorsQuotingTheTextAndSayingWhatIsWrong) {
  const std::pair<const char*, const char*> cases[] = {
      {"3-1", "cpu list '3-1': range end 1 is below its start 3"},
      {"a", "'a' is not a CPU number"},
      {"1,,2", "empty item"},
      {"-1", "'' is not a CPU number"},
      {"8192", "CPU 8192 is out of range [0, 8192)"},
      {"99999999999999999999", "is out of range"},
      {"1-2-3", "'2-3' is not a CPU number"},
  };
  for (const auto& [text, message] : cases) {
    Result<CpuSet> set = CpuSet::parse(text);
    ASSERT_FALSE(set.ok()) << text;
    EXPECT_TRUE(set.status().is_invalid_argument()) << text;
    EXPECT_NE(set.status().message().find(message), std::string::npos)
        << text << ": " << set.status().message();
  }
  EXPECT_FALSE(CpuSet::parse(std::string(CpuSet::kListCharsMax + 1, '1')).ok());
}

TEST(CpuSetTest, AListOfManyFullRangesStaysBounded) {
  std::string text;
  while (text.size() + 7 < CpuSet::kListCharsMax)
    text += "0-8191,";
  text += "5";
  Result<CpuSet> set = CpuSet::parse(text);
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  EXPECT_EQ(set->size(), CpuSet::kCpuMax);
  EXPECT_EQ(set->to_string(), "0-8191");
}

TEST(CpuSetTest, BindingAThreadIsWhatItThenReportsAndWhatItsNewThreadsInherit) {
  Result<CpuSet> all = CpuSet::of_this_thread();
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  ASSERT_FALSE(all->empty());
  const CpuSet last({all->cpus().back()});
  std::thread t([&] {
    ASSERT_TRUE(bind_this_thread(last).ok());
    Result<CpuSet> now = CpuSet::of_this_thread();
    ASSERT_TRUE(now.ok());
    EXPECT_EQ(*now, last);
    std::thread child([&] {
      Result<CpuSet> inherited = CpuSet::of_this_thread();
      ASSERT_TRUE(inherited.ok());
      EXPECT_EQ(*inherited, last);
    });
    child.join();
  });
  t.join();
  Result<CpuSet> mine = CpuSet::of_this_thread();
  ASSERT_TRUE(mine.ok());
  EXPECT_EQ(*mine, *all) << "another thread's binding changed this one's";
}

TEST(CpuSetTest, BindingToNoCpuOrOneThatDoesNotExistIsAnError) {
  EXPECT_TRUE(bind_this_thread(CpuSet()).is_invalid_argument());
  std::thread t([] {
    Status s = bind_this_thread(CpuSet({CpuSet::kCpuMax - 1}));
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("binding to CPUs 8191"), std::string::npos) << s.message();
  });
  t.join();
}

}  // namespace
}  // namespace kiln
