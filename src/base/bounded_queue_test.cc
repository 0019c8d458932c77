#include <kiln/base/bounded_queue.h>

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace kiln {
namespace {

TEST(BoundedQueueTest, IsFifo) {
  BoundedQueue<int> q("q", 3);
  ASSERT_TRUE(q.push(1, 0).ok());
  ASSERT_TRUE(q.push(2, 0).ok());
  ASSERT_TRUE(q.try_push(3));
  EXPECT_EQ(q.size(), 3u);
  EXPECT_EQ(*q.pop(0), 1);
  EXPECT_EQ(*q.pop(0), 2);
  EXPECT_EQ(*q.pop(0), 3);
}

TEST(BoundedQueueTest, FullQueueTimesOutAndNeverGrows) {
  BoundedQueue<int> q("ckpt-writes", 2);
  ASSERT_TRUE(q.push(1, 0).ok());
  ASSERT_TRUE(q.push(2, 0).ok());
  EXPECT_FALSE(q.try_push(3));
  Status s = q.push(3, 20);
  EXPECT_TRUE(s.is_timeout());
  EXPECT_NE(s.message().find("queue 'ckpt-writes' is full (capacity 2)"), std::string::npos);
  EXPECT_EQ(q.size(), 2u);
}

TEST(BoundedQueueTest, EmptyQueueTimesOut) {
  BoundedQueue<int> q("q", 1);
  Result<int> r = q.pop(10);
  EXPECT_TRUE(r.status().is_timeout());
}

TEST(BoundedQueueTest, CloseFailsPushesAndDrainsPops) {
  BoundedQueue<int> q("q", 4);
  ASSERT_TRUE(q.push(7, 0).ok());
  q.close();
  EXPECT_TRUE(q.push(8, 1000).is_aborted());
  EXPECT_FALSE(q.try_push(8));
  EXPECT_EQ(*q.pop(1000), 7);                      // what was queued is still delivered
  EXPECT_TRUE(q.pop(1000).status().is_aborted());  // then it reports closed, without waiting
}

TEST(BoundedQueueTest, CloseWakesABlockedPusherAndPopper) {
  BoundedQueue<int> full("full", 1);
  ASSERT_TRUE(full.push(1, 0).ok());
  BoundedQueue<int> empty("empty", 1);
  Status push_status;
  Status pop_status;
  std::thread pusher([&] { push_status = full.push(2, 60'000); });
  std::thread popper([&] { pop_status = empty.pop(60'000).status(); });
  full.close();
  empty.close();
  pusher.join();
  popper.join();
  EXPECT_TRUE(push_status.is_aborted());
  EXPECT_TRUE(pop_status.is_aborted());
}

TEST(BoundedQueueTest, ManyProducersAndConsumersDeliverEachItemOnce) {
  constexpr int kProducers = 4;
  constexpr int kConsumers = 3;
  constexpr int kItemsPerProducer = 5000;
  BoundedQueue<int> q("mpmc", 8);
  std::vector<std::atomic<int>> seen(kProducers * kItemsPerProducer);
  std::vector<std::thread> threads;
  for (int p = 0; p < kProducers; ++p) {
    threads.emplace_back([&, p] {
      for (int i = 0; i < kItemsPerProducer; ++i) {
        ASSERT_TRUE(q.push(p * kItemsPerProducer + i, 60'000).ok());
      }
    });
  }
  std::atomic<int> consumed{0};
  for (int c = 0; c < kConsumers; ++c) {
    threads.emplace_back([&] {
      while (true) {
        Result<int> item = q.pop(60'000);
        if (!item.ok()) return;  // closed and drained
        seen[*item].fetch_add(1);
        consumed.fetch_add(1);
      }
    });
  }
  for (int p = 0; p < kProducers; ++p)
    threads[p].join();
  q.close();
  for (size_t t = kProducers; t < threads.size(); ++t)
    threads[t].join();
  EXPECT_EQ(consumed.load(), kProducers * kItemsPerProducer);
  for (const auto& count : seen)
    ASSERT_EQ(count.load(), 1);
}

TEST(BoundedQueueDeathTest, ZeroCapacityIsAProgrammerError) {
  EXPECT_DEATH(BoundedQueue<int>("zero", 0), "queue 'zero'");
}

}  // namespace
}  // namespace kiln
