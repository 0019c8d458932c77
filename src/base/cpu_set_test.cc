#include <kiln/base/cpu_set.h>

#include <gtest/gtest.h>

#include <thread>

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
