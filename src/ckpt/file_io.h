// The file-system primitives kiln_ckpt's commit protocol is built from: a durable write (temp
// name, streaming XXH3, fsync, rename, directory fsync), directory creation that survives a
// crash, bounded reads and streaming hashes. Private to kiln_ckpt.
//
// Every error is kIoError (or kNotFound for a missing file) and names the path and the call that
// failed: "DIR/step_000000002/rank_00000_of_00001.safetensors.tmp: write: No space left on device".
#ifndef KILN_CKPT_FILE_IO_H_
#define KILN_CKPT_FILE_IO_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include <kiln/base/result.h>
#include <kiln/base/status.h>
#include <kiln/ckpt/checkpoint.h>

namespace kiln::ckpt::internal {

// A run of bytes to write; not owned.
struct ByteSpan {
  const void* data = nullptr;
  size_t size = 0;
};

// "<path>: <call>: <strerror(err)>" as kIoError, or kNotFound when err is ENOENT.
Status os_error(const std::string& path, const char* call, int err);

// fsyncs the directory itself, so entries created, renamed or removed in it are durable.
Status fsync_dir(const std::string& dir);

// Creates `dir` and any missing parents; each directory it creates is made durable by fsyncing
// its parent. OK when it already exists as a directory.
Status make_dirs_durable(const std::string& dir);

// Writes the concatenation of `spans` as DIR/NAME: into DIR/NAME.tmp (preallocated, so a full
// disk fails before the first byte), in chunks of options.chunk_bytes hashed as they are written,
// then fsync, rename over DIR/NAME, fsync DIR. On failure DIR/NAME.tmp is removed and DIR/NAME is
// whatever it was. Returns the new file's record.
Result<FileRecord> write_file_durably(const std::string& dir, const std::string& name,
                                      std::span<const ByteSpan> spans, const WriteOptions& options);

// The whole file when it is at most `max_bytes`; kNotFound when missing, kCorruption when larger
// or not a regular file (a FIFO or device is refused without blocking).
Result<std::string> read_file_bounded(const std::string& path, size_t max_bytes);

// Size and XXH3-64 of the file at `path`, read in chunks (name left empty); kCorruption, without
// blocking, when it is not a regular file.
Result<FileRecord> hash_file(const std::string& path);

// Removes a step directory: manifest first (then the directory is fsynced, so it can no longer
// look complete), then every other entry, then the directory itself. It holds files only.
Status remove_step_dir(const std::string& step_dir, const std::string& manifest_name);

}  // namespace kiln::ckpt::internal

#endif  // KILN_CKPT_FILE_IO_H_
