// GPT-2's byte alphabet: the 256 printable code points its vocabulary files write bytes as.
//
// encoder.json and vocab.bpe never hold raw bytes: each byte b is written as one code point
// (encoder.py's bytes_to_unicode()): the 188 bytes that are printable in Latin-1 (! .. ~,
// U+00A1 .. U+00AC, U+00AE .. U+00FF) as themselves, and the other 68 (control characters,
// space, DEL, U+0080 .. U+00A0, the soft hyphen U+00AD), in increasing order, as U+0100,
// U+0101, ... U+0143. So a space is "Ġ" (U+0120) and a newline "Ċ" (U+010A). The map is a
// bijection between the 256 bytes and 256 code points, all below U+0144.
#ifndef KILN_TRAIN_TOKENIZER_BYTE_MAP_H_
#define KILN_TRAIN_TOKENIZER_BYTE_MAP_H_

#include <cstdint>
#include <string>
#include <string_view>

#include <kiln/base/result.h>

namespace kiln::train::tok {

// The code point that stands for byte `byte`.
uint32_t byte_to_code_point(uint8_t byte);

// The raw bytes a vocabulary string stands for: one byte per code point of `alphabet_text`
// (UTF-8). Fails (InvalidArgument) on a code point outside the alphabet, naming it and its
// character offset, or on invalid UTF-8.
Result<std::string> bytes_from_alphabet(std::string_view alphabet_text);

// The vocabulary-file form of raw `bytes` (the inverse of bytes_from_alphabet), for messages.
std::string alphabet_from_bytes(std::string_view bytes);

}  // namespace kiln::train::tok

#endif  // KILN_TRAIN_TOKENIZER_BYTE_MAP_H_
