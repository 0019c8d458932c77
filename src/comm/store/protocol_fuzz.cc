// libFuzzer target for the store's frame decoders, built by kiln_fuzz_target (KilnFuzz.cmake).
//
// Feeds arbitrary bytes to decode_frame_length, decode_request and decode_response, both as a
// whole frame and as a body behind a correct length prefix. Whatever decodes must re-encode to
// exactly the input bytes and decode again to an equal value: the decoders accept only canonical
// frames. A violation is a KILN_CHECK failure, which aborts, and libFuzzer records the input as a
// crash; so does any sanitizer report.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "comm/store/protocol.h"

namespace {

using kiln::comm::store::decode_frame_length;
using kiln::comm::store::decode_request;
using kiln::comm::store::decode_response;
using kiln::comm::store::encode_request;
using kiln::comm::store::encode_response;
using kiln::comm::store::kFrameLengthBytes;
using kiln::comm::store::kStoreFrameBytesMax;

void check_request(std::string_view bytes) {
  kiln::Result<kiln::comm::store::Request> req = decode_request(bytes);
  if (!req.ok()) {
    KILN_CHECK(req.status().is_invalid_argument()) << req.status().to_string();
    return;
  }
  const std::string again = encode_request(*req);
  KILN_CHECK(again == bytes) << "a request re-encodes differently";
  kiln::Result<kiln::comm::store::Request> twice = decode_request(again);
  KILN_CHECK(twice.ok() && *twice == *req) << "a request does not survive a round trip";
}

void check_response(std::string_view bytes) {
  kiln::Result<kiln::comm::store::Response> resp = decode_response(bytes);
  if (!resp.ok()) {
    KILN_CHECK(resp.status().is_invalid_argument()) << resp.status().to_string();
    return;
  }
  const std::string again = encode_response(*resp);
  KILN_CHECK(again == bytes) << "a response re-encodes differently";
  kiln::Result<kiln::comm::store::Response> twice = decode_response(again);
  KILN_CHECK(twice.ok() && *twice == *resp) << "a response does not survive a round trip";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (size >= kFrameLengthBytes) {
    kiln::Result<size_t> length = decode_frame_length(bytes.substr(0, kFrameLengthBytes));
    KILN_CHECK(!length.ok() || *length + kFrameLengthBytes <= kStoreFrameBytesMax);
  }
  // The input as a whole frame, length prefix and all.
  check_request(bytes);
  check_response(bytes);
  // The input as a body behind a correct prefix: most mutations break the prefix, and this
  // lets them reach the payload decoders anyway.
  std::string framed;
  framed.reserve(kFrameLengthBytes + size);
  for (int i = 0; i < 4; ++i)
    framed.push_back(static_cast<char>((size >> (8 * i)) & 0xff));
  framed.append(bytes);
  check_request(framed);
  check_response(framed);
  return 0;
}
