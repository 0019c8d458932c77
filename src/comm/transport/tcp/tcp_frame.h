// The framing of the TCP transport. Every message on a connection is one frame:
//
//   frame   := header payload
//   header  := magic u32 ("KLNF" = 0x464e4c4b little-endian) | kind u8 | reserved u8[3] (zero) |
//              tag u32 | bytes u32                                          (16 bytes, LE)
//   payload := bytes × u8
//   kind    := 1 (data: one Link message) | 2 (abort: the sender stops; payload is the reason,
//              UTF-8, at most kAbortReasonBytesMax; tag is 1 + the rank the failure points at,
//              or 0)
//
// Frames carry no checksum: TCP's covers the wire, and both ends are authenticated (auth.h).
// The decoder rejects anything else: a wrong magic (a stray or hostile connection, or a peer of
// another version), an unknown kind, non-zero reserved bytes, or a length over the limit.
#ifndef KILN_COMM_TRANSPORT_TCP_TCP_FRAME_H_
#define KILN_COMM_TRANSPORT_TCP_TCP_FRAME_H_

#include <cstddef>
#include <cstdint>

#include <kiln/base/result.h>

namespace kiln::comm {

inline constexpr size_t kFrameHeaderBytes = 16;
inline constexpr uint32_t kFrameMagic = 0x464e4c4b;  // "KLNF"
inline constexpr uint32_t kAbortReasonBytesMax = 1024;

enum class FrameKind : uint8_t { kData = 1, kAbort = 2 };

struct FrameHeader {
  FrameKind kind = FrameKind::kData;
  uint32_t tag = 0;
  uint32_t bytes = 0;
};

void encode_frame_header(const FrameHeader& header, uint8_t out[kFrameHeaderBytes]);

// Decodes and validates a header. `data_bytes_max` bounds data frames (the link's message size).
Result<FrameHeader> decode_frame_header(const uint8_t* data, size_t size, uint32_t data_bytes_max);

}  // namespace kiln::comm

#endif  // KILN_COMM_TRANSPORT_TCP_TCP_FRAME_H_
