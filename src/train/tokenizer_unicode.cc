// Character classes and the UTF-8 reader of the GPT-2 pre-split (see tokenizer_unicode.h).
//
// Well-formed UTF-8 is exactly the byte sequences of the Unicode standard's table 3-7:
//
//   U+0000..U+007F     00..7F
//   U+0080..U+07FF     C2..DF  80..BF
//   U+0800..U+0FFF     E0      A0..BF  80..BF
//   U+1000..U+CFFF     E1..EC  80..BF  80..BF
//   U+D000..U+D7FF     ED      80..9F  80..BF
//   U+E000..U+FFFF     EE..EF  80..BF  80..BF
//   U+10000..U+3FFFF   F0      90..BF  80..BF  80..BF
//   U+40000..U+FFFFF   F1..F3  80..BF  80..BF  80..BF
//   U+100000..U+10FFFF F4      80..8F  80..BF  80..BF
//
// Anything else is one invalid byte of class kOther; reading resumes at the next byte.
#include "train/tokenizer_unicode.h"

#include <algorithm>
#include <iterator>

namespace kiln::train::tok {

#include "train/tokenizer_unicode_tables.inc"

namespace {

constexpr Char kInvalidByte = {kOther, 1};

bool is_continuation(unsigned char byte, unsigned char low = 0x80, unsigned char high = 0xBF) {
  return byte >= low && byte <= high;
}

}  // namespace

CharClass unicode_class(uint32_t cp) {
  if (cp < std::size(kAsciiCharClasses)) return kAsciiCharClasses[cp];
  // The last range whose first code point is <= cp; cp is in it iff cp <= its last.
  const UnicodeRange* it = std::upper_bound(
      std::begin(kUnicodeRanges), std::end(kUnicodeRanges), cp,
      [](uint32_t value, const UnicodeRange& range) { return value < range.first; });
  if (it == std::begin(kUnicodeRanges)) return kOther;
  --it;
  return cp <= it->last ? it->char_class : kOther;
}

Char read_multibyte_char(const unsigned char* p, const unsigned char* end) {
  const unsigned char b0 = p[0];
  const ptrdiff_t left = end - p;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (left < 2 || !is_continuation(p[1])) return kInvalidByte;
    return {unicode_class(((b0 & 0x1Fu) << 6) | (p[1] & 0x3Fu)), 2};
  }
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    // The second byte's range excludes overlong forms (E0) and surrogates (ED).
    const unsigned char low = b0 == 0xE0 ? 0xA0 : 0x80;
    const unsigned char high = b0 == 0xED ? 0x9F : 0xBF;
    if (left < 3 || !is_continuation(p[1], low, high) || !is_continuation(p[2])) {
      return kInvalidByte;
    }
    return {unicode_class(((b0 & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu)), 3};
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    // The second byte's range excludes overlong forms (F0) and code points above U+10FFFF (F4).
    const unsigned char low = b0 == 0xF0 ? 0x90 : 0x80;
    const unsigned char high = b0 == 0xF4 ? 0x8F : 0xBF;
    if (left < 4 || !is_continuation(p[1], low, high) || !is_continuation(p[2]) ||
        !is_continuation(p[3])) {
      return kInvalidByte;
    }
    return {unicode_class(((b0 & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) |
                          (p[3] & 0x3Fu)),
            4};
  }
  return kInvalidByte;  // 80..C1 (a lone continuation byte or an overlong lead) or F5..FF
}

}  // namespace kiln::train::tok
