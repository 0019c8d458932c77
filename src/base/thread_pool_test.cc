#include <kiln/base/thread_pool.h>

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <vector>

namespace kiln {
namespace {

TEST(ThreadPoolTest, RunsEveryTaskExactlyOnce) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t tasks : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> runs(tasks);
      pool.parallel_for(tasks, [&](int64_t t, int thread) {
        ASSERT_GE(thread, 0);
        ASSERT_LT(thread, threads);
        runs[t].fetch_add(1);
      });
      for (int64_t t = 0; t < tasks; ++t)
        ASSERT_EQ(runs[t].load(), 1) << threads << "/" << t;
    }
  }
}

TEST(ThreadPoolTest, ThreadIndexesAreUniqueAmongConcurrentTasks) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> inside(3);
  std::atomic<bool> clash{false};
  for (int loop = 0; loop < 200; ++loop) {
    pool.parallel_for(64, [&](int64_t, int thread) {
      if (inside[thread].fetch_add(1) != 0) clash = true;
      volatile int spin = 0;
      for (int i = 0; i < 100; ++i)
        spin = spin + i;
      inside[thread].fetch_sub(1);
    });
  }
  EXPECT_FALSE(clash.load());
}

TEST(ThreadPoolTest, ManyQuickLoopsInARowAndAfterSleeping) {
  ThreadPool pool(2);
  int64_t total = 0;
  for (int loop = 0; loop < 5000; ++loop) {
    std::atomic<int64_t> sum{0};
    pool.parallel_for(4, [&](int64_t t, int) { sum += t; });
    total += sum;
  }
  EXPECT_EQ(total, 5000 * 6);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // helpers fall asleep
  std::atomic<int64_t> sum{0};
  pool.parallel_for(100, [&](int64_t t, int) { sum += t; });
  EXPECT_EQ(sum.load(), 4950);
}

}  // namespace
}  // namespace kiln
