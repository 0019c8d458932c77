// GPT-2's pre-split (see tokenizer_split.h for the pattern and how it reduces to four steps).
#include "train/tokenizer_split.h"

namespace kiln::train::tok {

size_t PretokenSplitter::run_end(size_t pos, CharClass cls) const {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text_.data());
  const unsigned char* end = bytes + text_.size();
  while (pos < text_.size()) {
    const Char c = read_char(bytes + pos, end);
    if (c.char_class != cls) break;
    pos += c.size_bytes;
  }
  return pos;
}

size_t PretokenSplitter::contraction_size(size_t pos) const {
  const std::string_view rest = text_.substr(pos + 1);
  if (rest.empty()) return 0;
  switch (rest[0]) {
    case 's':
    case 't':
    case 'm':
    case 'd': return 2;
    default: break;
  }
  if (rest.starts_with("re") || rest.starts_with("ve") || rest.starts_with("ll")) return 3;
  return 0;
}

bool PretokenSplitter::next(std::string_view* piece) {
  const size_t size = text_.size();
  if (pos_ >= size) return false;
  const auto* bytes = reinterpret_cast<const unsigned char*>(text_.data());
  const unsigned char* end = bytes + size;
  const size_t start = pos_;
  const Char c = read_char(bytes + start, end);
  // The character after a leading space, for step 2 (class kSpace when there is none: step 4).
  const Char after =
      bytes[start] == ' ' && start + 1 < size ? read_char(bytes + start + 1, end) : Char{kSpace, 0};
  const size_t contraction = bytes[start] == '\'' ? contraction_size(start) : 0;
  size_t stop = 0;
  if (contraction != 0) {
    stop = start + contraction;  // step 1
  } else if (c.char_class != kSpace) {
    stop = run_end(start + c.size_bytes, c.char_class);  // step 3
  } else if (after.char_class != kSpace) {
    stop = run_end(start + 1 + after.size_bytes, after.char_class);  // step 2
  } else {
    // Step 4: the white-space run [start, run_stop); `last` is where its last character starts.
    size_t last = start;
    size_t run_stop = start + c.size_bytes;
    while (run_stop < size) {
      const Char w = read_char(bytes + run_stop, end);
      if (w.char_class != kSpace) break;
      last = run_stop;
      run_stop += w.size_bytes;
    }
    stop = run_stop == size || last == start ? run_stop : last;
  }
  *piece = text_.substr(start, stop - start);
  pos_ = stop;
  return true;
}

}  // namespace kiln::train::tok
