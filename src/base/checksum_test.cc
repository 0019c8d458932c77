#include <kiln/base/checksum.h>

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace kiln {
namespace {

// Reference digests from `xxhsum -H3` (the xxHash command-line tool), XXH3-64 with seed 0.
TEST(ChecksumTest, MatchesKnownDigests) {
  EXPECT_EQ(xxh3(""), 0x2d06800538d394c2ULL);
  EXPECT_EQ(xxh3("abc"), 0x78af5f94892f3950ULL);
  std::string kiln1000;
  for (int i = 0; i < 1000; ++i)
    kiln1000 += "kiln";
  EXPECT_EQ(xxh3(kiln1000), 0xcca042749e65efa7ULL);
  EXPECT_EQ(checksum_hex(0x2d06800538d394c2ULL), "2d06800538d394c2");
  EXPECT_EQ(checksum_hex(1), "0000000000000001");
}

TEST(ChecksumTest, StreamingEqualsOneShotForAnySplit) {
  std::mt19937 rng(7);
  std::string data(100'003, '\0');
  for (char& c : data)
    c = static_cast<char>(rng());
  const uint64_t expected = xxh3(data);
  for (int trial = 0; trial < 20; ++trial) {
    Xxh3Hasher hasher;
    size_t pos = 0;
    while (pos < data.size()) {
      const size_t n = std::min<size_t>(rng() % 5000, data.size() - pos);
      hasher.update(data.data() + pos, n);
      pos += n;
    }
    EXPECT_EQ(hasher.digest(), expected);
  }
}

TEST(ChecksumTest, ASingleFlippedBitChangesTheDigest) {
  std::string data(4096, 'x');
  const uint64_t before = xxh3(data);
  data[1234] ^= 0x10;
  EXPECT_NE(xxh3(data), before);
}

TEST(ChecksumTest, ResetStartsOver) {
  Xxh3Hasher hasher;
  hasher.update("garbage");
  hasher.reset();
  hasher.update("abc");
  EXPECT_EQ(hasher.digest(), xxh3("abc"));
}

}  // namespace
}  // namespace kiln
