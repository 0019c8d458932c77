// A shard's file image and the write of one shard into its step directory. Private to kiln_ckpt.
//
// A shard is a safetensors file (include/kiln/ckpt/safetensors.h) byte for byte as
// write_safetensors() would write it for the same tensors and metadata: u64 little-endian header
// length, the JSON header ("__metadata__" first, then the tensors in the caller's order) padded
// with spaces to a multiple of 8 bytes, then the tensors' data back to back. Its __metadata__
// always carries kiln_ckpt_step, kiln_ckpt_rank and kiln_ckpt_world, so a shard moved to the
// wrong directory is caught on load.
#ifndef KILN_CKPT_SHARD_H_
#define KILN_CKPT_SHARD_H_

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <kiln/base/result.h>
#include <kiln/base/status.h>
#include <kiln/ckpt/checkpoint.h>
#include <kiln/ckpt/safetensors.h>

#include "ckpt/file_io.h"

namespace kiln::ckpt::internal {

inline constexpr std::string_view kStepKey = "kiln_ckpt_step";
inline constexpr std::string_view kRankKey = "kiln_ckpt_rank";
inline constexpr std::string_view kWorldKey = "kiln_ckpt_world";

// The shard's bytes: `header` followed by each of `data` in order.
struct ShardLayout {
  std::string header;          // length prefix + JSON header + padding; a multiple of 8 bytes
  std::vector<ByteSpan> data;  // the tensors' data, in file order, not owned
  uint64_t data_bytes = 0;
  uint64_t file_bytes() const { return header.size() + data_bytes; }
};

// kInvalidArgument naming the field when step, rank or world is out of range.
Status validate_shard_spec(const ShardSpec& spec);

// Lays out the shard for `tensors` and `metadata` (plus the kiln_ckpt_* keys). kInvalidArgument
// for a reserved or duplicate tensor name, a bad shape, missing data, a reserved metadata key or a
// header above kShardHeaderBytesMax.
Result<ShardLayout> layout_shard(const ShardSpec& spec, std::span<const TensorRef> tensors,
                                 const std::map<std::string, std::string>& metadata);

// Creates the step directory durably (refusing a committed step) and writes `spans` as this
// rank's shard with write_file_durably().
Result<FileRecord> write_shard_spans(const ShardSpec& spec, std::span<const ByteSpan> spans,
                                     const WriteOptions& options);

}  // namespace kiln::ckpt::internal

#endif  // KILN_CKPT_SHARD_H_
