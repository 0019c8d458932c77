// See tcp_frame.h for the grammar.
#include "comm/transport/tcp/tcp_frame.h"

#include <kiln/base/endian.h>

#include <cstring>
#include <string>

namespace kiln::comm {

void encode_frame_header(const FrameHeader& header, uint8_t out[kFrameHeaderBytes]) {
  encode_u32_le(kFrameMagic, out);
  out[4] = static_cast<uint8_t>(header.kind);
  out[5] = out[6] = out[7] = 0;
  encode_u32_le(header.tag, out + 8);
  encode_u32_le(header.bytes, out + 12);
}

Result<FrameHeader> decode_frame_header(const uint8_t* data, size_t size, uint32_t data_bytes_max) {
  if (size != kFrameHeaderBytes) {
    return Status::invalid_argument("frame header has " + std::to_string(size) + " bytes, not " +
                                    std::to_string(kFrameHeaderBytes));
  }
  const uint32_t magic = decode_u32_le(data);
  if (magic != kFrameMagic) {
    return Status::invalid_argument("frame has a bad magic number (not a kiln-comm/1 peer)");
  }
  if (data[5] != 0 || data[6] != 0 || data[7] != 0) {
    return Status::invalid_argument("frame header has non-zero reserved bytes");
  }
  FrameHeader header;
  header.tag = decode_u32_le(data + 8);
  header.bytes = decode_u32_le(data + 12);
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
