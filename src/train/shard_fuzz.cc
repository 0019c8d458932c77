// libFuzzer target for the token shard reader (read_shard), built by kiln_fuzz_target
// (KilnFuzz.cmake). Data directories come from users, so every byte of a shard is untrusted.
//
// read_shard takes a path, so each input is written to one temporary file first. Whatever reads
// must hold exactly the header's token count, and the bytes must re-encode to the very input.
// Refusals must be kCorruption. A violation is a KILN_CHECK failure, recorded as a crash.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <kiln/base/check.h>
#include <kiln/train/shard.h>

namespace {

std::string read_back(const std::string& path) {
  std::string bytes;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  KILN_CHECK(f != nullptr) << path;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0)
    bytes.append(buf, n);
  std::fclose(f);
  return bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/kiln_shard_fuzz_" + std::to_string(::getpid()) + ".bin";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  KILN_CHECK(f != nullptr) << path;
  KILN_CHECK_EQ(std::fwrite(data, 1, size, f), size);
  KILN_CHECK_EQ(std::fclose(f), 0);
  std::vector<uint16_t> tokens = {7};  // read_shard appends; what was there must stay
  const kiln::Status s = kiln::train::read_shard(path, &tokens);
  if (!s.ok()) {
    KILN_CHECK(s.is_corruption()) << s.to_string();
    KILN_CHECK(tokens.size() == 1 && tokens[0] == 7) << "a refused shard left tokens behind";
    return 0;
  }
  KILN_CHECK_EQ((tokens.size() - 1) * 2 + kiln::train::kShardHeaderBytes, size);
  const std::string again = path + ".again";
  KILN_CHECK(kiln::train::write_shard(again, std::span(tokens).subspan(1)).ok());
  KILN_CHECK(read_back(again) == std::string(reinterpret_cast<const char*>(data), size))
      << "a shard re-encodes differently";
  std::remove(again.c_str());
  return 0;
}
