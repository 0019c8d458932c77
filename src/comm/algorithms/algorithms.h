// The collective algorithms, written over Links only (never a transport), and the few fused
// primitives they are made of (NCCL's vocabulary):
//
//   send            to <- local
//   recv            local <- from
//   recv_reduce_send        to <- from (+) local
//   recv_reduce_copy        dst <- from (+) local
//   recv_reduce_copy_send   dst <- from (+) local; to <- dst          (one pass over the data)
//   recv_copy_send          dst <- from; to <- from                   (one pass over the data)
//
// Each primitive moves one piece (at most one link message). The reduction writes straight into
// the outgoing message, so a ring step reads each byte once and writes it once.
//
// A Group is an ordered set of ranks (ring order) with a link to each other member. Algorithms
// take the chunks each member owns as ranges of elements, so the same ring code serves allreduce
// (even chunks), reduce_scatter and allgather (one block per rank) and the hierarchical variants.
#ifndef KILN_COMM_ALGORITHMS_ALGORITHMS_H_
#define KILN_COMM_ALGORITHMS_ALGORITHMS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include <kiln/base/status.h>
#include <kiln/comm/types.h>

#include "comm/algorithms/chunking.h"
#include "comm/transport/link.h"
#include "comm/transport/progress.h"

namespace kiln::comm {

struct Group {
  std::vector<int> ranks;    // global ranks, ring order
  int index = 0;             // this rank's position in `ranks`
  std::vector<Link*> links;  // links[j] leads to ranks[j]; null at `index`
  size_t piece_bytes = 0;    // message size every member uses in this group

  int size() const { return static_cast<int>(ranks.size()); }
  int wrap(int j) const { return ((j % size()) + size()) % size(); }
  Link* next() const { return links[wrap(index + 1)]; }
  Link* prev() const { return links[wrap(index - 1)]; }
  Link* at(int j) const { return links[wrap(j)]; }
  // The position of global rank `rank`, or -1.
  int position_of(int rank) const;
};

// What every step of one op shares: how to wait, and the tag all its messages carry.
struct Xfer {
  Progress* progress = nullptr;
  uint32_t tag = 0;
  // The op's output is large enough that writing it a message at a time should bypass the cache
  // (tuning.h stream_output): the primitives that write the destination buffer then store it
  // non-temporally; what goes into a link's slot is always stored plainly.
  bool stream_out = false;
};

struct Reduction {
  DataType dtype = DataType::kF32;
  ReduceOp op = ReduceOp::kSum;  // kAvg reduces as a sum; the last step divides
  int divide_by = 1;             // the divisor of that last step (the world size for avg)
};

// Primitives. Sizes are in elements of `dtype` (bytes for the untyped ones).
Status send_bytes(Link* to, const void* src, size_t bytes, Xfer& x);
Status recv_bytes(Link* from, void* dst, size_t bytes, Xfer& x);
Status recv_reduce_send(Link* from, Link* to, const void* local, size_t count, const Reduction& r,
                        Xfer& x);
Status recv_reduce_copy(Link* from, const void* local, void* dst, size_t count, const Reduction& r,
                        bool last_step, Xfer& x);
Status recv_reduce_copy_send(Link* from, Link* to, const void* local, void* dst, size_t count,
                             const Reduction& r, bool last_step, Xfer& x);
Status recv_copy_send(Link* from, Link* to, void* dst, size_t bytes, Xfer& x);

// Ring algorithms. `chunks[j]` is the range (in elements) member j owns at the end.
// reduce_scatter: recv_chunk[0, chunks[index].count) <- the reduction over members of
// send[chunks[index]]. In place when recv_chunk == send + chunks[index].offset elements.
Status ring_reduce_scatter(const Group& g, const void* send, void* recv_chunk,
                           const std::vector<Range>& chunks, const Reduction& r, Xfer& x);
// allgather: buf[chunks[j]] on every member gets member j's buf[chunks[j]] (in place).
Status ring_allgather(const Group& g, void* buf, const std::vector<Range>& chunks, DataType dtype,
                      Xfer& x);
// allreduce: reduce-scatter fused with allgather (the first gather step rides on the last
// reduction step). In place when send == recv.
Status ring_allreduce(const Group& g, const void* send, void* recv, size_t count,
                      const Reduction& r, Xfer& x);

// Recursive doubling (latency-bound allreduce): log2(n) exchanges of the whole buffer, with a
// fold for the ranks beyond the largest power of two.
Status recursive_doubling_allreduce(const Group& g, const void* send, void* recv, size_t count,
                                    const Reduction& r, Xfer& x);

// Broadcast and reduce along the ring from/to `root_index`, pipelined by pieces (large buffers),
// or along a binomial tree (small buffers; `scratch` holds count elements for reduce).
Status chain_broadcast(const Group& g, void* buf, size_t bytes, int root_index, Xfer& x);
Status tree_broadcast(const Group& g, void* buf, size_t bytes, int root_index, Xfer& x);
Status chain_reduce(const Group& g, const void* send, void* recv, size_t count, int root_index,
                    const Reduction& r, Xfer& x);
Status tree_reduce(const Group& g, const void* send, void* recv, void* scratch, size_t count,
                   int root_index, const Reduction& r, Xfer& x);

// Pairwise exchange: in round k member i sends block ranks[i+k] to member i+k and receives block
// ranks[i-k] from member i-k. Blocks are indexed by global rank.
Status pairwise_all_to_all(const Group& g, const void* send, void* recv, size_t block_bytes,
                           Xfer& x);

// Dissemination barrier: ceil(log2 n) rounds of empty messages.
Status dissemination_barrier(const Group& g, Xfer& x);

}  // namespace kiln::comm

#endif  // KILN_COMM_ALGORITHMS_ALGORITHMS_H_
