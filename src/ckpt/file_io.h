// The file-system primitives kiln_ckpt's commit protocol is built from, over kiln_base's
// FileSystem (include/kiln/base/file_system.h, which holds the durable-write protocol itself):
// a durable write that returns the file's record, crash-safe directory creation, bounded reads
// and streaming hashes. Private to kiln_ckpt.
//
// Every error is kIoError (or kNotFound for a missing file) and names the path and the call that
// failed: "DIR/step_000000002/rank_00000_of_00001.safetensors.tmp: write: No space left on device".
#ifndef KILN_CKPT_FILE_IO_H_
#define KILN_CKPT_FILE_IO_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include <kiln/base/file_system.h>
#include <kiln/base/result.h>
#include <kiln/base/status.h>
#include <kiln/ckpt/checkpoint.h>

namespace kiln::ckpt::internal {

using kiln::ByteSpan;
using kiln::os_error;

// fsyncs the directory itself, so entries created, renamed or removed in it are durable.
Status fsync_dir(const std::string& dir, FileSystem* fs = posix_file_system());

// Creates `dir` and any missing parents; each directory it creates is made durable by fsyncing
// its parent. OK when it already exists as a directory.
Status make_dirs_durable(const std::string& dir, FileSystem* fs = posix_file_system());

// Writes the concatenation of `spans` as DIR/NAME through options.fs by kiln's durable-write
// protocol (write_file_durably in file_system.h): DIR/NAME.tmp, preallocated, written in chunks
// of options.chunk_bytes hashed as they go out, fsync, rename, fsync DIR. On failure before the
// rename DIR/NAME.tmp is removed and DIR/NAME is whatever it was. Returns the new file's record.
Result<FileRecord> write_file_durably(const std::string& dir, const std::string& name,
                                      std::span<const ByteSpan> spans, const WriteOptions& options);

// The whole file when it is at most `max_bytes`; kNotFound when missing, kCorruption when larger.
Result<std::string> read_file_bounded(const std::string& path, size_t max_bytes,
                                      FileSystem* fs = posix_file_system());

// Size and XXH3-64 of the file at `path`, read in chunks (name left empty).
Result<FileRecord> hash_file(const std::string& path, FileSystem* fs = posix_file_system());

// Removes a step directory: manifest first (then the directory is fsynced, so it can no longer
// look complete), then every other entry, then the directory itself. It holds files only.
Status remove_step_dir(const std::string& step_dir, const std::string& manifest_name);

}  // namespace kiln::ckpt::internal

#endif  // KILN_CKPT_FILE_IO_H_
