// FileSystem: every file operation Kiln's durable writes need, behind one small interface
// (LevelDB's Env is the model), so tests swap in a file system that fails on purpose
// (src/base/testing/fault_file_system.h) and the protocol is written once: write_file_durably().
//
// Every error is a Status naming the path and the call, "<path>: <call>: <strerror>", as
// kNotFound for ENOENT and kIoError otherwise: "DIR/x.tmp: fsync: Input/output error".
//
// The durable-write protocol (write_file_durably), and the invariant it keeps: a reader of PATH
// sees either what was there before or the whole new file, never part of it.
//   1. open PATH.tmp (created or truncated), reserve the file's size (a full disk fails here)
//   2. write the bytes in chunks, hashing each (XXH3-64) just before it goes out
//   3. fsync PATH.tmp, close it (close's error counts)
//   4. rename PATH.tmp over PATH
//   5. fsync PATH's directory, so the new name survives a crash
// A failure in 1-4 removes PATH.tmp and leaves PATH as it was. A failure in 5 leaves the new,
// complete and fsynced file at PATH whose name may not survive a crash; the error names the
// directory.
#ifndef KILN_BASE_FILE_SYSTEM_H_
#define KILN_BASE_FILE_SYSTEM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include <kiln/base/result.h>
#include <kiln/base/status.h>

namespace kiln {

// "<path>: <call>: <strerror(err)>" as kNotFound when err is ENOENT, else kIoError.
Status os_error(const std::string& path, std::string_view call, int err);

// A file open for writing at its end. Not thread-safe. The destructor closes the file if close()
// was not called, ignoring errors.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual const std::string& path() const = 0;
  // Reserves the first `bytes` bytes, so that a disk without room fails here, before anything is
  // written: kIoError for ENOSPC, EDQUOT or EFBIG. OK without effect where the file system
  // cannot preallocate.
  virtual Status preallocate(uint64_t bytes) = 0;
  // Writes all of [data, data + size) after what was written before. Retries EINTR and short
  // writes; a write() that takes nothing for a non-zero count is an error (ENOSPC), never a loop.
  virtual Status append(const void* data, size_t size) = 0;
  // Starts writeback of [offset, offset + bytes) without waiting (a hint: its errors, if any,
  // come back from sync()).
  virtual void start_writeback(uint64_t offset, uint64_t bytes) = 0;
  // fsync: OK once every byte appended is on stable storage.
  virtual Status sync() = 0;
  // Closes the file; its error is reported (for a file just written, a late write error).
  // REQUIRES: called at most once, and nothing else called after it.
  virtual Status close() = 0;
};

// A file open for reading from its start. Not thread-safe; closed by the destructor.
class ReadableFile {
 public:
  virtual ~ReadableFile() = default;
  virtual const std::string& path() const = 0;
  // The file's size now (fstat).
  virtual Result<uint64_t> size() = 0;
  // Reads up to `size` bytes at the current position: the count read, 0 only at end of file.
  // Retries EINTR.
  virtual Result<size_t> read(void* data, size_t size) = 0;
};

enum class FileType { kRegular, kDirectory, kOther };

struct FileInfo {
  FileType type = FileType::kOther;
  uint64_t size_bytes = 0;
};

// The operations. Implementations are thread-safe: calls may come from any thread.
class FileSystem {
 public:
  virtual ~FileSystem() = default;
  // Creates `path` (mode 0644) or truncates it, for writing.
  virtual Result<std::unique_ptr<WritableFile>> open_for_write(const std::string& path) = 0;
  // Opens `path` for sequential reading; kNotFound when it does not exist, kCorruption (without
  // blocking) when it is not a regular file.
  virtual Result<std::unique_ptr<ReadableFile>> open_for_read(const std::string& path) = 0;
  // Atomically replaces `to` with `from` (rename(2)). The error names `from`.
  virtual Status rename(const std::string& from, const std::string& to) = 0;
  // fsyncs the directory itself, so entries created, renamed or removed in it are durable.
  virtual Status sync_dir(const std::string& dir) = 0;
  // Creates the directory (mode 0755): true when it was created, false when something already
  // exists at `dir` (stat() says what).
  virtual Result<bool> make_dir(const std::string& dir) = 0;
  // Removes the file; kNotFound when there is none.
  virtual Status unlink(const std::string& path) = 0;
  // What is at `path` (following symlinks); kNotFound when nothing is.
  virtual Result<FileInfo> stat(const std::string& path) = 0;
};

// The real one: POSIX calls. Process-wide, thread-safe, never destroyed.
FileSystem* posix_file_system();

// A run of bytes to write; not owned.
struct ByteSpan {
  const void* data = nullptr;
  size_t size = 0;
};

struct DurableWriteOptions {
  // Bytes per append(), each hashed just before it goes out: 4 MiB is large enough that the call
  // per chunk is noise and small enough that the chunk just hashed is still in the last-level
  // cache when write() copies it (kiln_ckpt's kWriteChunkBytesDefault says the same).
  // REQUIRES: > 0.
  size_t chunk_bytes = size_t{4} << 20;
  // Starts writeback of each chunk right after it is written (start_writeback()).
  bool early_writeback = false;
  // Caps the write rate in bytes per second (0: no cap) by sleeping after a chunk that got ahead.
  uint64_t bytes_per_s_max = 0;
};

// What write_file_durably() wrote.
struct DurableWriteResult {
  uint64_t size_bytes = 0;
  uint64_t xxh3 = 0;  // XXH3-64 (seed 0) of the whole file, computed as it was written
};

// Writes the concatenation of `spans` as `path` by the protocol at the top of this file, through
// `fs`. Errors name the file (PATH.tmp for steps 1-4) and the call that failed. REQUIRES: fs is
// not null.
Result<DurableWriteResult> write_file_durably(FileSystem* fs, const std::string& path,
                                              std::span<const ByteSpan> spans,
                                              const DurableWriteOptions& options = {});

// The directory `path` lies in ("." for a bare name).
std::string parent_dir(const std::string& path);

// Creates `dir` and any missing parents through `fs`; each directory it creates is made durable
// by fsyncing its parent. OK when it already exists as a directory; kIoError naming the path
// when something else is there.
Status make_dirs_durably(FileSystem* fs, const std::string& dir);

}  // namespace kiln

#endif  // KILN_BASE_FILE_SYSTEM_H_
