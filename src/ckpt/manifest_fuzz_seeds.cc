// Seeds for fuzz/manifest: real bodies written by encode_manifest (one and three ranks, nested
// metadata), as the fuzzer expects them: the body alone, without the checksummed prefix.
#include <cstdio>
#include <string>

#include <kiln/base/checksum.h>

#include "ckpt/manifest.h"

namespace {

// The body of an encoded manifest: what lies between the prefix and the closing "}\n".
std::string body_of(const std::string& manifest) {
  const size_t start = manifest.find(R"(","body":)") + std::string(R"(","body":)").size();
  return manifest.substr(start, manifest.size() - start - 2);
}

bool write(const std::string& path, const std::string& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return std::fclose(f) == 0 && ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string dir = argv[1];
  kiln::ckpt::Manifest one;
  one.step = 200;
  one.world = 1;
  one.created_utc = "2026-12-01T20:00:00Z";
  one.files = {{kiln::ckpt::shard_file_name(0, 1), 4096, 0x0123456789abcdefull}};
  one.total_bytes = 4096;
  one.metadata_json = R"({"loader":{"epoch":1,"window":7},"rng":[1,2,3]})";
  kiln::ckpt::Manifest three = one;
  three.world = 3;
  three.files.clear();
  three.total_bytes = 0;
  for (int r = 0; r < 3; ++r) {
    three.files.push_back({kiln::ckpt::shard_file_name(r, 3), 100u + r, 42u + r});
    three.total_bytes += 100u + r;
  }
  three.metadata_json = "{}";
  const bool ok =
      write(dir + "/one_rank", body_of(kiln::ckpt::internal::encode_manifest(one))) &&
      write(dir + "/three_ranks", body_of(kiln::ckpt::internal::encode_manifest(three)));
  return ok ? 0 : 1;
}
