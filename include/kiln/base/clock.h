// Clocks and deadlines.
//
// All durations inside Kiln are measured on the monotonic clock (never wall time, which jumps).
// Wall time is only for timestamps that humans and other machines read (log lines, manifests).
//
// Code that must be testable under drift or jumps (heartbeats, leases) takes a `Clock&` so tests
// can pass a FakeClock; code that only times itself uses the free functions.
#ifndef KILN_BASE_CLOCK_H_
#define KILN_BASE_CLOCK_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace kiln {

// Nanoseconds on CLOCK_MONOTONIC; meaningful only as differences.
int64_t monotonic_now_ns();

// Nanoseconds since the Unix epoch on CLOCK_REALTIME.
int64_t wall_now_ns();

// "2026-11-29T19:39:50.123456Z": wall time in UTC with microseconds (RFC 3339).
std::string format_wall_time_utc(int64_t wall_ns);

// An injectable source of time. Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t monotonic_ns() const = 0;
  virtual int64_t wall_ns() const = 0;
};

// The process-wide real clock. Never destroyed.
Clock& system_clock();

// A clock that moves only when told to. Thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_ns = 0) : monotonic_ns_(start_ns), wall_ns_(start_ns) {}
  int64_t monotonic_ns() const override { return monotonic_ns_.load(); }
  int64_t wall_ns() const override { return wall_ns_.load(); }
  void advance_ns(int64_t ns) {
    monotonic_ns_ += ns;
    wall_ns_ += ns;
  }
  // Wall time may jump either way; monotonic time is untouched.
  void jump_wall_ns(int64_t ns) { wall_ns_ += ns; }

 private:
  std::atomic<int64_t> monotonic_ns_;
  std::atomic<int64_t> wall_ns_;
};

// A point in monotonic time after which an operation gives up.
//
// Invariant: a Deadline built from a timeout of N ms expires no earlier than N ms after it was
// built. `never()` never expires (for callers that truly wait forever, which is rare: every
// blocking call in Kiln takes a timeout).
class Deadline {
 public:
  static Deadline after_ms(int64_t timeout_ms, const Clock& clock = system_clock());
  // `timeout_ms` after `monotonic_now_ns`, for callers that already read the clock.
  static Deadline after_ms_from(int64_t monotonic_now_ns, int64_t timeout_ms);
  static Deadline never();

  bool expired(const Clock& clock = system_clock()) const;
  // Milliseconds left, rounded up, clamped at 0; INT64_MAX for never().
  int64_t remaining_ms(const Clock& clock = system_clock()) const;
  // The deadline as a std::chrono time point on steady_clock, for condition variables.
  // REQUIRES: the deadline was made from system_clock().
  std::chrono::steady_clock::time_point to_steady() const;
  bool infinite() const { return at_ns_ == kInfiniteNs; }

 private:
  static constexpr int64_t kInfiniteNs = INT64_MAX;
  explicit Deadline(int64_t at_ns) : at_ns_(at_ns) {}
  int64_t at_ns_;
};

// Measures elapsed monotonic time from construction or the last reset().
class Stopwatch {
 public:
  explicit Stopwatch(const Clock& clock = system_clock()) : clock_(&clock) { reset(); }
  void reset() { start_ns_ = clock_->monotonic_ns(); }
  int64_t elapsed_ns() const { return clock_->monotonic_ns() - start_ns_; }
  double elapsed_seconds() const { return static_cast<double>(elapsed_ns()) * 1e-9; }
  double elapsed_ms() const { return static_cast<double>(elapsed_ns()) * 1e-6; }

 private:
  const Clock* clock_;  // not owned; outlives this
  int64_t start_ns_ = 0;
};

}  // namespace kiln

#endif  // KILN_BASE_CLOCK_H_
