// libFuzzer target for the TCP transport's frame header decoder (tcp_frame.h): arbitrary bytes
// must be rejected or accepted without crashing, and what is accepted must re-encode to the same
// bytes (the decoder accepts only canonical headers).
#include <cstdint>
#include <cstring>

#include "comm/transport/tcp/tcp_frame.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln::comm;
  // The first four bytes (if any) choose the data-frame limit, so limits vary too.
  uint32_t limit = 1 << 20;
  if (size >= 4) {
    std::memcpy(&limit, data, 4);
    data += 4;
    size -= 4;
  }
  kiln::Result<FrameHeader> header = decode_frame_header(data, size, limit);
  if (!header.ok()) return 0;
  if (size != kFrameHeaderBytes) __builtin_trap();  // only whole headers decode
  uint8_t again[kFrameHeaderBytes];
  encode_frame_header(*header, again);
  if (std::memcmp(again, data, kFrameHeaderBytes) != 0) __builtin_trap();
  if (header->kind == FrameKind::kData && header->bytes > limit) __builtin_trap();
  if (header->kind == FrameKind::kAbort && header->bytes > kAbortReasonBytesMax) __builtin_trap();
  return 0;
}
