// The manifest decoder against hostile bodies with valid checksums (issue 10): nesting that
// overflowed the stack, and sizes whose sum wraps past 2^64.
#include "ckpt/manifest.h"

#include <kiln/base/checksum.h>

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kiln::ckpt::internal {
namespace {

using ::testing::HasSubstr;

// A manifest around `body` whose checksum is right, so only the body's content is judged.
std::string with_checksum(const std::string& body) {
  return R"({"manifest_xxh3":")" + checksum_hex(xxh3(body)) + R"(","body":)" + body + "}\n";
}

// A one- or two-rank body with the given sizes, total and metadata text.
std::string body_of(const std::vector<std::string>& sizes, const std::string& total,
                    const std::string& metadata) {
  const std::string world = std::to_string(sizes.size());
  std::string files;
  for (size_t r = 0; r < sizes.size(); ++r) {
    files += (r == 0 ? "" : ",") + std::string(R"({"rank":)") + std::to_string(r) +
             R"(,"name":"rank_0000)" + std::to_string(r) + "_of_0000" + world +
             R"(.safetensors","size_bytes":)" + sizes[r] + R"(,"xxh3":"0123456789abcdef"})";
  }
  return R"({"format":"kiln-checkpoint","version":1,"step":5,"world_size":)" + world +
         R"(,"created_utc":"2026-12-01T00:00:00Z","total_bytes":)" + total + R"(,"files":[)" +
         files + R"(],"metadata":)" + metadata + "}";
}

TEST(DecodeManifestTest, AWellFormedBodyDecodes) {
  Result<Manifest> m = decode_manifest(with_checksum(body_of({"10", "20"}, "30", R"({"a":[1]})")),
                                       "d/manifest.json");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->total_bytes, 30u);
  EXPECT_EQ(m->metadata_json, R"({"a":[1]})");
}

TEST(DecodeManifestTest, DeeplyNestedMetadataIsCorruptionNamingTheFile) {
  // 200,000 levels (400 KB): the dump of the metadata overflowed the stack (SIGSEGV).
  const std::string deep = "{\"x\":" + std::string(200'000, '[') + std::string(200'000, ']') + "}";
  Result<Manifest> m = decode_manifest(with_checksum(body_of({"1"}, "1", deep)), "d/manifest.json");
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(m.status().is_corruption()) << m.status().to_string();
  EXPECT_THAT(m.status().message(),
              HasSubstr("d/manifest.json: body: JSON nested more than 64 levels deep"));
}

TEST(DecodeManifestTest, SizesWhoseSumOverflowsAreCorruptionNamingTheFile) {
  // 2^63 + (2^63 + 5) wraps to 5, which equalled total_bytes: the step was listed complete.
  Result<Manifest> m = decode_manifest(
      with_checksum(body_of({"9223372036854775808", "9223372036854775813"}, "5", "{}")),
      "d/manifest.json");
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(m.status().is_corruption());
  EXPECT_THAT(m.status().message(),
              HasSubstr("d/manifest.json: files' size_bytes overflow 64 bits at files[1]"));
}

}  // namespace
}  // namespace kiln::ckpt::internal
