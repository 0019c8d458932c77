// Real clocks and deadline arithmetic. See include/kiln/base/clock.h.
#include <kiln/base/clock.h>

#include <time.h>

#include <cstdio>

namespace kiln {
namespace {

int64_t read_clock_ns(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

class RealClock final : public Clock {
 public:
  int64_t monotonic_ns() const override { return read_clock_ns(CLOCK_MONOTONIC); }
  int64_t wall_ns() const override { return read_clock_ns(CLOCK_REALTIME); }
};

}  // namespace

int64_t monotonic_now_ns() {
  return read_clock_ns(CLOCK_MONOTONIC);
}
int64_t wall_now_ns() {
  return read_clock_ns(CLOCK_REALTIME);
}

std::string format_wall_time_utc(int64_t wall_ns) {
  const time_t seconds = static_cast<time_t>(wall_ns / 1'000'000'000);
  const int64_t micros = (wall_ns % 1'000'000'000) / 1000;
  tm utc{};
  gmtime_r(&seconds, &utc);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<long long>(micros));
  return buf;
}

Clock& system_clock() {
  // Stateless and never destroyed, so it is safe to use from static destructors and threads.
  static RealClock* clock = new RealClock();
  return *clock;
}

Deadline Deadline::after_ms(int64_t timeout_ms, const Clock& clock) {
  return after_ms_from(clock.monotonic_ns(), timeout_ms);
}

Deadline Deadline::after_ms_from(int64_t now, int64_t timeout_ms) {
  if (timeout_ms < 0) timeout_ms = 0;
  // Saturate instead of overflowing for absurdly long timeouts.
  if (timeout_ms > (kInfiniteNs - now) / 1'000'000) return never();
  return Deadline(now + timeout_ms * 1'000'000);
}

Deadline Deadline::never() {
  return Deadline(kInfiniteNs);
}

bool Deadline::expired(const Clock& clock) const {
  return !infinite() && clock.monotonic_ns() >= at_ns_;
}

int64_t Deadline::remaining_ms(const Clock& clock) const {
  if (infinite()) return INT64_MAX;
  const int64_t left_ns = at_ns_ - clock.monotonic_ns();
  if (left_ns <= 0) return 0;
  return (left_ns + 999'999) / 1'000'000;
}

std::chrono::steady_clock::time_point Deadline::to_steady() const {
  // steady_clock is CLOCK_MONOTONIC on Linux/libstdc++, so the epochs agree.
  if (infinite()) return std::chrono::steady_clock::time_point::max();
  return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(at_ns_));
}

}  // namespace kiln
