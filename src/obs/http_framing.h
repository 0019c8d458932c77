// Framing of HTTP/1.1 requests: where one request ends in the bytes read from a connection.
//
// HttpServer's event loop reads requests without a thread (src/obs/http_server.cc) and hands one
// only when it is complete, so an idle or slow client holds a buffer, never a worker. This file
// only finds the end: the request line and headers up to the blank line, then Content-Length bytes
// of body. It does not interpret the request; cpp-httplib parses the framed bytes.
//
// Grammar of what it accepts (RFC 9112, the subset Kiln's clients send):
//   request  = head body
//   head     = *( line CRLF ) CRLF         ; at most header_bytes_max bytes, CRLF CRLF included
//   body     = Content-Length OCTETs       ; no header: no body
// A Transfer-Encoding header is refused (411): chunked bodies cannot be framed without reading
// them, and no client of Kiln sends one.
#ifndef KILN_OBS_HTTP_FRAMING_H_
#define KILN_OBS_HTTP_FRAMING_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace kiln::obs {

enum class FrameKind {
  kIncomplete,      // more bytes are needed
  kComplete,        // one request: bytes [0, head_bytes + body_bytes)
  kHeadTooLarge,    // no blank line within header_bytes_max: answer 431
  kBadLength,       // Content-Length not a number, or two that differ: answer 400
  kLengthRequired,  // Transfer-Encoding: answer 411
};

struct Frame {
  FrameKind kind = FrameKind::kIncomplete;
  size_t head_bytes = 0;  // request line and headers, the blank line included
  size_t body_bytes = 0;  // the body handed on: 0 when body_too_large
  // Content-Length exceeds body_bytes_max: the head alone is complete, the body is never read,
  // and the connection must close after the answer (cpp-httplib answers 413).
  bool body_too_large = false;
};

// Frames the request at the start of `buffer`. Pure; any input is safe.
Frame frame_request(std::string_view buffer, size_t header_bytes_max, size_t body_bytes_max);

// Rewrites the Accept-Encoding headers in the head of `request` (a complete request as framed):
// one that accepts gzip becomes "gzip", any other is dropped (identity). cpp-httplib, as Debian
// builds it, answers a client that offers brotli with brotli at its slowest quality (11): about
// 1.2 s of CPU for a 1 MB list of jobs where gzip takes 50 ms (bench/ui/run). Any input is safe.
void prefer_gzip(std::string* request);

}  // namespace kiln::obs

#endif  // KILN_OBS_HTTP_FRAMING_H_
