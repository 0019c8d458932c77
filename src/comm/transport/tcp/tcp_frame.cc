// See tcp_frame.h for the grammar.
#include "comm/transport/tcp/tcp_frame.h"

#include <cstring>
#include <string>

namespace kiln::comm {
namespace {

void put_u32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
  p[2] = static_cast<uint8_t>(v >> 16);
  p[3] = static_cast<uint8_t>(v >> 24);
}

uint32_t get_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

}  // namespace

void encode_frame_header(const FrameHeader& header, uint8_t out[kFrameHeaderBytes]) {
  put_u32(out, kFrameMagic);
  out[4] = static_cast<uint8_t>(header.kind);
  out[5] = out[6] = out[7] = 0;
  put_u32(out + 8, header.tag);
  put_u32(out + 12, header.bytes);
}

Result<FrameHeader> decode_frame_header(const uint8_t* data, size_t size, uint32_t data_bytes_max) {
  if (size != kFrameHeaderBytes) {
    return Status::invalid_argument("frame header has " + std::to_string(size) + " bytes, not " +
                                    std::to_string(kFrameHeaderBytes));
  }
  const uint32_t magic = get_u32(data);
  if (magic != kFrameMagic) {
    return Status::invalid_argument("frame has a bad magic number (not a kiln-comm/1 peer)");
  }
  if (data[5] != 0 || data[6] != 0 || data[7] != 0) {
    return Status::invalid_argument("frame header has non-zero reserved bytes");
  }
  FrameHeader header;
  header.tag = get_u32(data + 8);
  header.bytes = get_u32(data + 12);
  switch (data[4]) {
    case static_cast<uint8_t>(FrameKind::kData):
      header.kind = FrameKind::kData;
      if (header.bytes > data_bytes_max) {
        return Status::invalid_argument("data frame of " + std::to_string(header.bytes) +
                                        " bytes exceeds the limit of " +
                                        std::to_string(data_bytes_max));
      }
      return header;
    case static_cast<uint8_t>(FrameKind::kAbort):
      header.kind = FrameKind::kAbort;
      if (header.bytes > kAbortReasonBytesMax) {
        return Status::invalid_argument("abort frame reason of " + std::to_string(header.bytes) +
                                        " bytes exceeds the limit of " +
                                        std::to_string(kAbortReasonBytesMax));
      }
      return header;
    default: return Status::invalid_argument("frame has unknown kind " + std::to_string(data[4]));
  }
}

}  // namespace kiln::comm
