// Latency-bound algorithms: recursive doubling allreduce and binomial-tree broadcast/reduce.
//
// Recursive doubling: with p the largest power of two <= n and rem = n - p, the first 2*rem
// members pair up (2j sends its buffer to 2j+1, which reduces) so that p members remain, numbered
// v. In round t (t = 0..log2(p)-1) member v exchanges its whole buffer with v ^ 2^t and reduces;
// after log2(p) rounds every remaining member holds the full result, and the odd members of the
// folded pairs send it back to their partners. Both members of an exchange compute a (+) b and
// b (+) a, which are bit-identical for IEEE addition, so every rank ends with the same bits.
//
// Binomial tree, relative to the root (d = distance from it): a member receives once, from
// d - 2^t where 2^t is the lowest set bit of d, then sends to d + 2^u for every 2^u below that
// bit; reduce is the mirror image.
#include <cstring>

#include <kiln/base/check.h>

#include "comm/algorithms/algorithms.h"

namespace kiln::comm {
namespace {

char* at(void* base, size_t elements, size_t elem_bytes) {
  return static_cast<char*>(base) + elements * elem_bytes;
}
const char* at(const void* base, size_t elements, size_t elem_bytes) {
  return static_cast<const char*>(base) + elements * elem_bytes;
}

int largest_power_of_two_at_most(int n) {
  int p = 1;
  while (p * 2 <= n)
    p *= 2;
  return p;
}

}  // namespace

Status recursive_doubling_allreduce(const Group& g, const void* send, void* recv, size_t count,
                                    const Reduction& r, Xfer& x) {
  const int n = g.size();
  const int i = g.index;
  const size_t e = dtype_size(r.dtype);
  if (send != recv) std::memcpy(recv, send, count * e);
  if (n == 1) {
    KILN_CHECK_EQ(r.divide_by, 1) << "a one-member group cannot finish an average";
    return Status();
  }
  const int p = largest_power_of_two_at_most(n);
  const int rem = n - p;
  const bool folded_out = i < 2 * rem && i % 2 == 0;  // hands its data to i+1 and waits
  const int v = i < 2 * rem ? i / 2 : i - rem;
  auto member_of = [&](int virtual_index) {
    return virtual_index < rem ? virtual_index * 2 + 1 : virtual_index + rem;
  };
  const Range all{0, count};
  const size_t piece = elements_per_message(g.piece_bytes, e);
  const size_t slices = piece_count(count, piece);
  for (size_t s = 0; s < slices; ++s) {
    const Range q = piece_of(all, piece, s);
    char* acc = at(recv, q.offset, e);
    const size_t bytes = q.count * e;
    if (folded_out) {
      KILN_RETURN_IF_ERROR(send_bytes(g.at(i + 1), acc, bytes, x));
      KILN_RETURN_IF_ERROR(recv_bytes(g.at(i + 1), acc, bytes, x));
      continue;
    }
    if (i < 2 * rem) {
      KILN_RETURN_IF_ERROR(recv_reduce_copy(g.at(i - 1), acc, acc, q.count, r, false, x));
    }
    for (int mask = 1; mask < p; mask <<= 1) {
      Link* partner = g.at(member_of(v ^ mask));
      KILN_RETURN_IF_ERROR(send_bytes(partner, acc, bytes, x));
      const bool last = (mask << 1) >= p;
      KILN_RETURN_IF_ERROR(recv_reduce_copy(partner, acc, acc, q.count, r, last, x));
    }
    if (i < 2 * rem) KILN_RETURN_IF_ERROR(send_bytes(g.at(i - 1), acc, bytes, x));
  }
  return Status();
}

Status tree_broadcast(const Group& g, void* buf, size_t bytes, int root_index, Xfer& x) {
  const int n = g.size();
  if (n == 1) return Status();
  const int d = g.wrap(g.index - root_index);
  const Range all{0, bytes};
  const size_t slices = piece_count(bytes, g.piece_bytes);
  for (size_t s = 0; s < slices; ++s) {
    const Range q = piece_of(all, g.piece_bytes, s);
    char* ptr = static_cast<char*>(buf) + q.offset;
    int mask = 1;
    while (mask < n) {
      if (d & mask) {
        KILN_RETURN_IF_ERROR(recv_bytes(g.at(root_index + d - mask), ptr, q.count, x));
        break;
      }
      mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1) {
      if (d + mask < n) {
        KILN_RETURN_IF_ERROR(send_bytes(g.at(root_index + d + mask), ptr, q.count, x));
      }
    }
  }
  return Status();
}

Status tree_reduce(const Group& g, const void* send, void* recv, void* scratch, size_t count,
                   int root_index, const Reduction& r, Xfer& x) {
  const int n = g.size();
  const size_t e = dtype_size(r.dtype);
  const int d = g.wrap(g.index - root_index);
  if (n == 1) {
    KILN_CHECK_EQ(r.divide_by, 1) << "a one-member group cannot finish an average";
    if (send != recv) std::memcpy(recv, send, count * e);
    return Status();
  }
  // The root accumulates in its output; the others in `scratch`. The root's last receive (from
  // the child at the largest power of two below n) is the last step of the reduction.
  void* acc_base = d == 0 ? recv : scratch;
  int root_last_mask = 1;
  while (root_last_mask * 2 < n)
    root_last_mask *= 2;
  const Range all{0, count};
  const size_t piece = elements_per_message(g.piece_bytes, e);
  const size_t slices = piece_count(count, piece);
  for (size_t s = 0; s < slices; ++s) {
    const Range q = piece_of(all, piece, s);
    char* acc = at(acc_base, q.offset, e);
    const char* mine = at(send, q.offset, e);
    bool have_acc = false;
    for (int mask = 1; mask < n; mask <<= 1) {
      if (d & mask) {
        KILN_RETURN_IF_ERROR(
            send_bytes(g.at(root_index + d - mask), have_acc ? acc : mine, q.count * e, x));
        break;
      }
      if (d + mask < n) {
        const bool last = d == 0 && mask == root_last_mask;
        KILN_RETURN_IF_ERROR(recv_reduce_copy(g.at(root_index + d + mask), have_acc ? acc : mine,
                                              acc, q.count, r, last, x));
        have_acc = true;
      }
    }
  }
  return Status();
}

Status pairwise_all_to_all(const Group& g, const void* send, void* recv, size_t block_bytes,
                           Xfer& x) {
  const int n = g.size();
  const int i = g.index;
  const int me = g.ranks[i];
  std::memmove(static_cast<char*>(recv) + me * block_bytes,
               static_cast<const char*>(send) + me * block_bytes, block_bytes);
  const Range all{0, block_bytes};
  const size_t slices = piece_count(block_bytes, g.piece_bytes);
  for (int k = 1; k < n; ++k) {
    const int to = g.wrap(i + k);
    const int from = g.wrap(i - k);
    const char* src = static_cast<const char*>(send) + g.ranks[to] * block_bytes;
    char* dst = static_cast<char*>(recv) + g.ranks[from] * block_bytes;
    for (size_t s = 0; s < slices; ++s) {
      const Range q = piece_of(all, g.piece_bytes, s);
      KILN_RETURN_IF_ERROR(send_bytes(g.at(to), src + q.offset, q.count, x));
      KILN_RETURN_IF_ERROR(recv_bytes(g.at(from), dst + q.offset, q.count, x));
    }
  }
  return Status();
}

Status dissemination_barrier(const Group& g, Xfer& x) {
  const int n = g.size();
  for (int k = 1; k < n; k <<= 1) {
    KILN_RETURN_IF_ERROR(send_bytes(g.at(g.index + k), nullptr, 0, x));
    KILN_RETURN_IF_ERROR(recv_bytes(g.at(g.index - k), nullptr, 0, x));
  }
  return Status();
}

}  // namespace kiln::comm
