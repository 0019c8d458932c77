// The character classes of GPT-2's pre-split pattern, and a UTF-8 reader that never fails.
//
// Classes (tokenizer_unicode_gen.py, which generates the tables, says where each comes from):
// kLetter = \p{L}, kNumber = \p{N}, kSpace = \s (White_Space), kOther = everything else.
//
// Invalid UTF-8 (a stray continuation byte, a truncated or overlong sequence, a surrogate, a
// code point above U+10FFFF) is read one byte at a time, each byte a character of class kOther:
// GPT-2's byte-level BPE covers all 256 bytes, so such text still encodes, and decodes back to
// the same bytes.
#ifndef KILN_TRAIN_TOKENIZER_UNICODE_H_
#define KILN_TRAIN_TOKENIZER_UNICODE_H_

#include <cstddef>
#include <cstdint>

namespace kiln::train::tok {

enum CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };

// One generated range: every code point in [first, last] has class `char_class`.
struct UnicodeRange {
  uint32_t first;
  uint32_t last;
  CharClass char_class;
};

// The class of code point `cp` (any value; above U+10FFFF is kOther).
CharClass unicode_class(uint32_t cp);

// One character of a byte string: its class and how many bytes it spans (1 to 4).
struct Char {
  CharClass char_class;
  uint32_t size_bytes;
};

// The class of code points below 0x80, indexed by the byte (inline: the hot path of the split).
extern const CharClass kAsciiCharClasses[128];

// read_char() for a first byte >= 0x80. REQUIRES: p < end.
Char read_multibyte_char(const unsigned char* p, const unsigned char* end);

// Reads the character starting at `p`. REQUIRES: p < end.
inline Char read_char(const unsigned char* p, const unsigned char* end) {
  if (*p < 0x80) return {kAsciiCharClasses[*p], 1};
  return read_multibyte_char(p, end);
}

}  // namespace kiln::train::tok

#endif  // KILN_TRAIN_TOKENIZER_UNICODE_H_
