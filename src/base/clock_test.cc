#include <kiln/base/clock.h>

#include <gtest/gtest.h>

namespace kiln {
namespace {

TEST(ClockTest, FormatsWallTimeAsRfc3339Utc) {
  // 1700000000 s after the epoch is 2023-11-14 22:13:20 UTC.
  EXPECT_EQ(format_wall_time_utc(1'700'000'000'123'456'789LL), "2023-11-14T22:13:20.123456Z");
  EXPECT_EQ(format_wall_time_utc(0), "1970-01-01T00:00:00.000000Z");
}

TEST(ClockTest, MonotonicNeverGoesBack) {
  int64_t last = monotonic_now_ns();
  for (int i = 0; i < 1000; ++i) {
    const int64_t now = monotonic_now_ns();
    ASSERT_GE(now, last);
    last = now;
  }
}

TEST(DeadlineTest, ExpiresExactlyWhenTheTimeoutHasPassed) {
  FakeClock clock(1'000'000'000);
  const Deadline d = Deadline::after_ms(100, clock);
  EXPECT_FALSE(d.expired(clock));
  EXPECT_EQ(d.remaining_ms(clock), 100);
  clock.advance_ns(99'500'000);
  EXPECT_FALSE(d.expired(clock));
  EXPECT_EQ(d.remaining_ms(clock), 1);  // rounded up: never reports 0 before expiry
  clock.advance_ns(500'000);
  EXPECT_TRUE(d.expired(clock));
  EXPECT_EQ(d.remaining_ms(clock), 0);
}

TEST(DeadlineTest, WallClockJumpsDoNotMoveDeadlines) {
  FakeClock clock;
  const Deadline d = Deadline::after_ms(10, clock);
  clock.jump_wall_ns(3'600'000'000'000LL);
  EXPECT_FALSE(d.expired(clock));
}

TEST(DeadlineTest, InfiniteAndNegativeTimeouts) {
  FakeClock clock;
  EXPECT_FALSE(Deadline::never().expired(clock));
  EXPECT_TRUE(Deadline::never().infinite());
  EXPECT_TRUE(Deadline::after_ms(-5, clock).expired(clock));
  // Overflowing timeouts saturate to infinite instead of wrapping into the past.
  EXPECT_FALSE(Deadline::after_ms(INT64_MAX, clock).expired(clock));
}

TEST(StopwatchTest, MeasuresTheFakeClock) {
  FakeClock clock;
  Stopwatch watch(clock);
  clock.advance_ns(2'500'000);
  EXPECT_EQ(watch.elapsed_ns(), 2'500'000);
  EXPECT_DOUBLE_EQ(watch.elapsed_ms(), 2.5);
  watch.reset();
  EXPECT_EQ(watch.elapsed_ns(), 0);
}

}  // namespace
}  // namespace kiln
