// The POSIX FileSystem and the durable-write protocol built on the interface. See
// include/kiln/base/file_system.h. Every file descriptor opened here is closed on every path out.
#include <kiln/base/file_system.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <kiln/base/check.h>
#include <kiln/base/checksum.h>
#include <kiln/base/clock.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "base/write_loop.h"

namespace kiln {
namespace base_internal {

Status write_fully(WriteCall write_call, const std::string& path, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = write_call(p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return os_error(path, "write", errno);
    }
    if (n == 0) return os_error(path, "write", ENOSPC);
    p += n;
    size -= static_cast<size_t>(n);
  }
  return Status();
}

}  // namespace base_internal

namespace {

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }
  PosixWritableFile(const PosixWritableFile&) = delete;
  PosixWritableFile& operator=(const PosixWritableFile&) = delete;

  const std::string& path() const override { return path_; }

  Status preallocate(uint64_t bytes) override {
    if (bytes == 0) return Status();
    if (::fallocate(fd_, 0, 0, static_cast<off_t>(bytes)) == 0) return Status();
    const int err = errno;
    if (err == ENOSPC || err == EDQUOT || err == EFBIG) return os_error(path_, "fallocate", err);
    return Status();  // EOPNOTSUPP and the like: the writes report a full disk instead
  }

  Status append(const void* data, size_t size) override {
    const int fd = fd_;
    return base_internal::write_fully([fd](const void* p, size_t n) { return ::write(fd, p, n); },
                                      path_, data, size);
  }

  void start_writeback(uint64_t offset, uint64_t bytes) override {
    (void)::sync_file_range(fd_, static_cast<off64_t>(offset), static_cast<off64_t>(bytes),
                            SYNC_FILE_RANGE_WRITE);
  }

  Status sync() override {
    if (::fsync(fd_) != 0) return os_error(path_, "fsync", errno);
    return Status();
  }

  Status close() override {
    KILN_CHECK_GE(fd_, 0) << path_ << ": closed twice";
    const int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) return os_error(path_, "close", errno);
    return Status();
  }

 private:
  std::string path_;
  int fd_;
};

class PosixReadableFile final : public ReadableFile {
 public:
  PosixReadableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixReadableFile() override { ::close(fd_); }
  PosixReadableFile(const PosixReadableFile&) = delete;
  PosixReadableFile& operator=(const PosixReadableFile&) = delete;

  const std::string& path() const override { return path_; }

  Result<uint64_t> size() override {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) return os_error(path_, "fstat", errno);
    return static_cast<uint64_t>(st.st_size);
  }

  Result<size_t> read(void* data, size_t size) override {
    while (true) {
      const ssize_t n = ::read(fd_, data, size);
      if (n >= 0) return static_cast<size_t>(n);
      if (errno != EINTR) return os_error(path_, "read", errno);
    }
  }

 private:
  std::string path_;
  int fd_;
};

class PosixFileSystem final : public FileSystem {
 public:
  Result<std::unique_ptr<WritableFile>> open_for_write(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return os_error(path, "open", errno);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
  }

  Result<std::unique_ptr<ReadableFile>> open_for_read(const std::string& path) override {
    // O_NONBLOCK so that a FIFO with no writer cannot block the open (it changes nothing for a
    // regular file); whatever is not a regular file is refused: a FIFO blocks every read and a
    // device never ends.
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return os_error(path, "open", errno);
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      return os_error(path, "fstat", err);
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      return Status::corruption(path + ": not a regular file (a directory, FIFO or device)");
    }
    (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);  // a hint; failure changes nothing
    return std::unique_ptr<ReadableFile>(new PosixReadableFile(path, fd));
  }

  Status rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return os_error(from, "rename to " + to, errno);
    return Status();
  }

  Status sync_dir(const std::string& dir) override {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return os_error(dir, "open directory", errno);
    Status status;
    if (::fsync(fd) != 0) status = os_error(dir, "fsync directory", errno);
    ::close(fd);
    return status;
  }

  Result<bool> make_dir(const std::string& dir) override {
    if (::mkdir(dir.c_str(), 0755) == 0) return true;
    if (errno == EEXIST) return false;
    return os_error(dir, "mkdir", errno);
  }

  Status unlink(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return os_error(path, "unlink", errno);
    return Status();
  }

  Result<FileInfo> stat(const std::string& path) override {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return os_error(path, "stat", errno);
    FileInfo info;
    info.type = S_ISREG(st.st_mode)   ? FileType::kRegular
                : S_ISDIR(st.st_mode) ? FileType::kDirectory
                                      : FileType::kOther;
    info.size_bytes = static_cast<uint64_t>(st.st_size);
    return info;
  }
};

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

// Steps 1-3 of the protocol into `file`: reserve, write in hashed chunks, fsync, close.
Status write_and_sync(WritableFile* file, std::span<const ByteSpan> spans, uint64_t total,
                      const DurableWriteOptions& options, Xxh3Hasher* hasher) {
  KILN_RETURN_IF_ERROR(file->preallocate(total));
  const Pacer pacer(options.bytes_per_s_max);
  uint64_t offset = 0;
  for (const ByteSpan& span : spans) {
    const char* p = static_cast<const char*>(span.data);
    size_t left = span.size;
    while (left > 0) {
      const size_t n = std::min(left, options.chunk_bytes);
      hasher->update(p, n);
      KILN_RETURN_IF_ERROR(file->append(p, n));
      if (options.early_writeback) file->start_writeback(offset, n);
      p += n;
      left -= n;
      offset += n;
      pacer.after(offset);
    }
  }
  KILN_RETURN_IF_ERROR(file->sync());
  return file->close();
}

}  // namespace

Status os_error(const std::string& path, std::string_view call, int err) {
  std::string message = path + ": " + std::string(call) + ": " + std::strerror(err);
  if (err == ENOENT) return Status::not_found(std::move(message));
  return Status::io_error(std::move(message));
}

FileSystem* posix_file_system() {
  static PosixFileSystem* const fs = new PosixFileSystem();  // never destroyed: see the header
  return fs;
}

std::string parent_dir(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? std::string(".") : parent;
}

Result<DurableWriteResult> write_file_durably(FileSystem* fs, const std::string& path,
                                              std::span<const ByteSpan> spans,
                                              const DurableWriteOptions& options) {
  KILN_CHECK(fs != nullptr) << path << ": write_file_durably without a file system";
  KILN_CHECK_GT(options.chunk_bytes, 0u);
  const std::string tmp = path + ".tmp";
  uint64_t total = 0;
  for (const ByteSpan& span : spans)
    total += span.size;

  Xxh3Hasher hasher;
  Status status;
  {
    Result<std::unique_ptr<WritableFile>> file = fs->open_for_write(tmp);
    if (!file.ok()) return file.status();
    status = write_and_sync(file->get(), spans, total, options, &hasher);
  }  // an unclosed file (after an error) is closed here, before the unlink
  if (status.ok()) status = fs->rename(tmp, path);
  if (!status.ok()) {
    (void)fs->unlink(tmp);  // best effort: the error to report is the one above
    return status;
  }
  KILN_RETURN_IF_ERROR(fs->sync_dir(parent_dir(path)));
  return DurableWriteResult{total, hasher.digest()};
}

Status make_dirs_durably(FileSystem* fs, const std::string& dir) {
  std::filesystem::path prefix;
  for (const std::filesystem::path& part : std::filesystem::path(dir)) {
    prefix /= part;
    if (part.empty() || part == prefix.root_path()) continue;
    const std::string path = prefix.string();
    KILN_ASSIGN_OR_RETURN(const bool created, fs->make_dir(path));
    if (created) {
      const std::filesystem::path parent = prefix.parent_path();
      KILN_RETURN_IF_ERROR(fs->sync_dir(parent.empty() ? std::string(".") : parent.string()));
      continue;
    }
    KILN_ASSIGN_OR_RETURN(const FileInfo info, fs->stat(path));
    if (info.type != FileType::kDirectory) {
      return Status::io_error(path + ": exists and is not a directory");
    }
  }
  return Status();
}

}  // namespace kiln
