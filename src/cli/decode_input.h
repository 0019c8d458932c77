// The input of `kiln decode`: a JSON array of token ids, read by a small reader of its own.
//
//   input   := ws '[' ws ( id ws ( ',' ws id ws )* )? ']' ws
//   id      := '0' | [1-9][0-9]*        (a JSON integer, at most 2^32 - 1)
//   ws      := ( ' ' | '\t' | '\n' | '\r' )*
//
// Why not nlohmann::json: its tree takes 16 bytes and more a value (a 255 MiB array of "0," took
// 5 GB), and nested arrays recurse in the tree's copies and dumps (100,000 '[' overflowed the
// stack). This reader is a single loop: no recursion, and memory 4 bytes an id (at most twice the
// input, since every id takes 2 bytes or more of it).
#ifndef KILN_CLI_DECODE_INPUT_H_
#define KILN_CLI_DECODE_INPUT_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include <kiln/base/result.h>

namespace kiln::cli {

// The ids of `text`. kInvalidArgument naming "stdin", the element's index and the byte offset
// when `text` is not `input` above (a negative, fractional or non-numeric element, a nested
// array, a missing ']', trailing bytes) or an id does not fit in 32 bits. Whether an id is in
// the vocabulary is the tokenizer's to say.
Result<std::vector<uint32_t>> parse_token_ids(std::string_view text);

}  // namespace kiln::cli

#endif  // KILN_CLI_DECODE_INPUT_H_
