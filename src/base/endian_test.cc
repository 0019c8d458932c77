#include <kiln/base/endian.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace kiln {
namespace {

// The byte order is pinned byte by byte, so a host-order copy (memcpy of an integer) would pass
// only on a little-endian host and this test says what the formats require everywhere.
TEST(EndianTest, EncodesLeastSignificantByteFirst) {
  unsigned char b16[2];
  encode_u16_le(0x0102, b16);
  EXPECT_EQ(b16[0], 0x02);
  EXPECT_EQ(b16[1], 0x01);

  unsigned char b32[4];
  encode_u32_le(0x01020304u, b32);
  const unsigned char want32[] = {0x04, 0x03, 0x02, 0x01};
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(b32[i], want32[i]) << "byte " << i;

  unsigned char b64[8];
  encode_u64_le(0x0102030405060708ull, b64);
  const unsigned char want64[] = {0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01};
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(b64[i], want64[i]) << "byte " << i;
}

TEST(EndianTest, DecodesLeastSignificantByteFirst) {
  const unsigned char bytes[] = {0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01};
  EXPECT_EQ(decode_u16_le(bytes), 0x0708u);
  EXPECT_EQ(decode_u32_le(bytes), 0x05060708u);
  EXPECT_EQ(decode_u64_le(bytes), 0x0102030405060708ull);
}

TEST(EndianTest, RoundTripsExtremesAtUnalignedAddresses) {
  unsigned char buf[9 + 8];
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{0x80}, ~uint64_t{0}, uint64_t{1} << 63}) {
    encode_u64_le(v, buf + 1);
    EXPECT_EQ(decode_u64_le(buf + 1), v);
    encode_u32_le(static_cast<uint32_t>(v), buf + 3);
    EXPECT_EQ(decode_u32_le(buf + 3), static_cast<uint32_t>(v));
  }
}

TEST(EndianTest, AppendsTheSameBytes) {
  std::string out = "x";
  append_u32_le(&out, 0x01020304u);
  append_u64_le(&out, 0x0102030405060708ull);
  EXPECT_EQ(out, std::string("x\x04\x03\x02\x01\x08\x07\x06\x05\x04\x03\x02\x01", 13));
}

}  // namespace
}  // namespace kiln
