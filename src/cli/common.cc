// Helpers shared by the subcommands. See command.h.
#include <iostream>

#include "cli/command.h"

namespace kiln::cli {

std::shared_ptr<LogSink> open_log_sink(const GlobalOptions& options) {
  Result<LogLevel> level = parse_log_level(options.log_level);
  if (!level.ok()) {
    std::cerr << "kiln: --log-level: " << level.status().message() << "\n";
    return nullptr;
  }
  LogOptions log_options;
  log_options.level = *level;
  log_options.file_path = options.log_file;
  Result<std::shared_ptr<LogSink>> sink = LogSink::open(log_options);
  if (!sink.ok()) {
    std::cerr << "kiln: --log-file: " << sink.status().message() << "\n";
    return nullptr;
  }
  return *sink;
}

int report_error(const std::string& command, const Status& status) {
  std::cerr << "kiln " << command << ": " << status.to_string() << "\n";
  return status.is_invalid_argument() || status.is_not_found() ? kExitBadInput : kExitFailure;
}

}  // namespace kiln::cli
