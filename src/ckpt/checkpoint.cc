// Shard writes, the commit and the reads of one checkpoint. See include/kiln/ckpt/checkpoint.h
// for the protocol and the invariant it keeps.
#include <kiln/ckpt/checkpoint.h>

#include <kiln/base/check.h>
#include <kiln/base/checksum.h>
#include <kiln/base/clock.h>
#include <kiln/base/json.h>

#include <cstdio>

#include <nlohmann/json.hpp>

#include "ckpt/file_io.h"
#include "ckpt/manifest.h"
#include "ckpt/shard.h"

namespace kiln::ckpt {
namespace {

constexpr std::string_view kStepDirPrefix = "step_";
constexpr size_t kStepDigits = 9;  // kStepMax has 9 digits
// A record is a name, a size and a hash: under 200 bytes; 64 KiB is room for any honest one.
constexpr size_t kFileRecordBytesMax = size_t{64} << 10;

// The shard's __metadata__ value for `key` parses as `expected`; kCorruption naming it otherwise.
Status check_shard_key(const SafetensorsFile& file, std::string_view key, int64_t expected) {
  auto it = file.metadata().find(std::string(key));
  if (it == file.metadata().end() || it->second != std::to_string(expected)) {
    return Status::corruption(file.path() + ": __metadata__." + std::string(key) + " is " +
                              (it == file.metadata().end() ? "missing" : "'" + it->second + "'") +
                              ", expected " + std::to_string(expected));
  }
  return Status();
}

// Checks a CommitSpec against itself (ranks, names, metadata) before touching the disk.
Status validate_commit(const CommitSpec& spec, const std::string& where) {
  KILN_RETURN_IF_ERROR(internal::validate_shard_spec({spec.dir, spec.step, 0, spec.world}));
  if (spec.records.size() != static_cast<size_t>(spec.world)) {
    return Status::invalid_argument(where + ": " + std::to_string(spec.records.size()) +
                                    " records for world size " + std::to_string(spec.world));
  }
  for (int r = 0; r < spec.world; ++r) {
    if (spec.records[r].name != shard_file_name(r, spec.world)) {
      return Status::invalid_argument(where + ": record " + std::to_string(r) + " names '" +
                                      spec.records[r].name + "', not rank " + std::to_string(r) +
                                      "'s shard");
    }
  }
  const nlohmann::json metadata = nlohmann::json::parse(spec.metadata_json, nullptr, false);
  if (metadata.is_discarded() || !metadata.is_object()) {
    return Status::invalid_argument(where + ": metadata is not a JSON object");
  }
  return Status();
}

}  // namespace

std::string step_dir_name(int64_t step) {
  KILN_CHECK(step >= 0 && step <= kStepMax) << "step " << step;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step_%09lld", static_cast<long long>(step));
  return buf;
}

std::string step_dir_path(const std::string& dir, int64_t step) {
  return dir + "/" + step_dir_name(step);
}

std::string shard_file_name(int rank, int world) {
  KILN_CHECK(rank >= 0 && rank < world && world <= kWorldSizeMax)
      << "rank " << rank << " world " << world;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "rank_%05d_of_%05d.safetensors", rank, world);
  return buf;
}

int64_t parse_step_dir_name(std::string_view name) {
  if (!name.starts_with(kStepDirPrefix) || name.size() != kStepDirPrefix.size() + kStepDigits) {
    return -1;
  }
  int64_t step = 0;
  for (char c : name.substr(kStepDirPrefix.size())) {
    if (c < '0' || c > '9') return -1;
    step = step * 10 + (c - '0');
  }
  return step;
}

std::string file_record_to_json(const FileRecord& record) {
  nlohmann::ordered_json j;
  j["name"] = record.name;
  j["size_bytes"] = record.size_bytes;
  j["xxh3"] = checksum_hex(record.xxh3);
  return j.dump();
}

Result<FileRecord> file_record_from_json(std::string_view text) {
  // A peer rank wrote it: bounded like every JSON text Kiln did not write itself.
  KILN_ASSIGN_OR_RETURN(
      const nlohmann::json j,
      parse_json_bounded(text, {kFileRecordBytesMax, kJsonDepthMaxDefault}, "file record"));
  if (!j.is_object()) return Status::invalid_argument("file record is not a JSON object");
  auto name = j.find("name");
  auto size = j.find("size_bytes");
  auto hash = j.find("xxh3");
  FileRecord record;
  if (name == j.end() || !name->is_string() || size == j.end() || !size->is_number_unsigned() ||
      hash == j.end() || !hash->is_string() ||
      !internal::parse_hex16(hash->get<std::string>(), &record.xxh3)) {
    return Status::invalid_argument(
        "file record needs a string 'name', an unsigned 'size_bytes' and a 16-hex-digit 'xxh3'");
  }
  record.name = name->get<std::string>();
  record.size_bytes = size->get<uint64_t>();
  return record;
}

Result<FileRecord> write_shard(const ShardSpec& spec, std::span<const TensorRef> tensors,
                               const std::map<std::string, std::string>& metadata,
                               const WriteOptions& options) {
  KILN_ASSIGN_OR_RETURN(internal::ShardLayout layout,
                        internal::layout_shard(spec, tensors, metadata));
  std::vector<internal::ByteSpan> spans;
  spans.reserve(layout.data.size() + 1);
  spans.push_back({layout.header.data(), layout.header.size()});
  spans.insert(spans.end(), layout.data.begin(), layout.data.end());
  return internal::write_shard_spans(spec, spans, options);
}

Status commit(const CommitSpec& spec) {
  const std::string where = "checkpoint step=" + std::to_string(spec.step);
  KILN_RETURN_IF_ERROR(validate_commit(spec, where));
  const std::string step_dir = step_dir_path(spec.dir, spec.step);
  const std::string manifest_path = step_dir + "/" + std::string(kManifestFileName);
  if (spec.fs->stat(manifest_path).ok()) {
    return Status::invalid_argument(manifest_path + " already exists; the step is committed");
  }
  Manifest manifest;
  manifest.step = spec.step;
  manifest.world = spec.world;
  manifest.created_utc = format_wall_time_utc(wall_now_ns());
  manifest.files = spec.records;
  manifest.metadata_json = spec.metadata_json;
  for (const FileRecord& record : spec.records) {
    const std::string path = step_dir + "/" + record.name;
    Result<FileInfo> info = spec.fs->stat(path);
    if (!info.ok()) {
      return info.status().with_context(
          where + " (is the checkpoint directory on a filesystem every rank shares?)");
    }
    if (info->size_bytes != record.size_bytes) {
      return Status::corruption(where + ": " + path + " has " + std::to_string(info->size_bytes) +
                                " bytes, its record says " + std::to_string(record.size_bytes));
    }
    manifest.total_bytes += record.size_bytes;
  }
  const std::string bytes = internal::encode_manifest(manifest);
  const internal::ByteSpan span{bytes.data(), bytes.size()};
  WriteOptions options;
  options.fs = spec.fs;
  Result<FileRecord> written = internal::write_file_durably(
      step_dir, std::string(kManifestFileName), std::span(&span, 1), options);
  if (!written.ok()) {
    // Only a failed directory fsync leaves the manifest in place (complete, but its name may not
    // survive a crash). Remove it, so that a commit that failed never reads as committed.
    (void)spec.fs->unlink(manifest_path);
    return written.status();
  }
  return Status();
}

Result<Manifest> read_manifest(const std::string& step_dir) {
  const std::string path = step_dir + "/" + std::string(kManifestFileName);
  KILN_ASSIGN_OR_RETURN(const std::string bytes,
                        internal::read_file_bounded(path, kManifestBytesMax));
  KILN_ASSIGN_OR_RETURN(Manifest manifest, internal::decode_manifest(bytes, path));
  const size_t slash = step_dir.find_last_not_of('/');
  const std::string trimmed = step_dir.substr(0, slash == std::string::npos ? 0 : slash + 1);
  const int64_t dir_step = parse_step_dir_name(trimmed.substr(trimmed.find_last_of('/') + 1));
  if (dir_step >= 0 && dir_step != manifest.step) {
    return Status::corruption(path + ": records step " + std::to_string(manifest.step) +
                              " but lies in the directory of step " + std::to_string(dir_step));
  }
  return manifest;
}

Status verify_file(const std::string& step_dir, const FileRecord& record) {
  const std::string path = step_dir + "/" + record.name;
  KILN_ASSIGN_OR_RETURN(const FileRecord actual, internal::hash_file(path));
  if (actual.size_bytes != record.size_bytes) {
    return Status::corruption(path + ": size mismatch: manifest says " +
                              std::to_string(record.size_bytes) + " bytes, file has " +
                              std::to_string(actual.size_bytes));
  }
  if (actual.xxh3 != record.xxh3) {
    return Status::corruption(path + ": xxh3 mismatch: manifest says " + checksum_hex(record.xxh3) +
                              ", file hashes to " + checksum_hex(actual.xxh3));
  }
  return Status();
}

Result<SafetensorsFile> load_shard(const std::string& step_dir, const Manifest& manifest,
                                   int rank) {
  if (rank < 0 || rank >= manifest.world) {
    return Status::invalid_argument("rank " + std::to_string(rank) + " is outside the " +
                                    std::to_string(manifest.world) + " ranks of " + step_dir);
  }
  const FileRecord& record = manifest.files[rank];
  KILN_RETURN_IF_ERROR(verify_file(step_dir, record));
  KILN_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(step_dir + "/" + record.name));
  KILN_RETURN_IF_ERROR(check_shard_key(file, internal::kStepKey, manifest.step));
  KILN_RETURN_IF_ERROR(check_shard_key(file, internal::kRankKey, rank));
  KILN_RETURN_IF_ERROR(check_shard_key(file, internal::kWorldKey, manifest.world));
  return file;
}

}  // namespace kiln::ckpt
