// GPT-2's pre-split: cuts text into the pieces that byte-level BPE then encodes one at a time.
//
// It is the regular expression of GPT-2's encoder.py, written out by hand:
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// tried at each position in that order, leftmost alternative first, each quantifier greedy.
// Because every character is in exactly one class (tokenizer_unicode.h), the alternatives reduce
// to this, at position i with character c:
//
//   1. c is ' and the next one or two characters are s, t, m, d, re, ve or ll (case-sensitive):
//      the contraction.
//   2. c is a space (U+0020 only) followed by a letter, number or other character: the space and
//      the run of that class after it.
//   3. c is a letter, number or other character: the run of its class.
//   4. c is white space: the run of white space [i, j). If j is the end of the text, or the run
//      is one character, all of it; otherwise all but its last character (the lookahead (?!\S)
//      backs off one character so that the last one can prefix the next word in step 2).
//
// Invalid UTF-8 bytes are characters of class other (tokenizer_unicode.h). The pieces cover the
// text exactly: concatenated in order they give it back byte for byte.
#ifndef KILN_TRAIN_TOKENIZER_SPLIT_H_
#define KILN_TRAIN_TOKENIZER_SPLIT_H_

#include <cstddef>
#include <string_view>

#include "train/tokenizer_unicode.h"

namespace kiln::train::tok {

// Iterates over the pieces of `text`, which must outlive the splitter. Not thread-safe.
class PretokenSplitter {
 public:
  explicit PretokenSplitter(std::string_view text) : text_(text) {}

  // Sets `piece` to the next piece (a view into the text, never empty) and returns true, or
  // returns false when the text is used up.
  bool next(std::string_view* piece);

 private:
  // The end of the run of characters of class `cls` from byte `pos` on (pos itself if the
  // character there is of another class or pos is the end).
  size_t run_end(size_t pos, CharClass cls) const;
  // The length in bytes of the contraction at `pos` (which holds '), or 0 if there is none.
  size_t contraction_size(size_t pos) const;

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace kiln::train::tok

#endif  // KILN_TRAIN_TOKENIZER_SPLIT_H_
