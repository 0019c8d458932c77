// Checkpoints: per-rank shards, a manifest written last, and the two-phase commit that joins them.
//
// On disk (docs/ckpt.md has the grammar):
//
//   DIR/step_000000120/rank_00000_of_00002.safetensors   rank 0's shard (safetensors)
//   DIR/step_000000120/rank_00001_of_00002.safetensors   rank 1's shard
//   DIR/step_000000120/manifest.json                      written last, by rank 0
//
// The commit protocol, and the invariant it keeps: a checkpoint exists iff its manifest is valid,
// and a valid manifest names only files that were durable before it was written.
//   1. Every rank writes its shard as NAME.tmp, hashing (XXH3-64) the bytes as they go out,
//      fsyncs it, renames it to NAME and fsyncs the step directory: write_shard(), which returns
//      the shard's FileRecord (name, size, xxh3).
//   2. The trainer gathers every rank's FileRecord on rank 0 (over kiln_comm or the store; this
//      library knows nothing of either).
//   3. Rank 0 calls commit(): it checks every shard is there with its recorded size, then writes
//      manifest.json by the same temp + fsync + rename + directory fsync sequence. The manifest
//      records step, world size, every file's size and XXH3, the trainer's opaque metadata
//      (config hash, loader positions, RNG states) and an XXH3 of its own body.
// A crash anywhere before the manifest's rename leaves a directory without a manifest, which
// every reader treats as absent (catalog.h). World size 1 uses the same calls.
//
// Thread safety: the free functions share no state; two calls may run concurrently on different
// steps. One step is written by one writer per rank.
#ifndef KILN_CKPT_CHECKPOINT_H_
#define KILN_CKPT_CHECKPOINT_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/base/file_system.h>
#include <kiln/base/result.h>
#include <kiln/base/status.h>
#include <kiln/ckpt/limits.h>
#include <kiln/ckpt/safetensors.h>

namespace kiln::ckpt {

inline constexpr std::string_view kManifestFileName = "manifest.json";
// Shard __metadata__ keys this library sets on every shard (and checks on load); callers may not.
inline constexpr std::string_view kShardMetadataPrefix = "kiln_ckpt_";

// "step_000000120". REQUIRES: 0 <= step <= kStepMax.
std::string step_dir_name(int64_t step);
// DIR + "/" + step_dir_name(step).
std::string step_dir_path(const std::string& dir, int64_t step);
// "rank_00000_of_00002.safetensors". REQUIRES: 0 <= rank < world <= kWorldSizeMax.
std::string shard_file_name(int rank, int world);
// The step a directory name encodes ("step_000000120" -> 120); -1 when it is not one of ours.
int64_t parse_step_dir_name(std::string_view name);

// One durable file of a checkpoint, as the manifest records it.
struct FileRecord {
  std::string name;  // inside the step directory
  uint64_t size_bytes = 0;
  uint64_t xxh3 = 0;  // XXH3-64 (seed 0) of the whole file

  friend bool operator==(const FileRecord&, const FileRecord&) = default;
};

// {"name":..,"size_bytes":..,"xxh3":"16 hex digits"}: the form ranks send their record to rank 0
// in (a store value, a gathered byte buffer).
std::string file_record_to_json(const FileRecord& record);
// kInvalidArgument naming the field when `text` is not such an object.
Result<FileRecord> file_record_from_json(std::string_view text);

// Performance and pacing of shard and manifest writes.
struct WriteOptions {
  // Bytes per write() call; see kWriteChunkBytesDefault. REQUIRES: >= kWriteChunkBytesMin.
  size_t chunk_bytes = kWriteChunkBytesDefault;
  // Starts writeback of each chunk right after it is written (sync_file_range), so the disk works
  // while later chunks are still being copied and the final fsync has little left to flush. Off by
  // default: on the virtual disk bench/ckpt/run measured (docs/ckpt.md) it paced the writer to
  // the device and cost 4x against one fsync at the end, which is what dd conv=fsync does.
  bool early_writeback = false;
  // Caps the write rate in bytes per second (0: no cap), so checkpoint I/O does not starve the
  // data loader on a shared disk. `kiln ckpt write-test` uses it to make a write slow enough to
  // kill in the middle.
  uint64_t bytes_per_s_max = 0;
  // Where the files go: the POSIX file system; tests pass a fault-injecting one. Not owned;
  // REQUIRES: outlives the write.
  FileSystem* fs = posix_file_system();
};

// Which shard: DIR/step_<step>/rank_<rank>_of_<world>.safetensors.
struct ShardSpec {
  std::string dir;  // the checkpoint root; created (with parents) when missing
  int64_t step = 0;
  int rank = 0;
  int world = 1;
};

// Phase 1, every rank: writes `tensors` (in order, contiguous, as safetensors) and `metadata`
// (plus kiln_ckpt_step/_rank/_world) as this rank's shard; returns its FileRecord once the file
// and its directory entry are durable. Any previous file of the same name is replaced only by
// the rename, so a failed write leaves what was there.
// Errors: kInvalidArgument for a bad spec, tensor or reserved metadata key, or when the step is
// already committed (a committed checkpoint is never overwritten); kIoError naming the file and
// the call that failed (a full disk: "...rank_00000_of_00001.safetensors.tmp: write: No space
// left on device"); the temporary file is removed on failure.
Result<FileRecord> write_shard(const ShardSpec& spec, std::span<const TensorRef> tensors,
                               const std::map<std::string, std::string>& metadata = {},
                               const WriteOptions& options = {});

// What rank 0 commits.
struct CommitSpec {
  std::string dir;  // the checkpoint root
  int64_t step = 0;
  int world = 1;
  std::vector<FileRecord> records;  // records[r] is what rank r's write_shard() returned
  // The trainer's opaque metadata: a JSON object (config hash, loader positions, RNG states, ...)
  // that read_manifest() returns unchanged. Parsed only to check it is an object.
  std::string metadata_json = "{}";
  // Where the manifest goes (and the shards are checked): as WriteOptions::fs.
  FileSystem* fs = posix_file_system();
};

// Phase 2, rank 0 only: checks that every rank's shard is in the step directory with the size its
// record says (a missing one usually means DIR is not on a shared filesystem), then writes the
// manifest durably. Returns OK once the checkpoint exists; on any error the step has no manifest
// (a manifest whose directory fsync failed is removed again), so it reads as absent.
// Errors: kInvalidArgument for a spec that does not match (record count, names, metadata not an
// object) or an already committed step; kNotFound or kCorruption naming a missing or mis-sized
// shard; kIoError naming the manifest file.
Status commit(const CommitSpec& spec);

// A parsed, self-checksum-verified manifest.
struct Manifest {
  int64_t step = 0;
  int world = 0;
  std::string created_utc;        // RFC 3339, when rank 0 committed
  uint64_t total_bytes = 0;       // of all shards
  std::vector<FileRecord> files;  // files[r] is rank r's shard
  std::string metadata_json;      // the trainer's object, as compact JSON
};

// Reads STEP_DIR/manifest.json. kNotFound when there is none (the checkpoint does not exist);
// kCorruption naming the file and what is wrong (its own checksum, a field, a step that does not
// match the directory's name) otherwise.
Result<Manifest> read_manifest(const std::string& step_dir);

// Reads the file `record` names in `step_dir` and checks its size and XXH3. kNotFound when it is
// missing, kCorruption naming it and both checksums when it differs, kIoError when unreadable.
Status verify_file(const std::string& step_dir, const FileRecord& record);

// Rank `rank`'s shard of a committed checkpoint, checked against the manifest (size, XXH3) and
// against its own metadata (step, rank, world), then parsed. Errors name the file.
Result<SafetensorsFile> load_shard(const std::string& step_dir, const Manifest& manifest, int rank);

}  // namespace kiln::ckpt

#endif  // KILN_CKPT_CHECKPOINT_H_
