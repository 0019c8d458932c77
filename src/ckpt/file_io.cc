// Durable writes, crash-safe directory creation, bounded reads and streaming hashes for kiln_ckpt,
// over kiln_base's FileSystem. See file_io.h.
#include "ckpt/file_io.h"

#include <dirent.h>
#include <unistd.h>

#include <kiln/base/check.h>
#include <kiln/base/checksum.h>

#include <cerrno>
#include <memory>
#include <vector>

namespace kiln::ckpt::internal {
namespace {

// Reads while hashing a file come in pieces of this size: large enough to keep the disk's queue
// full, small enough to stay in the last-level cache between read() and the hash.
constexpr size_t kReadChunkBytes = size_t{4} << 20;

}  // namespace

Status fsync_dir(const std::string& dir, FileSystem* fs) {
  return fs->sync_dir(dir);
}

Status make_dirs_durable(const std::string& dir, FileSystem* fs) {
  return make_dirs_durably(fs, dir);
}

Result<FileRecord> write_file_durably(const std::string& dir, const std::string& name,
                                      std::span<const ByteSpan> spans,
                                      const WriteOptions& options) {
  KILN_CHECK_GE(options.chunk_bytes, kWriteChunkBytesMin);
  DurableWriteOptions durable;
  durable.chunk_bytes = options.chunk_bytes;
  durable.early_writeback = options.early_writeback;
  durable.bytes_per_s_max = options.bytes_per_s_max;
  KILN_ASSIGN_OR_RETURN(const DurableWriteResult written,
                        kiln::write_file_durably(options.fs, dir + "/" + name, spans, durable));
  return FileRecord{name, written.size_bytes, written.xxh3};
}

Result<std::string> read_file_bounded(const std::string& path, size_t max_bytes, FileSystem* fs) {
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> file, fs->open_for_read(path));
  KILN_ASSIGN_OR_RETURN(const uint64_t size, file->size());
  if (size > max_bytes) {
    return Status::corruption(path + ": " + std::to_string(size) + " bytes, more than the " +
                              std::to_string(max_bytes) + " it may have");
  }
  std::string bytes(static_cast<size_t>(size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    KILN_ASSIGN_OR_RETURN(const size_t n, file->read(bytes.data() + done, bytes.size() - done));
    if (n == 0) break;  // shrank while being read: what was read is checked by the caller
    done += n;
  }
  bytes.resize(done);
  return bytes;
}

Result<FileRecord> hash_file(const std::string& path, FileSystem* fs) {
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> file, fs->open_for_read(path));
  std::vector<char> buffer(kReadChunkBytes);
  Xxh3Hasher hasher;
  uint64_t total = 0;
  while (true) {
    KILN_ASSIGN_OR_RETURN(const size_t n, file->read(buffer.data(), buffer.size()));
    if (n == 0) break;
    hasher.update(buffer.data(), n);
    total += n;
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
