#include <gtest/gtest.h>

#include <cstring>

#include "comm/transport/tcp/tcp_frame.h"

namespace kiln::comm {
namespace {

TEST(TcpFrameTest, EncodesTheDocumentedBytes) {
  uint8_t h[kFrameHeaderBytes];
  encode_frame_header({FrameKind::kData, 0x01020304, 0x0a0b0c0d}, h);
  const uint8_t want[kFrameHeaderBytes] = {'K',  'L',  'N',  'F',  1,    0,    0,    0,
                                           0x04, 0x03, 0x02, 0x01, 0x0d, 0x0c, 0x0b, 0x0a};
  EXPECT_EQ(std::memcmp(h, want, sizeof(want)), 0);
  Result<FrameHeader> back = decode_frame_header(h, sizeof(h), 0x10000000);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->tag, 0x01020304u);
  EXPECT_EQ(back->bytes, 0x0a0b0c0du);
}

TEST(TcpFrameTest, RejectsEverythingMalformed) {
  uint8_t h[kFrameHeaderBytes];
  encode_frame_header({FrameKind::kData, 7, 100}, h);
  EXPECT_TRUE(decode_frame_header(h, sizeof(h), 100).ok());
  EXPECT_TRUE(decode_frame_header(h, sizeof(h), 99).status().is_invalid_argument());  // too long
  EXPECT_TRUE(decode_frame_header(h, sizeof(h) - 1, 100).status().is_invalid_argument());
  uint8_t bad[kFrameHeaderBytes];
  std::memcpy(bad, h, sizeof(h));
  bad[0] = 'X';
  EXPECT_NE(decode_frame_header(bad, sizeof(bad), 100).status().message().find("magic"),
            std::string::npos);
  std::memcpy(bad, h, sizeof(h));
  bad[4] = 9;
  EXPECT_NE(decode_frame_header(bad, sizeof(bad), 100).status().message().find("unknown kind"),
            std::string::npos);
  std::memcpy(bad, h, sizeof(h));
  bad[6] = 1;
  EXPECT_NE(decode_frame_header(bad, sizeof(bad), 100).status().message().find("reserved"),
            std::string::npos);
  encode_frame_header({FrameKind::kAbort, 0, kAbortReasonBytesMax + 1}, bad);
  EXPECT_TRUE(decode_frame_header(bad, sizeof(bad), UINT32_MAX).status().is_invalid_argument());
}

}  // namespace
}  // namespace kiln::comm
