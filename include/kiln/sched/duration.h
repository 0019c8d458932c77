// Durations as people write them in job specs: a non-negative decimal number and a unit, with no
// space between ("500ms", "2s", "1.5s", "5m", "1h").
//
//   duration := digits [ "." digits ] unit
//   unit     := "ms" | "s" | "m" | "h"
//
// The result is a whole number of milliseconds: a fraction finer than that ("1.5ms") is an error,
// not rounded, so what is written is what is used. A bare number ("60") is an error too: its unit
// would be a guess.
#ifndef KILN_SCHED_DURATION_H_
#define KILN_SCHED_DURATION_H_

#include <cstdint>
#include <string_view>

#include <kiln/base/result.h>

namespace kiln::sched {

// The longest duration accepted: 365 days. A job's timeouts and backoffs are seconds to hours;
// the bound keeps every later sum (now + timeout, backoff doubled) far from int64 overflow.
inline constexpr int64_t kDurationMsMax = int64_t{365} * 24 * 3600 * 1000;

// Parses `text` (grammar above) into milliseconds in [0, kDurationMsMax].
// kInvalidArgument quoting `text` and saying what is wrong: empty, negative, no unit, an unknown
// unit, finer than a millisecond, or longer than kDurationMsMax.
Result<int64_t> parse_duration_ms(std::string_view text);

}  // namespace kiln::sched

#endif  // KILN_SCHED_DURATION_H_
