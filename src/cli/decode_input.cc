// The reader of the grammar in decode_input.h: one pass, one position `pos` into the
// text, no recursion.
#include "cli/decode_input.h"

#include <algorithm>
#include <limits>
#include <string>

namespace kiln::cli {
namespace {

// How much of a bad element a message quotes: enough to recognise it, never the whole input.
constexpr size_t kQuoteBytesMax = 32;

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

size_t skip_ws(std::string_view text, size_t pos) {
  while (pos < text.size() && is_ws(text[pos]))
    ++pos;
  return pos;
}

// What the value starting at text[pos] looks like, for "expected an array, not X".
std::string describe_value(std::string_view text, size_t pos) {
  if (pos >= text.size()) return "nothing";
  switch (text[pos]) {
    case '{': return "an object";
    case '"': return "a string";
    case 't':
    case 'f': return "a boolean";
    case 'n': return "null";
    default: break;
  }
  if (text[pos] == '-' || is_digit(text[pos])) return "a number";
  return "'" + std::string(text.substr(pos, 1)) + "'";
}

// The element at text[pos] up to the next ',' or ']' (or kQuoteBytesMax bytes), for messages.
std::string quote_element(std::string_view text, size_t pos) {
  size_t end = pos;
  while (end < text.size() && end - pos < kQuoteBytesMax && text[end] != ',' && text[end] != ']')
    ++end;
  std::string quoted(text.substr(pos, end - pos));
  while (!quoted.empty() && is_ws(quoted.back()))
    quoted.pop_back();
  return quoted.empty() ? describe_value(text, pos) : "'" + quoted + "'";
}

Status bad_element(std::string_view text, size_t pos, size_t index) {
  return Status::invalid_argument(
      "stdin: element " + std::to_string(index) + " (byte " + std::to_string(pos) +
      ") is not a token id (a non-negative integer): " +
      (pos >= text.size() ? std::string("the input ends there") : quote_element(text, pos)));
}

}  // namespace

Result<std::vector<uint32_t>> parse_token_ids(std::string_view text) {
  size_t pos = skip_ws(text, 0);
  if (pos >= text.size() || text[pos] != '[') {
    return Status::invalid_argument("stdin: expected a JSON array of token ids, not " +
                                    describe_value(text, pos));
  }
  pos = skip_ws(text, pos + 1);
  std::vector<uint32_t> ids;
  // One id per comma and one more: reserving that exactly keeps growth from doubling the memory.
  ids.reserve(static_cast<size_t>(std::count(text.begin(), text.end(), ',')) + 1);
  if (pos < text.size() && text[pos] == ']') {
    pos = skip_ws(text, pos + 1);
  } else {
    while (true) {
      const size_t index = ids.size();
      const size_t start = pos;
      if (pos >= text.size() || !is_digit(text[pos])) return bad_element(text, start, index);
      uint64_t id = 0;
      while (pos < text.size() && is_digit(text[pos])) {
        id = id * 10 + static_cast<uint64_t>(text[pos] - '0');
        ++pos;
        if (id > std::numeric_limits<uint32_t>::max()) {
          while (pos < text.size() && is_digit(text[pos]) && pos - start < kQuoteBytesMax)
            ++pos;
          return Status::invalid_argument(
              "token id " + std::string(text.substr(start, pos - start)) +
              (pos < text.size() && is_digit(text[pos]) ? "..." : "") + " at index " +
              std::to_string(index) + " is out of range");
        }
      }
      // JSON has no leading zeros, and a fraction or exponent makes a number that is no id.
      const bool leading_zero = text[start] == '0' && pos - start > 1;
      if (leading_zero ||
          (pos < text.size() && (text[pos] == '.' || text[pos] == 'e' || text[pos] == 'E'))) {
        return bad_element(text, start, index);
      }
      ids.push_back(static_cast<uint32_t>(id));
      pos = skip_ws(text, pos);
      if (pos < text.size() && text[pos] == ',') {
        pos = skip_ws(text, pos + 1);
        continue;
      }
      if (pos < text.size() && text[pos] == ']') {
        pos = skip_ws(text, pos + 1);
        break;
      }
      if (pos >= text.size()) {
        return Status::invalid_argument("stdin: the array ends without ']' after element " +
                                        std::to_string(index) + " (truncated input?)");
      }
      return Status::invalid_argument("stdin: byte " + std::to_string(pos) +
                                      ": expected ',' or ']' after element " +
                                      std::to_string(index) + ", got " + describe_value(text, pos));
    }
  }
  if (pos != text.size()) {
    return Status::invalid_argument("stdin: byte " + std::to_string(pos) +
                                    ": unexpected bytes after the array");
  }
  return ids;
}

}  // namespace kiln::cli
