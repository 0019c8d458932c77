// The bounds check of include/kiln/base/json.h: one pass over the text, tracking only whether it
// is inside a string (and after a backslash there) and how deep the brackets are.
#include <kiln/base/json.h>

#include <algorithm>

namespace kiln {

Status check_json_bounds(std::string_view text, const JsonLimits& limits, std::string_view what,
                         StatusCode code) {
  if (text.size() > limits.bytes_max) {
    return Status(code, std::string(what) + ": " + std::to_string(text.size()) +
                            " bytes of JSON, more than the " + std::to_string(limits.bytes_max) +
                            " it may have");
  }
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limits.depth_max) {
        return Status(code, std::string(what) + ": JSON nested more than " +
                                std::to_string(limits.depth_max) + " levels deep (at byte " +
                                std::to_string(i) + ")");
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return Status();
}

std::string utf8_text(std::string_view text, size_t max_bytes) {
  // The JSON writer's replace mode is the validator: what it writes reads back as valid UTF-8.
  using Json = nlohmann::json;
  const std::string escaped = Json(std::string(text.substr(0, std::min(text.size(), max_bytes))))
                                  .dump(-1, ' ', false, Json::error_handler_t::replace);
  std::string out = Json::parse(escaped).get<std::string>();
  if (out.size() <= max_bytes) return out;
  size_t n = max_bytes;  // U+FFFD (3 bytes) may have grown it: cut before a continuation byte
  while (n > 0 && (static_cast<unsigned char>(out[n]) & 0xC0) == 0x80)
    --n;
  out.resize(n);
  return out;
}

}  // namespace kiln
