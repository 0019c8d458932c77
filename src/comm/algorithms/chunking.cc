// See chunking.h.
#include "comm/algorithms/chunking.h"

#include <kiln/base/check.h>

#include <algorithm>

namespace kiln::comm {

Range even_range(size_t count, size_t parts, size_t index) {
  KILN_CHECK(parts >= 1 && index < parts) << "parts=" << parts << " index=" << index;
  const size_t base = count / parts;
  const size_t extra = count % parts;
  Range r;
  r.offset = index * base + std::min(index, extra);
  r.count = base + (index < extra ? 1 : 0);
  return r;
}

size_t piece_count(size_t count, size_t piece_elems) {
  KILN_CHECK_GE(piece_elems, size_t{1});
  return count / piece_elems + (count % piece_elems != 0 ? 1 : 0);
}

Range piece_of(Range chunk, size_t piece_elems, size_t j) {
  const size_t start = j * piece_elems;
  if (start >= chunk.count) return {chunk.offset + chunk.count, 0};
  return {chunk.offset + start, std::min(piece_elems, chunk.count - start)};
}

size_t elements_per_message(size_t message_bytes, size_t elem_bytes) {
  return std::max<size_t>(1, message_bytes / elem_bytes);
}

}  // namespace kiln::comm
