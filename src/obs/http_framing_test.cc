#include "obs/http_framing.h"

#include <gtest/gtest.h>

#include <string>

namespace kiln::obs {
namespace {

constexpr size_t kHead = 1024;
constexpr size_t kBody = 100;

TEST(HttpFramingTest, AHeadWithoutBodyEndsAtTheBlankLine) {
  const std::string req = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /next";
  const Frame f = frame_request(req, kHead, kBody);
  EXPECT_EQ(f.kind, FrameKind::kComplete);
  EXPECT_EQ(f.head_bytes, req.find("GET /next"));
  EXPECT_EQ(f.body_bytes, 0u);
}

TEST(HttpFramingTest, ABodyIsWaitedForUpToContentLength) {
  const std::string head = "POST /x HTTP/1.1\r\ncontent-LENGTH:  5 \r\n\r\n";
  EXPECT_EQ(frame_request(head + "abc", kHead, kBody).kind, FrameKind::kIncomplete);
  const Frame f = frame_request(head + "abcdeXYZ", kHead, kBody);
  EXPECT_EQ(f.kind, FrameKind::kComplete);
  EXPECT_EQ(f.head_bytes, head.size());
  EXPECT_EQ(f.body_bytes, 5u);
}

TEST(HttpFramingTest, PartialHeadsAreIncompleteUntilTheLimit) {
  EXPECT_EQ(frame_request("GET / HTTP/1.1\r\nHost", kHead, kBody).kind, FrameKind::kIncomplete);
  EXPECT_EQ(frame_request("", kHead, kBody).kind, FrameKind::kIncomplete);
  EXPECT_EQ(frame_request(std::string(kHead, 'a'), kHead, kBody).kind, FrameKind::kHeadTooLarge);
}

TEST(HttpFramingTest, RefusesWhatItCannotFrame) {
  EXPECT_EQ(frame_request("POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", kHead, kBody).kind,
            FrameKind::kBadLength);
  EXPECT_EQ(frame_request("POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                          kHead, kBody)
                .kind,
            FrameKind::kBadLength);
  EXPECT_EQ(frame_request("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
                          kHead, kBody)
                .kind,
            FrameKind::kBadLength);
  EXPECT_EQ(
      frame_request("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", kHead, kBody).kind,
      FrameKind::kLengthRequired);
}

TEST(HttpFramingTest, ABodyOverTheLimitHandsOnTheHeadAlone) {
  const std::string head = "POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n";
  const Frame f = frame_request(head, kHead, kBody);
  EXPECT_EQ(f.kind, FrameKind::kComplete);
  EXPECT_TRUE(f.body_too_large);
  EXPECT_EQ(f.head_bytes, head.size());
  EXPECT_EQ(f.body_bytes, 0u);
}

TEST(HttpFramingTest, BrotliIsNeverOfferedOnGzipIs) {
  std::string chromium =
      "GET /v1/jobs HTTP/1.1\r\nHost: x\r\naccept-encoding: gzip, deflate, br, zstd\r\n"
      "Accept: */*\r\n\r\n";
  prefer_gzip(&chromium);
  EXPECT_EQ(chromium,
            "GET /v1/jobs HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\nAccept: */*\r\n\r\n");
  std::string br_only = "GET / HTTP/1.1\r\nAccept-Encoding: br\r\nAccept-Encoding: br\r\n\r\nbody";
  prefer_gzip(&br_only);
  EXPECT_EQ(br_only, "GET / HTTP/1.1\r\n\r\nbody");
  std::string plain = "GET / HTTP/1.1\r\nHost: x\r\n\r\nAccept-Encoding: br";  // in the body
  const std::string before = plain;
  prefer_gzip(&plain);
  EXPECT_EQ(plain, before);
  std::string cut = "GET / HTTP/1.1\r\nAccept-Encoding: br";  // no end of head: untouched
  prefer_gzip(&cut);
  EXPECT_EQ(cut, "GET / HTTP/1.1\r\nAccept-Encoding: br");
}

}  // namespace
}  // namespace kiln::obs
