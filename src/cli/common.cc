// Helpers shared by the subcommands. See command.h.
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <system_error>
#include <vector>

#include <kiln/base/config.h>

#include "cli/command.h"

namespace kiln::cli {

namespace {

// Every sink open_log_sink() handed out, kept until the process ends so that main() can ask
// whether a write failed after the command dropped its own reference. A process opens one or
// two.
std::vector<std::shared_ptr<LogSink>>& opened_sinks() {
  static std::vector<std::shared_ptr<LogSink>> sinks;
  return sinks;
}

}  // namespace

Status log_write_status() {
  for (const std::shared_ptr<LogSink>& sink : opened_sinks()) {
    Status s = sink->write_status();
    if (!s.ok()) return s;
  }
  return Status();
}

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
  opened_sinks().push_back(*sink);
  return *sink;
}

Result<size_t> parse_bytes(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits])))
    ++digits;
  if (digits == 0) return Status::invalid_argument("'" + text + "' is not a byte count");
  size_t value = 0;
  for (size_t i = 0; i < digits; ++i) {
    if (value > (SIZE_MAX - 9) / 10) return Status::invalid_argument("'" + text + "' overflows");
    value = value * 10 + static_cast<size_t>(text[i] - '0');
  }
  const std::string suffix = text.substr(digits);
  int shift = 0;
  if (suffix == "K" || suffix == "KiB")
    shift = 10;
  else if (suffix == "M" || suffix == "MiB")
    shift = 20;
  else if (suffix == "G" || suffix == "GiB")
    shift = 30;
  else if (!suffix.empty() && suffix != "B") {
    return Status::invalid_argument("'" + text + "': unknown suffix (use K, M or G)");
  }
  if (shift > 0 && value > (SIZE_MAX >> shift)) {
    return Status::invalid_argument("'" + text + "' overflows");
  }
  return value << shift;
}

std::string self_executable() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return "kiln";
  path[n] = '\0';
  return path;
}

Status check_output_path(const std::string& flag, const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return Status::invalid_argument(flag + " " + path + ": is a directory, not a file name");
  }
  if (!std::filesystem::exists(dir, ec)) {
    return Status::invalid_argument(flag + " " + path + ": directory " + dir.string() +
                                    " does not exist");
  }
  if (!std::filesystem::is_directory(dir, ec)) {
    return Status::invalid_argument(flag + " " + path + ": " + dir.string() +
                                    " is not a directory");
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    return Status::invalid_argument(flag + " " + path + ": directory " + dir.string() +
                                    " is not writable: " + std::strerror(errno));
  }
  return Status();
}

int report_error(const std::string& command, const Status& status) {
  // One write: std::cerr is unbuffered, and the ranks of a job share one stderr; a message
  // written piece by piece interleaves with another rank's log line and breaks both.
  const std::string line = "kiln " + command + ": " + status.to_string() + "\n";
  std::cerr.write(line.data(), static_cast<std::streamsize>(line.size()));
  return status.is_invalid_argument() || status.is_not_found() ? kExitBadInput : kExitFailure;
}

Result<std::string> read_stdin(size_t limit) {
  constexpr size_t kReadBlockBytes = size_t{1} << 20;
  std::string data;
  for (;;) {
    const size_t old_size = data.size();
    data.resize(old_size + kReadBlockBytes);
    const size_t got = std::fread(data.data() + old_size, 1, kReadBlockBytes, stdin);
    data.resize(old_size + got);
    if (data.size() > limit) {
      return Status::invalid_argument("stdin: more than " + std::to_string(limit) +
                                      " bytes of input");
    }
    if (got < kReadBlockBytes) break;
  }
  if (std::ferror(stdin)) return Status::io_error(std::string("stdin: ") + std::strerror(errno));
  return data;
}

Result<JobFile> read_job_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::not_found(path + ": cannot open the job spec");
  JobFile job;
  job.text.resize(kConfigBytesMax + 1);
  in.read(job.text.data(), static_cast<std::streamsize>(job.text.size()));
  if (in.bad()) return Status::io_error(path + ": read failed");
  job.text.resize(static_cast<size_t>(in.gcount()));
  if (job.text.size() > kConfigBytesMax) {
    return Status::invalid_argument(path + ": larger than " + std::to_string(kConfigBytesMax) +
                                    " bytes");
  }
  char cwd[4096];
  if (getcwd(cwd, sizeof(cwd)) == nullptr) {
    return Status::io_error("cannot read the working directory");
  }
  job.workdir = cwd;
  return job;
}

}  // namespace kiln::cli
