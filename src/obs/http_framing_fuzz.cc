// libFuzzer target for the HTTP request framing (http_framing.h), built by kiln_fuzz_target.
//
// Feeds arbitrary bytes to frame_request under small and default limits, and checks what it
// claims: a complete frame lies inside the buffer, its head ends with the blank line and fits the
// head limit, its body fits the body limit; a frame never depends on bytes beyond its end (the
// same answer for the buffer cut right after it). A violation is a KILN_CHECK failure; any
// sanitizer report is a crash too.
#include <kiln/base/check.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "obs/http_framing.h"

namespace {

using kiln::obs::Frame;
using kiln::obs::frame_request;
using kiln::obs::FrameKind;

void check(std::string_view bytes, size_t head_max, size_t body_max) {
  const Frame f = frame_request(bytes, head_max, body_max);
  if (f.kind != FrameKind::kComplete) {
    KILN_CHECK_EQ(f.body_bytes, size_t{0});
    return;
  }
  KILN_CHECK_LE(f.head_bytes, head_max);
  KILN_CHECK_LE(f.head_bytes + f.body_bytes, bytes.size());
  KILN_CHECK_LE(f.body_bytes, body_max);
  KILN_CHECK(bytes.substr(0, f.head_bytes).ends_with("\r\n\r\n"));
  if (f.body_too_large) KILN_CHECK_EQ(f.body_bytes, size_t{0});
  const Frame cut = frame_request(bytes.substr(0, f.head_bytes + f.body_bytes), head_max, body_max);
  KILN_CHECK(cut.kind == FrameKind::kComplete && cut.head_bytes == f.head_bytes &&
             cut.body_bytes == f.body_bytes && cut.body_too_large == f.body_too_large);
  // The worker rewrites Accept-Encoding in a framed request: the body must come out unchanged,
  // the head still a head, and a second rewrite must change nothing.
  std::string request(bytes.substr(0, f.head_bytes + f.body_bytes));
  kiln::obs::prefer_gzip(&request);
  KILN_CHECK(request.ends_with(bytes.substr(f.head_bytes, f.body_bytes)));
  const std::string once = request;
  kiln::obs::prefer_gzip(&request);
  KILN_CHECK(request == once);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  check(bytes, 16 * 1024, 1 << 20);
  check(bytes, 64, 16);
  check(bytes, 0, 0);
  return 0;
}
