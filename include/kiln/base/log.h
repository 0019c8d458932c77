// Structured logging: one JSON object per line, through spdlog.
//
//   {"ts":"2026-11-29T19:39:50.123456Z","level":"warn","component":"comm",
//    "msg":"peer slow","peer_rank":3,"wait_ms":812}
//
// Every line has `ts` (UTC, microseconds), `level`, `component` and `msg`, then the caller's
// key/values in the order given. The level is checked before anything is formatted, so a
// disabled debug() costs a load and a compare.
//
// There is no global logger. main() opens one LogSink and hands `Logger`s (a sink plus a component
// name; cheap to copy) to whatever it builds. Lines are flushed as they are written, so a process
// killed with SIGKILL loses nothing it logged.
//
// Nothing is logged on a per-element or per-segment data path; a log call inside a loop goes
// through a LogRateLimiter.
#ifndef KILN_BASE_LOG_H_
#define KILN_BASE_LOG_H_

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

#include <kiln/base/clock.h>
#include <kiln/base/result.h>
#include <kiln/base/status.h>

namespace kiln {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

std::string_view log_level_name(LogLevel level);
// Accepts "debug", "info", "warn", "error", "off".
Result<LogLevel> parse_log_level(std::string_view name);

// A value in a log line. Strings are held as views: they must outlive the log call only.
class LogValue {
 public:
  template <typename T,
            std::enable_if_t<
                std::is_integral_v<T> && !std::is_same_v<T, bool> && std::is_signed_v<T>, int> = 0>
  LogValue(T v) : value_(static_cast<int64_t>(v)) {}  // NOLINT: implicit by design
  template <typename T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool> &&
                                             std::is_unsigned_v<T>,
                                         int> = 0>
  LogValue(T v) : value_(static_cast<uint64_t>(v)) {}              // NOLINT
  LogValue(bool v) : value_(v) {}                                  // NOLINT
  LogValue(double v) : value_(v) {}                                // NOLINT
  LogValue(float v) : value_(static_cast<double>(v)) {}            // NOLINT
  LogValue(std::string_view v) : value_(v) {}                      // NOLINT
  LogValue(const std::string& v) : value_(std::string_view(v)) {}  // NOLINT
  LogValue(const char* v) : value_(std::string_view(v)) {}         // NOLINT

  using Variant = std::variant<int64_t, uint64_t, double, bool, std::string_view>;
  const Variant& get() const { return value_; }

 private:
  Variant value_;
};

struct LogField {
  std::string_view key;
  LogValue value;
};

struct LogOptions {
  // Lines below this level are dropped before formatting.
  LogLevel level = LogLevel::kInfo;
  // Append to this file; empty means stderr.
  std::string file_path;
};

// Where log lines go. Thread-safe; shared by every Logger made from it.
class LogSink {
 public:
  // Opens the sink the options describe. Fails (kIoError, naming the path) if the file cannot be
  // opened for appending, its directory included: a missing directory is not created.
  static Result<std::shared_ptr<LogSink>> open(const LogOptions& options);
  // A sink that writes to `out`, which must outlive the sink (tests).
  static std::shared_ptr<LogSink> to_stream(std::ostream& out, LogLevel level);

  ~LogSink();
  LogSink(const LogSink&) = delete;
  LogSink& operator=(const LogSink&) = delete;

  LogLevel level() const;
  void set_level(LogLevel level);
  bool enabled(LogLevel level) const { return static_cast<int>(level) >= level_.load(); }

  // Writes one already-formatted line (no trailing newline). A failed write (a full disk,
  // /dev/full) never throws or stops the caller; write_status() reports it.
  void write_line(std::string_view line);

  // OK, or kIoError naming the file and the first write that failed. Thread-safe. A program
  // checks it before it exits: a run whose log was lost did not succeed.
  Status write_status() const;

  struct Impl;  // defined in log.cc only

 private:
  explicit LogSink(std::unique_ptr<Impl> impl, LogLevel level);
  std::unique_ptr<Impl> impl_;
  std::atomic<int> level_;
};

class Logger {
 public:
  // A logger that drops everything: for components built without a sink (tests, tools).
  Logger() = default;
  Logger(std::shared_ptr<LogSink> sink, std::string component)
      : sink_(std::move(sink)), component_(std::move(component)) {}

  // A logger for a sub-component on the same sink ("comm" -> "comm.tcp").
  Logger child(std::string_view sub) const;

  bool enabled(LogLevel level) const { return sink_ && sink_->enabled(level); }
  void log(LogLevel level, std::string_view msg, std::initializer_list<LogField> fields) const;

  void debug(std::string_view msg, std::initializer_list<LogField> fields = {}) const {
    if (enabled(LogLevel::kDebug)) log(LogLevel::kDebug, msg, fields);
  }
  void info(std::string_view msg, std::initializer_list<LogField> fields = {}) const {
    if (enabled(LogLevel::kInfo)) log(LogLevel::kInfo, msg, fields);
  }
  void warn(std::string_view msg, std::initializer_list<LogField> fields = {}) const {
    if (enabled(LogLevel::kWarn)) log(LogLevel::kWarn, msg, fields);
  }
  void error(std::string_view msg, std::initializer_list<LogField> fields = {}) const {
    if (enabled(LogLevel::kError)) log(LogLevel::kError, msg, fields);
  }

  const std::string& component() const { return component_; }

 private:
  std::shared_ptr<LogSink> sink_;
  std::string component_;
};

// Formats one log line (without newline). Exposed for tests and for tools that emit log-shaped
// JSON without a sink.
std::string format_log_line(int64_t wall_ns, LogLevel level, std::string_view component,
                            std::string_view msg, std::initializer_list<LogField> fields);

// Lets at most `burst` events through per `interval_ms`, and counts what it held back so the next
// line that passes can say how many were suppressed. Thread-safe.
//
//   if (int64_t dropped; limiter.allow(&dropped)) log.warn("slow peer", {{"suppressed", dropped}});
class LogRateLimiter {
 public:
  LogRateLimiter(int64_t interval_ms, int64_t burst, const Clock& clock = system_clock());
  // True if this event may be logged; then *suppressed_out (if not null) is the number of events
  // refused since the last one allowed.
  bool allow(int64_t* suppressed_out = nullptr);

 private:
  const int64_t interval_ns_;
  const int64_t burst_;
  const Clock* clock_;  // not owned; outlives this
  std::mutex mu_;
  int64_t window_start_ns_ = 0;    // GUARDED_BY(mu_)
  int64_t allowed_in_window_ = 0;  // GUARDED_BY(mu_)
  int64_t suppressed_ = 0;         // GUARDED_BY(mu_)
};

}  // namespace kiln

#endif  // KILN_BASE_LOG_H_
