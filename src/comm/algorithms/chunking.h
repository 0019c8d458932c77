// The arithmetic of splitting buffers: pure functions, unit-tested on their own.
//
// A collective over `count` elements splits it into chunks (one per group member for ring
// algorithms) and each chunk into pieces no larger than one link message. Chunks may differ in
// size when `count` is not divisible by the group size; pieces past a chunk's end are empty, and
// are still sent (as zero-byte messages) so that every rank runs the same sequence of steps.
#ifndef KILN_COMM_ALGORITHMS_CHUNKING_H_
#define KILN_COMM_ALGORITHMS_CHUNKING_H_

#include <cstddef>

namespace kiln::comm {

struct Range {
  size_t offset = 0;  // elements
  size_t count = 0;   // elements
};

// Splits `count` into `parts` contiguous ranges as evenly as possible: the first count % parts
// ranges get one element more. REQUIRES: parts >= 1, index < parts.
Range even_range(size_t count, size_t parts, size_t index);

// Pieces of at most `piece_elems` (>= 1) needed to cover `count` elements: ceil(count / piece).
size_t piece_count(size_t count, size_t piece_elems);

// Piece `j` of `chunk`: [chunk.offset + j*piece_elems, ...), clipped to the chunk; empty (count 0,
// offset at the chunk's end) when j*piece_elems >= chunk.count.
Range piece_of(Range chunk, size_t piece_elems, size_t j);

// Elements of `elem_bytes` each that fit in a message of `message_bytes`; at least 1.
size_t elements_per_message(size_t message_bytes, size_t elem_bytes);

}  // namespace kiln::comm

#endif  // KILN_COMM_ALGORITHMS_CHUNKING_H_
