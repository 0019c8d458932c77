// See kiln/base/machine_cache.h.
#include <kiln/base/machine_cache.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <span>
#include <thread>
#include <utility>

#include <kiln/base/clock.h>
#include <kiln/base/file_system.h>

namespace kiln {
namespace {

// How often a process waiting for the lock tries again.
constexpr int64_t kLockPollMs = 5;
// /proc/cpuinfo's first block is well under this.
constexpr size_t kCpuinfoBytesMax = 64 << 10;

// PATH whole if it is a regular file of at most bytes_max; kNotFound when absent.
Result<std::string> read_small_file(const std::string& path, size_t bytes_max) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return Status::not_found(path + ": no such file");
    return Status::io_error(path + ": open: " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<size_t>(st.st_size) > bytes_max) {
    ::close(fd);
    return Status::invalid_argument(path + ": not a regular file of at most " +
                                    std::to_string(bytes_max) + " bytes");
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  text.resize(got);
  return text;
}

// An exclusive flock on a file, dropped when the object goes.
class FileLock {
 public:
  static Result<FileLock> acquire(const std::string& lock_path, int64_t timeout_ms) {
    const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return Status::io_error(lock_path + ": open: " + std::strerror(errno));
    const Deadline deadline = Deadline::after_ms(timeout_ms);
    while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) {
        const int e = errno;
        ::close(fd);
        return Status::io_error(lock_path + ": flock: " + std::strerror(e));
      }
      if (deadline.expired()) {
        ::close(fd);
        return Status::timeout(lock_path + ": another process held the lock for more than " +
                               std::to_string(timeout_ms) + " ms");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(kLockPollMs));
    }
    return FileLock(fd);
  }
  FileLock(FileLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FileLock& operator=(FileLock&&) = delete;
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // closing drops the flock
  }

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_;
};

std::string cpuinfo_field(const std::string& text, const std::string& key) {
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + 1)) {
    if (at != 0 && text[at - 1] != '\n') continue;
    const size_t colon = text.find(':', at);
    const size_t end = text.find('\n', at);
    if (colon == std::string::npos || colon > end) continue;
    std::string v = text.substr(colon + 1, end - colon - 1);
    const size_t b = v.find_first_not_of(" \t");
    return b == std::string::npos ? std::string() : v.substr(b);
  }
  return {};
}

}  // namespace

Result<CachedText> load_or_measure_cached(const MachineCacheOptions& options,
                                          FunctionRef<Status(const std::string&)> valid,
                                          FunctionRef<Result<std::string>()> measure) {
  const auto read_valid = [&]() -> Result<std::string> {
    KILN_ASSIGN_OR_RETURN(std::string text, read_small_file(options.path, options.bytes_max));
    KILN_RETURN_IF_ERROR(valid(text));
    return text;
  };
  if (!options.remeasure) {
    if (Result<std::string> text = read_valid(); text.ok()) return CachedText{*text, false};
  }
  KILN_RETURN_IF_ERROR(make_dirs_durably(posix_file_system(), parent_dir(options.path)));
  KILN_ASSIGN_OR_RETURN(FileLock lock,
                        FileLock::acquire(options.path + ".lock", options.lock_timeout_ms));
  if (!options.remeasure) {
    // Another process may have measured while this one waited for the lock.
    if (Result<std::string> text = read_valid(); text.ok()) return CachedText{*text, false};
  }
  KILN_ASSIGN_OR_RETURN(std::string text, measure());
  const ByteSpan span{text.data(), text.size()};
  Result<DurableWriteResult> written =
      write_file_durably(posix_file_system(), options.path, std::span<const ByteSpan>(&span, 1));
  if (!written.ok()) return written.status().with_context("caching a machine measurement");
  return CachedText{std::move(text), true};
}

std::string kiln_cache_dir(const std::string& xdg_cache_home, const std::string& home) {
  if (!xdg_cache_home.empty()) return xdg_cache_home + "/kiln";
  if (!home.empty()) return home + "/.cache/kiln";
  return "/tmp/kiln-" + std::to_string(::getuid());
}

std::string this_boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id.size() <= 64 ? id : std::string();
}

std::string this_cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string text;
  std::string line;
  // The first CPU's block is enough: it ends at the first empty line.
  while (std::getline(in, line) && !line.empty() && text.size() < kCpuinfoBytesMax)
    text += line + "\n";
  return cpuinfo_field(text, "vendor_id") + " family " + cpuinfo_field(text, "cpu family") +
         " model " + cpuinfo_field(text, "model") + ": " + cpuinfo_field(text, "model name");
}

}  // namespace kiln
