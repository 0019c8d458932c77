// JSON-lines logging over spdlog. See include/kiln/base/log.h.
//
// spdlog supplies the sinks (stderr, append-only file, ostream), their locking and flushing; the
// line itself is built here with nlohmann::json so that every value is escaped correctly. The
// spdlog logger is private to its LogSink and never registered in spdlog's global registry.
#include <kiln/base/clock.h>
#include <kiln/base/log.h>

#include <spdlog/logger.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <nlohmann/json.hpp>

#include <array>
#include <filesystem>
#include <mutex>
#include <ostream>
#include <system_error>

namespace kiln {

struct LogSink::Impl {
  std::shared_ptr<spdlog::logger> logger;
  std::string where;  // "stderr" or the file's path, for write errors
  std::mutex mu;
  std::string write_error;  // GUARDED_BY(mu): the first failed write, empty while none failed
};

namespace {

constexpr std::array<std::string_view, 5> kLevelNames = {"debug", "info", "warn", "error", "off"};

// REQUIRES: `impl` outlives the logger (it owns it).
std::shared_ptr<spdlog::logger> make_logger(spdlog::sink_ptr sink, LogSink::Impl* impl) {
  auto logger = std::make_shared<spdlog::logger>("kiln", std::move(sink));
  logger->set_pattern("%v");                // the line is complete JSON already
  logger->set_level(spdlog::level::trace);  // LogSink filters before formatting
  logger->flush_on(spdlog::level::trace);   // flush every line: a SIGKILL loses nothing logged
  // spdlog catches its own write and flush errors and hands them here (its default prints them
  // to stderr and carries on); keep the first for write_status().
  logger->set_error_handler([impl](const std::string& message) {
    std::lock_guard lock(impl->mu);
    if (impl->write_error.empty()) impl->write_error = message;
  });
  return logger;
}

void put_value(nlohmann::ordered_json& obj, std::string_view key, const LogValue& value) {
  std::visit(
      [&](const auto& v) {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, std::string_view>) {
          obj[std::string(key)] = std::string(v);
        } else {
          obj[std::string(key)] = v;
        }
      },
      value.get());
}

}  // namespace

std::string_view log_level_name(LogLevel level) {
  return kLevelNames[static_cast<int>(level)];
}

Result<LogLevel> parse_log_level(std::string_view name) {
  for (size_t i = 0; i < kLevelNames.size(); ++i) {
    if (kLevelNames[i] == name) return static_cast<LogLevel>(i);
  }
  return Status::invalid_argument("unknown log level '" + std::string(name) +
                                  "' (expected debug, info, warn, error or off)");
}

LogSink::LogSink(std::unique_ptr<Impl> impl, LogLevel level)
    : impl_(std::move(impl)), level_(static_cast<int>(level)) {}

LogSink::~LogSink() = default;

Result<std::shared_ptr<LogSink>> LogSink::open(const LogOptions& options) {
  auto impl = std::make_unique<Impl>();
  if (options.file_path.empty()) {
    impl->where = "stderr";
    impl->logger = make_logger(std::make_shared<spdlog::sinks::stderr_sink_mt>(), impl.get());
  } else {
    impl->where = "log file " + options.file_path;
    // spdlog creates missing directories; a typo in the path should be an error instead.
    const std::filesystem::path parent = std::filesystem::path(options.file_path).parent_path();
    std::error_code ec;
    if (!parent.empty() && !std::filesystem::is_directory(parent, ec)) {
      return Status::io_error("log file " + options.file_path + ": directory " + parent.string() +
                              " does not exist (it is not created)");
    }
    try {
      impl->logger = make_logger(std::make_shared<spdlog::sinks::basic_file_sink_mt>(
                                     options.file_path, /*truncate=*/false),
                                 impl.get());
    } catch (const spdlog::spdlog_ex& e) {
      return Status::io_error("log file " + options.file_path + ": " + e.what());
    }
  }
  return std::shared_ptr<LogSink>(new LogSink(std::move(impl), options.level));
}

std::shared_ptr<LogSink> LogSink::to_stream(std::ostream& out, LogLevel level) {
  auto impl = std::make_unique<Impl>();
  impl->where = "stream";
  impl->logger =
      make_logger(std::make_shared<spdlog::sinks::ostream_sink_mt>(out, true), impl.get());
  return std::shared_ptr<LogSink>(new LogSink(std::move(impl), level));
}

LogLevel LogSink::level() const {
  return static_cast<LogLevel>(level_.load());
}
void LogSink::set_level(LogLevel level) {
  level_.store(static_cast<int>(level));
}

void LogSink::write_line(std::string_view line) {
  // spdlog reports its I/O errors to the error handler; anything else it throws is kept the same
  // way: a log line is never worth crashing for.
  try {
    impl_->logger->log(spdlog::level::info, "{}", line);
  } catch (const std::exception& e) {
    std::lock_guard lock(impl_->mu);
    if (impl_->write_error.empty()) impl_->write_error = e.what();
  }
}

Status LogSink::write_status() const {
  std::lock_guard lock(impl_->mu);
  if (impl_->write_error.empty()) return Status();
  return Status::io_error(impl_->where + ": log lines were lost: " + impl_->write_error);
}

std::string format_log_line(int64_t wall_ns, LogLevel level, std::string_view component,
                            std::string_view msg, std::initializer_list<LogField> fields) {
  nlohmann::ordered_json obj;
  obj["ts"] = format_wall_time_utc(wall_ns);
  obj["level"] = std::string(log_level_name(level));
  obj["component"] = std::string(component);
  obj["msg"] = std::string(msg);
  for (const LogField& field : fields) {
    // The fixed fields come first and are never overwritten by a caller's key of the same name.
    if (field.key == "ts" || field.key == "level" || field.key == "component" ||
        field.key == "msg") {
      continue;
    }
    put_value(obj, field.key, field.value);
  }
  // Replace invalid UTF-8 rather than throw: a log line must always be written.
  return obj.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Logger Logger::child(std::string_view sub) const {
  return Logger(sink_, component_.empty() ? std::string(sub) : component_ + "." + std::string(sub));
}

void Logger::log(LogLevel level, std::string_view msg,
                 std::initializer_list<LogField> fields) const {
  if (!enabled(level)) return;
  sink_->write_line(format_log_line(wall_now_ns(), level, component_, msg, fields));
}

LogRateLimiter::LogRateLimiter(int64_t interval_ms, int64_t burst, const Clock& clock)
    : interval_ns_(interval_ms * 1'000'000), burst_(burst < 1 ? 1 : burst), clock_(&clock) {}

bool LogRateLimiter::allow(int64_t* suppressed_out) {
  const int64_t now = clock_->monotonic_ns();
  std::lock_guard lock(mu_);
  if (allowed_in_window_ == 0 || now - window_start_ns_ >= interval_ns_) {
    window_start_ns_ = now;
    allowed_in_window_ = 0;
  }
  if (allowed_in_window_ >= burst_) {
    ++suppressed_;
    return false;
  }
  ++allowed_in_window_;
  if (suppressed_out != nullptr) *suppressed_out = suppressed_;
  suppressed_ = 0;
  return true;
}

}  // namespace kiln
