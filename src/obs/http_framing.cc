// See http_framing.h.
#include "obs/http_framing.h"

#include <cstdint>
#include <optional>

namespace kiln::obs {
namespace {

constexpr std::string_view kHeadEnd = "\r\n\r\n";

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i];
    char y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

// A Content-Length value: decimal digits only; nullopt when malformed or above 2^63 (far above
// any body limit, so the cap only keeps the arithmetic exact).
std::optional<uint64_t> parse_length(std::string_view s) {
  if (s.empty()) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    if (v > (uint64_t{1} << 59)) return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

}  // namespace

Frame frame_request(std::string_view buffer, size_t header_bytes_max, size_t body_bytes_max) {
  Frame frame;
  const size_t end = buffer.substr(0, header_bytes_max).find(kHeadEnd);
  if (end == std::string_view::npos) {
    frame.kind =
        buffer.size() >= header_bytes_max ? FrameKind::kHeadTooLarge : FrameKind::kIncomplete;
    return frame;
  }
  frame.head_bytes = end + kHeadEnd.size();
  // Header lines follow the request line; each is "name: value".
  std::string_view rest = buffer.substr(0, end);
  const size_t first = rest.find("\r\n");
  rest = first == std::string_view::npos ? std::string_view() : rest.substr(first + 2);
  std::optional<uint64_t> length;
  while (!rest.empty()) {
    const size_t eol = rest.find("\r\n");
    const std::string_view line = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 2);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;  // cpp-httplib skips it too
    const std::string_view name = line.substr(0, colon);
    const std::string_view value = trim(line.substr(colon + 1));
    if (iequals(name, "transfer-encoding")) {
      frame.kind = FrameKind::kLengthRequired;
      return frame;
    }
    if (!iequals(name, "content-length")) continue;
    const std::optional<uint64_t> v = parse_length(value);
    if (!v || (length && *length != *v)) {
      frame.kind = FrameKind::kBadLength;
      return frame;
    }
    length = v;
  }
  const uint64_t body = length.value_or(0);
  if (body > body_bytes_max) {
    frame.kind = FrameKind::kComplete;
    frame.body_too_large = true;
    return frame;
  }
  if (buffer.size() - frame.head_bytes < body) return Frame{};
  frame.kind = FrameKind::kComplete;
  frame.body_bytes = static_cast<size_t>(body);
  return frame;
}

void prefer_gzip(std::string* request) {
  constexpr std::string_view kGzipLine = "Accept-Encoding: gzip";
  size_t head_end = request->find(kHeadEnd);
  if (head_end == std::string::npos) return;
  // Header lines start after a CRLF; the request line (first) is never one.
  size_t line = request->find("\r\n");
  while (line != std::string::npos && line < head_end) {
    const size_t start = line + 2;
    const size_t end = request->find("\r\n", start);
    if (end == std::string::npos || end > head_end) break;
    const std::string_view text(request->data() + start, end - start);
    const size_t colon = text.find(':');
    if (text != kGzipLine && colon != std::string_view::npos &&
        iequals(trim(text.substr(0, colon)), "accept-encoding")) {
      std::string value(trim(text.substr(colon + 1)));
      for (char& c : value)
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      const std::string replacement =
          value.find("gzip") != std::string::npos ? "\r\n" + std::string(kGzipLine) : "";
      request->replace(line, end - line, replacement);
      head_end = head_end - (end - line) + replacement.size();
      line += replacement.size();
      continue;
    }
    line = end;
  }
}

}  // namespace kiln::obs
