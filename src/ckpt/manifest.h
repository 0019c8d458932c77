// The manifest file's encoding. Private to kiln_ckpt; docs/ckpt.md has the same grammar.
//
//   manifest.json := '{"manifest_xxh3":"' HEX16 '","body":' BODY '}' '\n'
//   HEX16         := 16 lower-case hex digits, the XXH3-64 of exactly the bytes of BODY
//   BODY          := a compact JSON object:
//     {"format":"kiln-checkpoint","version":1,"step":S,"world_size":W,"created_utc":"RFC 3339",
//      "total_bytes":N,"files":[{"rank":r,"name":"rank_..._of_....safetensors",
//                                "size_bytes":n,"xxh3":"HEX16"}, ... one per rank, in order],
//      "metadata":{the trainer's object}}
//
// The whole file is valid JSON (jq reads it), and the checksum covers the body's bytes as they lie
// in the file, so no re-serialization is involved in checking it. The fixed prefix puts the body
// at a known offset. Invariants a decoder checks: prefix, checksum, suffix, every field's type,
// files.size() == world_size, file i is rank i's shard name, total_bytes is the files' sum (which
// must not overflow 64 bits), and the body nests at most kManifestDepthMax deep (checked before
// the parse, so a hostile body cannot overflow the stack).
#ifndef KILN_CKPT_MANIFEST_H_
#define KILN_CKPT_MANIFEST_H_

#include <string>
#include <string_view>

#include <kiln/base/result.h>
#include <kiln/ckpt/checkpoint.h>

namespace kiln::ckpt::internal {

inline constexpr std::string_view kManifestFormat = "kiln-checkpoint";
inline constexpr int kManifestVersion = 1;
// The body is 3 levels deep (body, files, one file) around the trainer's metadata, which nests 2
// or 3; 64 leaves room for any honest metadata and keeps dump() and copies far from the stack's
// end (200,000 levels overflowed it).
inline constexpr int kManifestDepthMax = 64;

// The file's bytes. REQUIRES: manifest.metadata_json is a JSON object and the files are
// consistent with step and world (commit() checks both first).
std::string encode_manifest(const Manifest& manifest);

// Parses and checks `bytes` read from `path` (named in every error, kCorruption unless noted:
// kNotSupported for a version this build does not read).
Result<Manifest> decode_manifest(std::string_view bytes, const std::string& path);

// "0123456789abcdef" -> value; false when `hex` is not 16 lower-case hex digits.
bool parse_hex16(std::string_view hex, uint64_t* value);

}  // namespace kiln::ckpt::internal

#endif  // KILN_CKPT_MANIFEST_H_
