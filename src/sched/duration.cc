// Duration parsing for job specs. See include/kiln/sched/duration.h for the grammar.
//
// Exact integer arithmetic throughout (no double): "0.1s" is 100 ms, not 99.99999.
#include <kiln/sched/duration.h>

#include <string>

namespace kiln::sched {
namespace {

// At most this many fraction digits, after trailing zeros are dropped. A 10th significant decimal
// is finer than a millisecond even in hours (1e-10 h = 0.00036 ms), so no accepted text needs
// more; with 9, numerator (< 1e9) times the largest unit (3.6e6 ms) stays far inside int64.
constexpr size_t kFractionDigitsMax = 9;

Status bad(std::string_view text, std::string_view what) {
  return Status::invalid_argument("duration \"" + std::string(text) + "\": " + std::string(what));
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// Milliseconds per `unit`, or 0 for a unit not in the grammar.
int64_t unit_ms(std::string_view unit) {
  if (unit == "ms") return 1;
  if (unit == "s") return 1000;
  if (unit == "m") return 60 * 1000;
  if (unit == "h") return 3600 * 1000;
  return 0;
}

}  // namespace

Result<int64_t> parse_duration_ms(std::string_view text) {
  constexpr std::string_view kHint = "write a number and a unit (ms, s, m or h), e.g. 30s";
  if (text.empty()) return bad(text, std::string("empty; ") + std::string(kHint));
  if (text.front() == '-') return bad(text, "negative; a duration is 0 or more");
  size_t i = 0;
  // The whole part saturates just above the bound: any larger value is "too long" alike.
  int64_t whole = 0;
  for (; i < text.size() && is_digit(text[i]); ++i) {
    if (whole <= kDurationMsMax) whole = whole * 10 + (text[i] - '0');
  }
  if (i == 0) return bad(text, std::string("does not start with a number; ") + std::string(kHint));
  std::string_view fraction;
  if (i < text.size() && text[i] == '.') {
    const size_t start = ++i;
    while (i < text.size() && is_digit(text[i]))
      ++i;
    fraction = text.substr(start, i - start);
    if (fraction.empty()) return bad(text, "no digits after the decimal point");
  }
  const std::string_view unit = text.substr(i);
  if (unit.empty()) return bad(text, std::string("no unit; ") + std::string(kHint));
  const int64_t per_unit_ms = unit_ms(unit);
  if (per_unit_ms == 0) {
    return bad(text, "unknown unit \"" + std::string(unit) + "\" (use ms, s, m or h)");
  }
  while (!fraction.empty() && fraction.back() == '0')
    fraction.remove_suffix(1);
  const std::string too_long =
      "longer than the " + std::to_string(kDurationMsMax) + " ms (365 days) a duration may be";
  if (fraction.size() > kFractionDigitsMax) return bad(text, "finer than a millisecond");
  int64_t numerator = 0;
  int64_t denominator = 1;
  for (char c : fraction) {
    numerator = numerator * 10 + (c - '0');
    denominator *= 10;
  }
  if (numerator * per_unit_ms % denominator != 0) return bad(text, "finer than a millisecond");
  if (whole > kDurationMsMax / per_unit_ms) return bad(text, too_long);
  const int64_t total_ms = whole * per_unit_ms + numerator * per_unit_ms / denominator;
  if (total_ms > kDurationMsMax) return bad(text, too_long);
  return total_ms;
}

}  // namespace kiln::sched
