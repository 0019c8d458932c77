// Tests of reading OOM kills from kernel log records (kiln/sched/oom_kill.h).
#include <kiln/sched/oom_kill.h>

#include <gtest/gtest.h>

namespace kiln::sched {
namespace {

// As this machine's kernel wrote them (a memory cgroup of 100 MiB, a 400 MiB allocation).
constexpr const char* kCgroupKill =
    "3,3734,29230320672,-;Memory cgroup out of memory: Killed process 15000 (python3) "
    "total-vm:426168kB, anon-rss:102016kB, file-rss:6656kB, shmem-rss:0kB, UID:0 pgtables:268kB "
    "oom_score_adj:0";
constexpr const char* kGlobalKill =
    "3,99,5000000,-;Out of memory: Killed process 4242 (kiln) total-vm:1kB, anon-rss:1kB";

TEST(OomKill, AKillOfThePidAfterItsStartIsNamed) {
  EXPECT_TRUE(kmsg_names_oom_kill(kCgroupKill, 15000, 29'000'000'000));
  EXPECT_TRUE(kmsg_names_oom_kill(kGlobalKill, 4242, 0));
}

TEST(OomKill, AnotherPidAnEarlierKillOrAnotherMessageIsNot) {
  EXPECT_FALSE(kmsg_names_oom_kill(kCgroupKill, 1500, 0)) << "a pid that is a prefix";
  EXPECT_FALSE(kmsg_names_oom_kill(kCgroupKill, 150001, 0));
  EXPECT_FALSE(kmsg_names_oom_kill(kCgroupKill, 15000, 29'300'000'000)) << "before it started";
  EXPECT_FALSE(kmsg_names_oom_kill("6,1,2,-;Killed process 15000 (x) by hand", 15000, 0));
  EXPECT_FALSE(kmsg_names_oom_kill("no header at all", 15000, 0));
  EXPECT_FALSE(kmsg_names_oom_kill("3,1;Out of memory: Killed process 15000 (x)", 15000, 0));
}

TEST(OomKill, AnUnreadableOrSilentLogSaysNo) {
  // pid 0 is never killed by the OOM killer; whether /dev/kmsg opens or not, the answer is no.
  EXPECT_FALSE(oom_killed(0, 0));
}

}  // namespace
}  // namespace kiln::sched
