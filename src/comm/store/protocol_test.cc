// Tests of the store's frames: round trips of every message, the exact bytes of one frame (so
// the grammar in protocol.cc and docs/store.md cannot drift), and rejection of malformed input.
#include "comm/store/protocol.h"

#include <gtest/gtest.h>

#include <random>

namespace kiln::comm::store {
namespace {

std::vector<Request> sample_requests() {
  return {
      set_request("job/7/rank/0", "10.0.0.1:29500"),
      set_request("k", std::string("\0\x01\xff", 3)),
      set_request("empty-value", ""),
      get_request("job/7/rank/1", 60'000),
      wait_request({"a", "b", "c"}, 0),
      wait_request({}, 5),
      add_request("counter", -9'000'000'000),
      cas_request("gen", "1", "2"),
      cas_request("gen", "", "1"),
      delete_request("job/7/rank/0"),
  };
}

Response response(StatusCode code, std::string message, std::string value, int64_t number) {
  Response r;
  r.code = code;
  r.message = std::move(message);
  r.value = std::move(value);
  r.number = number;
  return r;
}

std::string set_frame() {
  return encode_request(set_request("k", "v"));
}

// Overwrites the fixed32 at `offset` of `frame`.
void poke32(std::string* frame, size_t offset, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    (*frame)[offset + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

TEST(ProtocolTest, EveryRequestRoundTrips) {
  for (const Request& req : sample_requests()) {
    const std::string frame = encode_request(req);
    Result<Request> back = decode_request(frame);
    ASSERT_TRUE(back.ok()) << message_type_name(req.type) << ": " << back.status().to_string();
    EXPECT_EQ(*back, req) << message_type_name(req.type);
    EXPECT_EQ(encode_request(*back), frame);
  }
}

TEST(ProtocolTest, ResponsesRoundTrip) {
  const std::vector<Response> samples = {
      Response{},
      response(StatusCode::kOk, "", std::string(kStoreValueBytesMax, 'v'), 0),
      response(StatusCode::kOk, "", "", -1),
      response(StatusCode::kTimeout, "store get: key 'x' not set after 5 ms", "", 0),
      response(StatusCode::kUnavailable, "stopping", "v", 7),
  };
  for (const Response& resp : samples) {
    Result<Response> back = decode_response(encode_response(resp));
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(*back, resp);
  }
}

// The bytes of one frame, spelled out: a change to the format must change this test and the
// grammar it documents.
TEST(ProtocolTest, SetFrameBytesMatchTheGrammar) {
  const std::string expected = std::string(
      "\x10\x00\x00\x00"  // length = 16
      "KLNS"              // magic 0x534e4c4b, little-endian
      "\x01"              // version
      "\x01"              // type SET
      "\x01\x00\x00\x00"  // key length
      "k"
      "\x01\x00\x00\x00"  // value length
      "v",
      20);
  EXPECT_EQ(set_frame(), expected);
}

TEST(ProtocolTest, FrameLengthBounds) {
  std::string prefix(4, '\0');
  poke32(&prefix, 0, 5);
  EXPECT_TRUE(decode_frame_length(prefix).status().is_invalid_argument())
      << "shorter than a header";
  poke32(&prefix, 0, 6);
  EXPECT_TRUE(decode_frame_length(prefix).ok());
  poke32(&prefix, 0, static_cast<uint32_t>(kStoreFrameBytesMax - kFrameLengthBytes));
  EXPECT_TRUE(decode_frame_length(prefix).ok());
  poke32(&prefix, 0, static_cast<uint32_t>(kStoreFrameBytesMax - kFrameLengthBytes + 1));
  EXPECT_TRUE(decode_frame_length(prefix).status().is_invalid_argument());
  poke32(&prefix, 0, 0xffffffff);
  EXPECT_TRUE(decode_frame_length(prefix).status().is_invalid_argument());
}

TEST(ProtocolTest, TheLargestLegalRequestsFit) {
  Request wait = wait_request({}, 1);
  for (size_t i = 0; i < kStoreWaitKeysMax; ++i) {
    std::string key(kStoreKeyBytesMax, 'k');
    key.replace(0, std::to_string(i).size(), std::to_string(i));
    wait.keys.push_back(std::move(key));
  }
  const std::string frame = encode_request(wait);
  EXPECT_EQ(frame.size(), kWaitRequestBytesMax);
  Result<Request> back = decode_request(frame);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->keys.size(), kStoreWaitKeysMax);

  const Request cas =
      cas_request(std::string(kStoreKeyBytesMax, 'k'), std::string(kStoreValueBytesMax, 'e'),
                  std::string(kStoreValueBytesMax, 'd'));
  EXPECT_EQ(encode_request(cas).size(), kCasRequestBytesMax);
  EXPECT_TRUE(decode_request(encode_request(cas)).ok());
}

TEST(ProtocolTest, RejectsBadMagicVersionAndType) {
  std::string f = set_frame();
  f[4] = 'X';
  EXPECT_NE(decode_request(f).status().message().find("bad magic"), std::string::npos);
  f = set_frame();
  f[8] = 2;
  EXPECT_NE(decode_request(f).status().message().find("version 2"), std::string::npos);
  f = set_frame();
  f[9] = 7;
  EXPECT_NE(decode_request(f).status().message().find("unknown type 7"), std::string::npos);
  f = set_frame();
  f[9] = static_cast<char>(MessageType::kResponse);
  EXPECT_TRUE(decode_request(f).status().is_invalid_argument());
  EXPECT_TRUE(decode_response(set_frame()).status().is_invalid_argument());
}

TEST(ProtocolTest, RejectsLengthsThatDisagreeOrOverrun) {
  const std::string good = set_frame();
  EXPECT_TRUE(decode_request("").status().is_invalid_argument());
  EXPECT_TRUE(decode_request(good.substr(0, 3)).status().is_invalid_argument());
  // Every truncation of a valid frame is rejected, and so is any byte more.
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_TRUE(decode_request(good.substr(0, n)).status().is_invalid_argument()) << n;
  }
  std::string longer = good + "x";
  EXPECT_TRUE(decode_request(longer).status().is_invalid_argument());
  // A prefix that agrees with the frame but a payload with a trailing byte.
  poke32(&longer, 0, static_cast<uint32_t>(longer.size() - 4));
  Status s = decode_request(longer).status();
  EXPECT_TRUE(s.is_invalid_argument());
  EXPECT_NE(s.message().find("1 trailing bytes"), std::string::npos) << s.message();
  // A key length that runs past the end.
  std::string overrun = good;
  poke32(&overrun, 10, 1000);
  s = decode_request(overrun).status();
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.message();
}

TEST(ProtocolTest, RejectsOversizedFieldsBeforeReadingThem) {
  std::string f = set_frame();
  poke32(&f, 10, static_cast<uint32_t>(kStoreKeyBytesMax + 1));
  Status s = decode_request(f).status();
  EXPECT_NE(s.message().find("over the limit of 1024"), std::string::npos) << s.message();
  f = set_frame();
  poke32(&f, 15, static_cast<uint32_t>(kStoreValueBytesMax + 1));
  s = decode_request(f).status();
  EXPECT_NE(s.message().find("over the limit of 1048576"), std::string::npos) << s.message();
  // An empty key is not a key.
  f = encode_request(delete_request("k"));
  f.erase(14, 1);
  poke32(&f, 10, 0);
  poke32(&f, 0, static_cast<uint32_t>(f.size() - kFrameLengthBytes));
  s = decode_request(f).status();
  EXPECT_NE(s.message().find("key is empty"), std::string::npos) << s.message();
}

TEST(ProtocolTest, RejectsTooManyWaitKeysWithoutAllocatingForThem) {
  std::string f = encode_request(wait_request({"a"}, 1));
  poke32(&f, 10, static_cast<uint32_t>(kStoreWaitKeysMax + 1));
  Status s = decode_request(f).status();
  EXPECT_NE(s.message().find("over the limit of 4096"), std::string::npos) << s.message();
  // A count within the limit that the frame cannot hold is rejected before any reserve().
  poke32(&f, 10, static_cast<uint32_t>(kStoreWaitKeysMax));
  s = decode_request(f).status();
  EXPECT_NE(s.message().find("cannot fit"), std::string::npos) << s.message();
}

TEST(ProtocolTest, RejectsNegativeTimeoutsAndUnknownCodes) {
  std::string f = encode_request(get_request("k", 1));
  f[f.size() - 1] = '\x80';
  EXPECT_NE(decode_request(f).status().message().find("negative"), std::string::npos);

  std::string r = encode_response({});
  r[10] = 9;  // one past kUnavailable
  EXPECT_NE(decode_response(r).status().message().find("unknown status code 9"), std::string::npos);
  r = encode_response({});
  r[10] = static_cast<char>(StatusCode::kTimeout);  // an error without a message
  EXPECT_TRUE(decode_response(r).status().is_invalid_argument());
}

TEST(ProtocolTest, ErrorResponsesCutLongMessages) {
  const Response resp = error_response(Status::timeout(std::string(1 << 20, 'm')));
  EXPECT_EQ(resp.code, StatusCode::kTimeout);
  EXPECT_EQ(resp.message.size(), kStoreMessageBytesMax);
  EXPECT_TRUE(resp.message.ends_with("(truncated)"));
  EXPECT_TRUE(decode_response(encode_response(resp)).ok());
}

// Random mutations of valid frames: every outcome is a value or kInvalidArgument, and whatever
// decodes re-encodes to the same bytes. (The fuzz target does this at scale; this keeps a quick
// version in every unit-test run.)
TEST(ProtocolTest, MutatedFramesNeverCrashAndStayCanonical) {
  std::mt19937 rng(7);
  std::vector<std::string> frames;
  for (const Request& req : sample_requests())
    frames.push_back(encode_request(req));
  frames.push_back(encode_response(response(StatusCode::kNotFound, "m", "v", 3)));
  int decoded = 0;
  for (int round = 0; round < 20'000; ++round) {
    std::string f = frames[rng() % frames.size()];
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % f.size();
      switch (rng() % 3) {
        case 0: f[at] = static_cast<char>(rng()); break;
        case 1: f.erase(at, 1); break;
        default: f.insert(at, 1, static_cast<char>(rng())); break;
      }
      if (f.empty()) f = "x";
    }
    Result<Request> req = decode_request(f);
    if (req.ok()) {
      ++decoded;
      EXPECT_EQ(encode_request(*req), f);
    } else {
      EXPECT_TRUE(req.status().is_invalid_argument());
    }
    Result<Response> resp = decode_response(f);
    if (resp.ok()) {
      ++decoded;
      EXPECT_EQ(encode_response(*resp), f);
    } else {
      EXPECT_TRUE(resp.status().is_invalid_argument());
    }
  }
  EXPECT_GT(decoded, 0) << "some mutations (e.g. of a value byte) must still decode";
}

}  // namespace
}  // namespace kiln::comm::store
