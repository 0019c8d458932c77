// Bounded JSON parsing: every JSON text that comes from a file or a peer goes through
// parse_json_bounded(), which checks its size and nesting depth before nlohmann::json builds a
// tree of it.
//
// Why: nlohmann's parser is iterative, but copying, dumping and comparing a value recurse once per
// level, so a 400 KB text of 200,000 nested '[' overflows the stack in the first dump(). A tree
// also takes about 16 bytes a value plus container overhead (a 2-byte "0," becomes 16-80 bytes),
// so the byte bound is what bounds the memory: pick it for what the text can honestly hold.
//
// Not for this helper: streams of numbers (kiln decode reads its input with its own reader, in
// memory linear in the input and without a tree).
#ifndef KILN_BASE_JSON_H_
#define KILN_BASE_JSON_H_

#include <cstddef>
#include <string>
#include <string_view>

#include <kiln/base/result.h>
#include <kiln/base/status.h>

#include <nlohmann/json.hpp>

namespace kiln {

// The limits a JSON text is checked against; both must be set (zero admits nothing).
struct JsonLimits {
  size_t bytes_max = 0;  // the whole text
  int depth_max = 0;     // arrays and objects inside one another; a scalar alone is depth 0
};

// A deep-enough default for metadata documents: real ones nest 2 to 4 levels.
inline constexpr int kJsonDepthMaxDefault = 64;

// OK iff `text` is at most limits.bytes_max bytes and its arrays and objects nest at most
// limits.depth_max deep. Reads the text once, builds nothing, uses O(1) memory. Brackets inside
// strings (escapes included) do not count. Text that is not JSON may pass; the parser refuses it.
// Otherwise a Status of `code` naming `what`, the limit and, for depth, the byte offset.
Status check_json_bounds(std::string_view text, const JsonLimits& limits, std::string_view what,
                         StatusCode code = StatusCode::kInvalidArgument);

// Parses `text` into a Json (nlohmann::json or nlohmann::ordered_json) after check_json_bounds().
// A syntax error is a Status of `code` naming `what` and nlohmann's byte position. Never throws.
template <typename Json = nlohmann::json>
Result<Json> parse_json_bounded(std::string_view text, const JsonLimits& limits,
                                std::string_view what,
                                StatusCode code = StatusCode::kInvalidArgument) {
  KILN_RETURN_IF_ERROR(check_json_bounds(text, limits, what, code));
  Json parsed = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    // Parse again only to learn where it failed; the text is known to be small and shallow.
    std::string where = "not valid JSON";
    try {
      const Json again = Json::parse(text.begin(), text.end());
      (void)again;
    } catch (const nlohmann::json::exception& e) {
      where += std::string(" (") + e.what() + ")";
    }
    return Status(code, std::string(what) + ": " + where);
  }
  return parsed;
}

// `text` as valid UTF-8 of at most `max_bytes` bytes: a byte sequence that is not UTF-8 becomes
// U+FFFD, and the cut falls on a character boundary. For text from outside (a program's output)
// that goes into JSON, whose writer throws on invalid UTF-8.
std::string utf8_text(std::string_view text, size_t max_bytes);

}  // namespace kiln

#endif  // KILN_BASE_JSON_H_
