// Ring algorithms: reduce-scatter, allgather, allreduce, and chain broadcast/reduce.
//
// Member i of an n-member ring receives only from i-1 ("prev") and sends only to i+1 ("next").
// The buffer is cut into n chunks; member i owns chunk i at the end.
//
// Reduce-scatter takes n-1 steps. At step 0 member i sends its own data of chunk i-1; at step k
// (1 <= k <= n-2) it receives the partial sum of chunk i-1-k from prev, adds its own data and
// passes it on; at step n-1 it receives the partial sum of chunk i (every other member has added
// to it) and adds its own: chunk i is complete. Allgather then circulates the completed chunks:
// member i sends chunk i, then for n-2 steps forwards what prev sent (chunk i-k at step k), and
// finally receives chunk i+1. Allreduce fuses the two: the last reduction step writes chunk i to
// the output and to next in the same pass (recv_reduce_copy_send).
//
// Each chunk is further cut into pieces of one link message, and the whole schedule runs once
// per "slice" (piece index), so a slice's messages stream through the ring while the next slice
// starts: bytes on the wire per member are 2 (n-1)/n of the buffer for allreduce.
#include <algorithm>
#include <cstring>

#include <kiln/base/check.h>

#include "comm/algorithms/algorithms.h"

namespace kiln::comm {
namespace {

size_t max_chunk(const std::vector<Range>& chunks) {
  size_t m = 0;
  for (const Range& c : chunks)
    m = std::max(m, c.count);
  return m;
}

char* at(void* base, size_t elements, size_t elem_bytes) {
  return static_cast<char*>(base) + elements * elem_bytes;
}
const char* at(const void* base, size_t elements, size_t elem_bytes) {
  return static_cast<const char*>(base) + elements * elem_bytes;
}

// The reduce-scatter steps of slice `s` that every ring reduction shares: step 0 sends this
// member's piece of chunk i-1, steps 1..n-2 add its piece of chunk i-1-k to what prev sent and
// pass it on. The last step (which completes chunk i) differs per caller.
Status reduce_scatter_steps(const Group& g, const void* send, const std::vector<Range>& chunks,
                            size_t piece, size_t s, const Reduction& r, Xfer& x) {
  const int n = g.size();
  const int i = g.index;
  const size_t e = dtype_size(r.dtype);
  Range p = piece_of(chunks[g.wrap(i - 1)], piece, s);
  KILN_RETURN_IF_ERROR(send_bytes(g.next(), at(send, p.offset, e), p.count * e, x));
  for (int k = 1; k <= n - 2; ++k) {
    p = piece_of(chunks[g.wrap(i - 1 - k)], piece, s);
    KILN_RETURN_IF_ERROR(
        recv_reduce_send(g.prev(), g.next(), at(send, p.offset, e), p.count, r, x));
  }
  return Status();
}

}  // namespace

Status ring_reduce_scatter(const Group& g, const void* send, void* recv_chunk,
                           const std::vector<Range>& chunks, const Reduction& r, Xfer& x) {
  const int n = g.size();
  const int i = g.index;
  const size_t e = dtype_size(r.dtype);
  KILN_CHECK_EQ(chunks.size(), static_cast<size_t>(n));
  if (n == 1) {
    KILN_CHECK_EQ(r.divide_by, 1) << "a one-member group cannot finish an average";
    const char* src = at(send, chunks[0].offset, e);
    if (src != recv_chunk) std::memcpy(recv_chunk, src, chunks[0].count * e);
    return Status();
  }
  const size_t piece = elements_per_message(g.piece_bytes, e);
  const size_t slices = piece_count(max_chunk(chunks), piece);
  for (size_t s = 0; s < slices; ++s) {
    KILN_RETURN_IF_ERROR(reduce_scatter_steps(g, send, chunks, piece, s, r, x));
    Range p = piece_of(chunks[i], piece, s);
    KILN_RETURN_IF_ERROR(recv_reduce_copy(g.prev(), at(send, p.offset, e),
                                          at(recv_chunk, p.offset - chunks[i].offset, e), p.count,
                                          r, /*last_step=*/true, x));
  }
  return Status();
}

Status ring_allgather(const Group& g, void* buf, const std::vector<Range>& chunks, DataType dtype,
                      Xfer& x) {
  const int n = g.size();
  const int i = g.index;
  const size_t e = dtype_size(dtype);
  KILN_CHECK_EQ(chunks.size(), static_cast<size_t>(n));
  if (n == 1) return Status();
  const size_t piece = elements_per_message(g.piece_bytes, e);
  const size_t slices = piece_count(max_chunk(chunks), piece);
  for (size_t s = 0; s < slices; ++s) {
    Range p = piece_of(chunks[i], piece, s);
    KILN_RETURN_IF_ERROR(send_bytes(g.next(), at(buf, p.offset, e), p.count * e, x));
    for (int k = 1; k <= n - 2; ++k) {
      p = piece_of(chunks[g.wrap(i - k)], piece, s);
      KILN_RETURN_IF_ERROR(
          recv_copy_send(g.prev(), g.next(), at(buf, p.offset, e), p.count * e, x));
    }
    p = piece_of(chunks[g.wrap(i + 1)], piece, s);
    KILN_RETURN_IF_ERROR(recv_bytes(g.prev(), at(buf, p.offset, e), p.count * e, x));
  }
  return Status();
}

Status ring_allreduce(const Group& g, const void* send, void* recv, size_t count,
                      const Reduction& r, Xfer& x) {
  const int n = g.size();
  const int i = g.index;
  const size_t e = dtype_size(r.dtype);
  if (n == 1) {
    KILN_CHECK_EQ(r.divide_by, 1) << "a one-member group cannot finish an average";
    if (send != recv) std::memcpy(recv, send, count * e);
    return Status();
  }
  std::vector<Range> chunks(n);
  for (int j = 0; j < n; ++j)
    chunks[j] = even_range(count, n, j);
  const size_t piece = elements_per_message(g.piece_bytes, e);
  const size_t slices = piece_count(max_chunk(chunks), piece);
  for (size_t s = 0; s < slices; ++s) {
    KILN_RETURN_IF_ERROR(reduce_scatter_steps(g, send, chunks, piece, s, r, x));
    Range p = piece_of(chunks[i], piece, s);
    KILN_RETURN_IF_ERROR(recv_reduce_copy_send(g.prev(), g.next(), at(send, p.offset, e),
                                               at(recv, p.offset, e), p.count, r,
                                               /*last_step=*/true, x));
    for (int k = 1; k <= n - 2; ++k) {
      p = piece_of(chunks[g.wrap(i - k)], piece, s);
      KILN_RETURN_IF_ERROR(
          recv_copy_send(g.prev(), g.next(), at(recv, p.offset, e), p.count * e, x));
    }
    p = piece_of(chunks[g.wrap(i + 1)], piece, s);
    KILN_RETURN_IF_ERROR(recv_bytes(g.prev(), at(recv, p.offset, e), p.count * e, x));
  }
  return Status();
}

Status chain_broadcast(const Group& g, void* buf, size_t bytes, int root_index, Xfer& x) {
  const int n = g.size();
  if (n == 1) return Status();
  const int d = g.wrap(g.index - root_index);  // distance from the root along the ring
  const Range all{0, bytes};
  const size_t slices = piece_count(bytes, g.piece_bytes);
  for (size_t s = 0; s < slices; ++s) {
    const Range p = piece_of(all, g.piece_bytes, s);
    char* ptr = static_cast<char*>(buf) + p.offset;
    if (d == 0) {
      KILN_RETURN_IF_ERROR(send_bytes(g.next(), ptr, p.count, x));
    } else if (d == n - 1) {
      KILN_RETURN_IF_ERROR(recv_bytes(g.prev(), ptr, p.count, x));
    } else {
      KILN_RETURN_IF_ERROR(recv_copy_send(g.prev(), g.next(), ptr, p.count, x));
    }
  }
  return Status();
}

Status chain_reduce(const Group& g, const void* send, void* recv, size_t count, int root_index,
                    const Reduction& r, Xfer& x) {
  const int n = g.size();
  const size_t e = dtype_size(r.dtype);
  if (n == 1) {
    KILN_CHECK_EQ(r.divide_by, 1) << "a one-member group cannot finish an average";
    if (send != recv) std::memcpy(recv, send, count * e);
    return Status();
  }
  // Data flows root+1 -> root+2 -> ... -> root+n-1 -> root.
  const int d = g.wrap(g.index - root_index);
  const Range all{0, count};
  const size_t piece = elements_per_message(g.piece_bytes, e);
  const size_t slices = piece_count(count, piece);
  for (size_t s = 0; s < slices; ++s) {
    const Range p = piece_of(all, piece, s);
    if (d == 1) {
      KILN_RETURN_IF_ERROR(send_bytes(g.next(), at(send, p.offset, e), p.count * e, x));
    } else if (d == 0) {
      KILN_RETURN_IF_ERROR(recv_reduce_copy(g.prev(), at(send, p.offset, e), at(recv, p.offset, e),
                                            p.count, r, true, x));
    } else {
      KILN_RETURN_IF_ERROR(
          recv_reduce_send(g.prev(), g.next(), at(send, p.offset, e), p.count, r, x));
    }
  }
  return Status();
}

}  // namespace kiln::comm
