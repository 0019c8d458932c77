// Durable writes, crash-safe directory creation, bounded reads and streaming hashes for kiln_ckpt.
// See file_io.h. Every file descriptor opened here is closed on every path out.
#include "ckpt/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <kiln/base/check.h>
#include <kiln/base/checksum.h>
#include <kiln/base/clock.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

namespace kiln::ckpt::internal {
namespace {

// Reads while hashing a file come in pieces of this size: large enough to keep the disk's queue
// full, small enough to stay in the last-level cache between read() and the hash.
constexpr size_t kReadChunkBytes = size_t{4} << 20;

// Closes `fd` when it goes out of scope.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
  // Closes now and reports the error close() returned (for files just written).
  int close_now() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

// Writes all of [data, data + size), retrying EINTR and short writes.
Status write_all(int fd, const char* data, size_t size, const std::string& path) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return os_error(path, "write", errno);
    }
    // write() returning 0 for a non-zero count means the device took nothing; treat it as full.
    if (n == 0) return os_error(path, "write", ENOSPC);
    data += n;
    size -= static_cast<size_t>(n);
  }
  return Status();
}

// Keeps the write rate at or below `bytes_per_s` by sleeping after a chunk that got ahead of it.
// A sleep lasts at most one chunk's worth of time at the capped rate.
class Pacer {
 public:
  explicit Pacer(uint64_t bytes_per_s) : bytes_per_s_(bytes_per_s) {}
  void after(uint64_t bytes_written) const {
    if (bytes_per_s_ == 0) return;
    const double due_s = static_cast<double>(bytes_written) / static_cast<double>(bytes_per_s_);
    const double ahead_s = due_s - clock_.elapsed_seconds();
    if (ahead_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(ahead_s));
  }

 private:
  uint64_t bytes_per_s_;
  Stopwatch clock_;
};

// Writes `spans` to `fd` in chunks, hashing each chunk just before it goes out.
Status write_spans(int fd, const std::string& path, std::span<const ByteSpan> spans,
                   const WriteOptions& options, Xxh3Hasher* hasher) {
  const Pacer pacer(options.bytes_per_s_max);
  uint64_t offset = 0;
  for (const ByteSpan& span : spans) {
    const char* p = static_cast<const char*>(span.data);
    size_t left = span.size;
    while (left > 0) {
      const size_t n = std::min(left, options.chunk_bytes);
      hasher->update(p, n);
      KILN_RETURN_IF_ERROR(write_all(fd, p, n, path));
      if (options.early_writeback) {
        // Only starts writeback; its errors (if any) come back from the fsync below.
        (void)::sync_file_range(fd, static_cast<off64_t>(offset), static_cast<off64_t>(n),
                                SYNC_FILE_RANGE_WRITE);
      }
      p += n;
      left -= n;
      offset += n;
      pacer.after(offset);
    }
  }
  return Status();
}

// Reserves `bytes` for the file, so that a disk without room fails here, before anything is
// written. File systems that cannot preallocate just skip it; the write reports a full disk then.
Status preallocate(int fd, uint64_t bytes, const std::string& path) {
  if (bytes == 0) return Status();
  if (::fallocate(fd, 0, 0, static_cast<off_t>(bytes)) == 0) return Status();
  const int err = errno;
  if (err == ENOSPC || err == EDQUOT || err == EFBIG) return os_error(path, "fallocate", err);
  return Status();
}

}  // namespace

Status os_error(const std::string& path, const char* call, int err) {
  std::string message = path + ": " + call + ": " + std::strerror(err);
  if (err == ENOENT) return Status::not_found(std::move(message));
  return Status::io_error(std::move(message));
}

Status fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return os_error(dir, "open directory", errno);
  FdCloser closer(fd);
  if (::fsync(fd) != 0) return os_error(dir, "fsync directory", errno);
  return Status();
}

Status make_dirs_durable(const std::string& dir) {
  std::filesystem::path prefix;
  for (const std::filesystem::path& part : std::filesystem::path(dir)) {
    prefix /= part;
    if (part.empty() || part == prefix.root_path()) continue;
    const std::string path = prefix.string();
    if (::mkdir(path.c_str(), 0755) == 0) {
      std::filesystem::path parent = prefix.parent_path();
      KILN_RETURN_IF_ERROR(fsync_dir(parent.empty() ? std::string(".") : parent.string()));
      continue;
    }
    const int err = errno;
    if (err != EEXIST) return os_error(path, "mkdir", err);
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return os_error(path, "stat", errno);
    if (!S_ISDIR(st.st_mode)) return Status::io_error(path + ": exists and is not a directory");
  }
  return Status();
}

Result<FileRecord> write_file_durably(const std::string& dir, const std::string& name,
                                      std::span<const ByteSpan> spans,
                                      const WriteOptions& options) {
  KILN_CHECK_GE(options.chunk_bytes, kWriteChunkBytesMin);
  const std::string path = dir + "/" + name;
  const std::string tmp = path + ".tmp";
  uint64_t total = 0;
  for (const ByteSpan& span : spans)
    total += span.size;

  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return os_error(tmp, "open", errno);
  FdCloser closer(fd);
  Xxh3Hasher hasher;
  Status status = preallocate(fd, total, tmp);
  if (status.ok()) status = write_spans(fd, tmp, spans, options, &hasher);
  if (status.ok() && ::fsync(fd) != 0) status = os_error(tmp, "fsync", errno);
  if (closer.close_now() != 0 && status.ok()) status = os_error(tmp, "close", errno);
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    status = os_error(tmp, ("rename to " + name).c_str(), errno);
  }
  if (!status.ok()) {
    ::unlink(tmp.c_str());
    return status;
  }
  KILN_RETURN_IF_ERROR(fsync_dir(dir));
  return FileRecord{name, total, hasher.digest()};
}

namespace {

// Opens `path` for reading without blocking on a FIFO (O_NONBLOCK, which changes nothing for a
// regular file) and refuses whatever is not a regular file: a FIFO with no writer would block
// every read, and a device never ends. Returns the descriptor; the caller closes it.
Result<int> open_regular_for_read(const std::string& path, struct stat* st) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return os_error(path, "open", errno);
  if (::fstat(fd, st) != 0) {
    const int err = errno;
    ::close(fd);
    return os_error(path, "fstat", err);
  }
  if (!S_ISREG(st->st_mode)) {
    ::close(fd);
    return Status::corruption(path + ": not a regular file (a directory, FIFO or device)");
  }
  return fd;
}

}  // namespace

Result<std::string> read_file_bounded(const std::string& path, size_t max_bytes) {
  struct stat st {};
  KILN_ASSIGN_OR_RETURN(const int fd, open_regular_for_read(path, &st));
  FdCloser closer(fd);
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return Status::corruption(path + ": " + std::to_string(st.st_size) + " bytes, more than the " +
                              std::to_string(max_bytes) + " it may have");
  }
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return os_error(path, "read", errno);
    if (n == 0) break;  // shrank while being read: what was read is checked by the caller
    done += static_cast<size_t>(n);
  }
  bytes.resize(done);
  return bytes;
}

Result<FileRecord> hash_file(const std::string& path) {
  struct stat st {};
  KILN_ASSIGN_OR_RETURN(const int fd, open_regular_for_read(path, &st));
  FdCloser closer(fd);
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);  // a hint; failure changes nothing
  std::vector<char> buffer(kReadChunkBytes);
  Xxh3Hasher hasher;
  uint64_t total = 0;
  while (true) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return os_error(path, "read", errno);
    if (n == 0) break;
    hasher.update(buffer.data(), static_cast<size_t>(n));
    total += static_cast<uint64_t>(n);
  }
  return FileRecord{"", total, hasher.digest()};
}

Status remove_step_dir(const std::string& step_dir, const std::string& manifest_name) {
  const std::string manifest = step_dir + "/" + manifest_name;
  if (::unlink(manifest.c_str()) != 0 && errno != ENOENT) {
    return os_error(manifest, "unlink", errno);
  }
  KILN_RETURN_IF_ERROR(fsync_dir(step_dir));
  DIR* d = ::opendir(step_dir.c_str());
  if (d == nullptr) return os_error(step_dir, "opendir", errno);
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(d)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  for (const std::string& name : names) {
    const std::string path = step_dir + "/" + name;
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return os_error(path, "unlink", errno);
  }
  if (::rmdir(step_dir.c_str()) != 0) return os_error(step_dir, "rmdir", errno);
  return Status();
}

}  // namespace kiln::ckpt::internal
