// The manifest's encoding and its checks. See manifest.h for the grammar.
#include "ckpt/manifest.h"

#include <kiln/base/check.h>
#include <kiln/base/checksum.h>
#include <kiln/base/json.h>

#include <limits>

#include <nlohmann/json.hpp>

namespace kiln::ckpt::internal {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kPrefixHead = R"({"manifest_xxh3":")";
constexpr size_t kHexDigits = 16;  // a u64 in hex
constexpr std::string_view kPrefixTail = R"(","body":)";
constexpr std::string_view kSuffix = "}\n";
constexpr size_t kPrefixBytes = kPrefixHead.size() + kHexDigits + kPrefixTail.size();

// The field `key` of `object` when it has `type`; null otherwise.
const Json* field(const Json& object, const char* key, Json::value_t type) {
  auto it = object.find(key);
  // Non-negative integers parse as number_unsigned, so a negative step or size is refused.
  if (it == object.end() || it->type() != type) return nullptr;
  return &*it;
}

Result<uint64_t> unsigned_field(const Json& object, const char* key, const std::string& where) {
  const Json* v = field(object, key, Json::value_t::number_unsigned);
  if (v == nullptr) return Status::corruption(where + ": '" + key + "' is not an unsigned number");
  return v->get<uint64_t>();
}

Result<std::string> string_field(const Json& object, const char* key, const std::string& where) {
  const Json* v = field(object, key, Json::value_t::string);
  if (v == nullptr) return Status::corruption(where + ": '" + key + "' is not a string");
  return v->get<std::string>();
}

Result<FileRecord> decode_file(const Json& entry, int rank, int world, const std::string& where) {
  const std::string at = where + ": files[" + std::to_string(rank) + "]";
  if (!entry.is_object()) return Status::corruption(at + " is not an object");
  KILN_ASSIGN_OR_RETURN(const uint64_t entry_rank, unsigned_field(entry, "rank", at));
  if (entry_rank != static_cast<uint64_t>(rank)) {
    return Status::corruption(at + ": rank is " + std::to_string(entry_rank));
  }
  FileRecord record;
  KILN_ASSIGN_OR_RETURN(record.name, string_field(entry, "name", at));
  if (record.name != shard_file_name(rank, world)) {
    return Status::corruption(at + ": name '" + record.name + "' is not rank " +
                              std::to_string(rank) + "'s shard");
  }
  KILN_ASSIGN_OR_RETURN(record.size_bytes, unsigned_field(entry, "size_bytes", at));
  KILN_ASSIGN_OR_RETURN(const std::string hex, string_field(entry, "xxh3", at));
  if (!parse_hex16(hex, &record.xxh3)) {
    return Status::corruption(at + ": xxh3 '" + hex + "' is not 16 hex digits");
  }
  return record;
}

Result<Manifest> decode_body(const Json& body, const std::string& where) {
  if (!body.is_object()) return Status::corruption(where + ": body is not a JSON object");
  KILN_ASSIGN_OR_RETURN(const std::string format, string_field(body, "format", where));
  if (format != kManifestFormat) {
    return Status::corruption(where + ": format '" + format + "' is not '" +
                              std::string(kManifestFormat) + "'");
  }
  KILN_ASSIGN_OR_RETURN(const uint64_t version, unsigned_field(body, "version", where));
  if (version != static_cast<uint64_t>(kManifestVersion)) {
    return Status::not_supported(where + ": manifest version " + std::to_string(version) +
                                 "; this build reads version " + std::to_string(kManifestVersion));
  }
  Manifest m;
  KILN_ASSIGN_OR_RETURN(const uint64_t step, unsigned_field(body, "step", where));
  KILN_ASSIGN_OR_RETURN(const uint64_t world, unsigned_field(body, "world_size", where));
  if (step > static_cast<uint64_t>(kStepMax) || world < 1 ||
      world > static_cast<uint64_t>(kWorldSizeMax)) {
    return Status::corruption(where + ": step " + std::to_string(step) + " or world_size " +
                              std::to_string(world) + " out of range");
  }
  m.step = static_cast<int64_t>(step);
  m.world = static_cast<int>(world);
  KILN_ASSIGN_OR_RETURN(m.created_utc, string_field(body, "created_utc", where));
  KILN_ASSIGN_OR_RETURN(m.total_bytes, unsigned_field(body, "total_bytes", where));
  const Json* files = field(body, "files", Json::value_t::array);
  if (files == nullptr || files->size() != world) {
    return Status::corruption(where + ": 'files' is not an array of world_size (" +
                              std::to_string(world) + ") entries");
  }
  uint64_t sum = 0;
  for (int r = 0; r < m.world; ++r) {
    KILN_ASSIGN_OR_RETURN(FileRecord record, decode_file((*files)[r], r, m.world, where));
    if (record.size_bytes > std::numeric_limits<uint64_t>::max() - sum) {
      return Status::corruption(where + ": files' size_bytes overflow 64 bits at files[" +
                                std::to_string(r) + "]");
    }
    sum += record.size_bytes;
    m.files.push_back(std::move(record));
  }
  if (sum != m.total_bytes) {
    return Status::corruption(where + ": total_bytes " + std::to_string(m.total_bytes) +
                              " is not the files' sum " + std::to_string(sum));
  }
  const Json* metadata = field(body, "metadata", Json::value_t::object);
  if (metadata == nullptr) return Status::corruption(where + ": 'metadata' is not an object");
  m.metadata_json = metadata->dump();
  return m;
}

}  // namespace

bool parse_hex16(std::string_view hex, uint64_t* value) {
  if (hex.size() != kHexDigits) return false;
  uint64_t v = 0;
  for (char c : hex) {
    int digit;
    if (c >= '0' && c <= '9')
      digit = c - '0';
    else if (c >= 'a' && c <= 'f')
      digit = c - 'a' + 10;
    else
      return false;
    v = (v << 4) | static_cast<uint64_t>(digit);
  }
  *value = v;
  return true;
}

std::string encode_manifest(const Manifest& manifest) {
  Json metadata = Json::parse(manifest.metadata_json, nullptr, false);
  KILN_CHECK(metadata.is_object()) << "manifest metadata must be a JSON object (commit checks it)";
  Json body = Json::object();
  body["format"] = kManifestFormat;
  body["version"] = kManifestVersion;
  body["step"] = manifest.step;
  body["world_size"] = manifest.world;
  body["created_utc"] = manifest.created_utc;
  body["total_bytes"] = manifest.total_bytes;
  body["files"] = Json::array();
  for (size_t r = 0; r < manifest.files.size(); ++r) {
    const FileRecord& f = manifest.files[r];
    Json entry = Json::object();
    entry["rank"] = r;
    entry["name"] = f.name;
    entry["size_bytes"] = f.size_bytes;
    entry["xxh3"] = checksum_hex(f.xxh3);
    body["files"].push_back(std::move(entry));
  }
  body["metadata"] = std::move(metadata);
  const std::string body_text = body.dump();
  std::string out;
  out.reserve(kPrefixBytes + body_text.size() + kSuffix.size());
  out += kPrefixHead;
  out += checksum_hex(xxh3(body_text));
  out += kPrefixTail;
  out += body_text;
  out += kSuffix;
  return out;
}

Result<Manifest> decode_manifest(std::string_view bytes, const std::string& path) {
  if (bytes.size() < kPrefixBytes + kSuffix.size() || !bytes.starts_with(kPrefixHead) ||
      bytes.substr(kPrefixHead.size() + kHexDigits, kPrefixTail.size()) != kPrefixTail ||
      !bytes.ends_with(kSuffix)) {
    return Status::corruption(path + ": not a kiln manifest (" + std::to_string(bytes.size()) +
                              " bytes; truncated or overwritten?)");
  }
  uint64_t recorded = 0;
  if (!parse_hex16(bytes.substr(kPrefixHead.size(), kHexDigits), &recorded)) {
    return Status::corruption(path + ": manifest_xxh3 is not 16 hex digits");
  }
  const std::string_view body =
      bytes.substr(kPrefixBytes, bytes.size() - kPrefixBytes - kSuffix.size());
  const uint64_t computed = xxh3(body);
  if (computed != recorded) {
    return Status::corruption(path + ": manifest checksum mismatch: recorded " +
                              checksum_hex(recorded) + ", body hashes to " +
                              checksum_hex(computed));
  }
  KILN_ASSIGN_OR_RETURN(const Json parsed,
                        parse_json_bounded<Json>(body, {kManifestBytesMax, kManifestDepthMax},
                                                 path + ": body", StatusCode::kCorruption));
  return decode_body(parsed, path);
}

}  // namespace kiln::ckpt::internal
