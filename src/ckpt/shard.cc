// Shard layout (the safetensors image) and the write of one shard. See shard.h.
#include "ckpt/shard.h"

#include <kiln/base/check.h>

#include <string_view>

namespace kiln::ckpt::internal {
namespace {

// The u64 length prefix of a safetensors file.
constexpr size_t kHeaderLengthBytes = 8;

}  // namespace

Status validate_shard_spec(const ShardSpec& spec) {
  if (spec.dir.empty()) return Status::invalid_argument("checkpoint directory is empty");
  if (spec.step < 0 || spec.step > kStepMax) {
    return Status::invalid_argument("step " + std::to_string(spec.step) + " is outside [0, " +
                                    std::to_string(kStepMax) + "]");
  }
  if (spec.world < 1 || spec.world > kWorldSizeMax) {
    return Status::invalid_argument("world size " + std::to_string(spec.world) +
                                    " is outside [1, " + std::to_string(kWorldSizeMax) + "]");
  }
  if (spec.rank < 0 || spec.rank >= spec.world) {
    return Status::invalid_argument("rank " + std::to_string(spec.rank) + " is outside [0, " +
                                    std::to_string(spec.world) + ")");
  }
  return Status();
}

Result<ShardLayout> layout_shard(const ShardSpec& spec, std::span<const TensorRef> tensors,
                                 const std::map<std::string, std::string>& metadata) {
  KILN_RETURN_IF_ERROR(validate_shard_spec(spec));
  const std::string where =
      "checkpoint step=" + std::to_string(spec.step) + " rank=" + std::to_string(spec.rank);
  std::map<std::string, std::string> all_metadata;
  for (const auto& [key, value] : metadata) {
    if (key.starts_with(kShardMetadataPrefix)) {
      return Status::invalid_argument(where + ": shard metadata key '" + key + "' is reserved");
    }
    all_metadata[key] = value;
  }
  all_metadata[std::string(kStepKey)] = std::to_string(spec.step);
  all_metadata[std::string(kRankKey)] = std::to_string(spec.rank);
  all_metadata[std::string(kWorldKey)] = std::to_string(spec.world);

  ShardLayout layout;
  KILN_ASSIGN_OR_RETURN(
      layout.header, encode_safetensors_header(tensors, all_metadata, where, &layout.data_bytes));
  if (layout.header.size() - kHeaderLengthBytes > kShardHeaderBytesMax) {
    return Status::invalid_argument(where + ": shard header of " +
                                    std::to_string(layout.header.size()) + " bytes exceeds " +
                                    std::to_string(kShardHeaderBytesMax));
  }
  for (const TensorRef& t : tensors) {
    const size_t bytes = static_cast<size_t>(shape_numel(t.shape)) * dtype_size(t.dtype);
    if (bytes > 0) layout.data.push_back({t.data, bytes});
  }
  KILN_CHECK_EQ(layout.header.size() % 8, 0u) << "safetensors data starts 8-byte aligned";
  return layout;
}

Result<FileRecord> write_shard_spans(const ShardSpec& spec, std::span<const ByteSpan> spans,
                                     const WriteOptions& options) {
  KILN_RETURN_IF_ERROR(validate_shard_spec(spec));
  if (options.chunk_bytes < kWriteChunkBytesMin) {
    return Status::invalid_argument("write chunk of " + std::to_string(options.chunk_bytes) +
                                    " bytes is below " + std::to_string(kWriteChunkBytesMin));
  }
  const std::string step_dir = step_dir_path(spec.dir, spec.step);
  KILN_RETURN_IF_ERROR(make_dirs_durable(step_dir, options.fs));
  const std::string manifest = step_dir + "/" + std::string(kManifestFileName);
  if (options.fs->stat(manifest).ok()) {
    return Status::invalid_argument(step_dir +
                                    " is already committed; a committed checkpoint is never "
                                    "overwritten");
  }
  return write_file_durably(step_dir, shard_file_name(spec.rank, spec.world), spans, options);
}

}  // namespace kiln::ckpt::internal
