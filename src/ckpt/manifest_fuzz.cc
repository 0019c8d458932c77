// libFuzzer target for the checkpoint manifest's decoder, built by kiln_fuzz_target
// (KilnFuzz.cmake).
//
// The input is the body; the fuzzer wraps it in the manifest's prefix with a correct checksum,
// since a wrong one stops decoding before the JSON and the checks behind it. Whatever decodes
// must satisfy the decoder's own invariants (one record per rank, sizes that sum to the total)
// and re-encode to a manifest that decodes to the same step, files and total. Refusals must be
// kCorruption or kNotSupported. A violation is a KILN_CHECK failure, recorded as a crash.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <kiln/base/check.h>
#include <kiln/base/checksum.h>

#include "ckpt/manifest.h"

namespace {

using kiln::ckpt::Manifest;
using kiln::ckpt::internal::decode_manifest;
using kiln::ckpt::internal::encode_manifest;

std::string with_checksum(std::string_view body) {
  return R"({"manifest_xxh3":")" + kiln::checksum_hex(kiln::xxh3(body)) + R"(","body":)" +
         std::string(body) + "}\n";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  kiln::Result<Manifest> m = decode_manifest(with_checksum(body), "fuzz/manifest.json");
  if (!m.ok()) {
    KILN_CHECK(m.status().is_corruption() || m.status().is_not_supported())
        << m.status().to_string();
    return 0;
  }
  KILN_CHECK_EQ(m->files.size(), static_cast<size_t>(m->world));
  uint64_t sum = 0;
  for (const kiln::ckpt::FileRecord& f : m->files)
    sum += f.size_bytes;
  KILN_CHECK_EQ(sum, m->total_bytes);
  kiln::Result<Manifest> again = decode_manifest(encode_manifest(*m), "fuzz/again.json");
  KILN_CHECK(again.ok()) << again.status().to_string();
  KILN_CHECK(again->step == m->step && again->world == m->world &&
             again->total_bytes == m->total_bytes && again->metadata_json == m->metadata_json)
      << "a manifest does not survive a round trip";
  return 0;
}
