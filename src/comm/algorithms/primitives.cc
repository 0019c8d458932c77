// The fused primitives of algorithms.h. Each moves one piece: at most one link message.
#include <cstring>

#include "comm/algorithms/algorithms.h"
#include "comm/reduce/reduce_kernels.h"

namespace kiln::comm {
namespace {

ReduceArgs reduce_args(void* dst, void* dst2, const void* a, const void* b, size_t count,
                       const Reduction& r, bool last_step) {
  ReduceArgs args;
  args.dst = dst;
  args.dst2 = dst2;
  args.a = a;
  args.b = b;
  args.count = count;
  args.dtype = r.dtype;
  args.op = r.op;
  args.divide_by = (last_step && r.op == ReduceOp::kAvg) ? r.divide_by : 1;
  return args;
}

}  // namespace

int Group::position_of(int rank) const {
  for (int j = 0; j < size(); ++j) {
    if (ranks[j] == rank) return j;
  }
  return -1;
}

Status send_bytes(Link* to, const void* src, size_t bytes, Xfer& x) {
  KILN_ASSIGN_OR_RETURN(void* slot, to->reserve(bytes, x.tag, *x.progress));
  if (bytes != 0) std::memcpy(slot, src, bytes);
  return to->commit(*x.progress);
}

Status recv_bytes(Link* from, void* dst, size_t bytes, Xfer& x) {
  KILN_ASSIGN_OR_RETURN(const void* msg, from->peek(bytes, x.tag, *x.progress));
  if (bytes != 0 && x.stream_out) {
    copy2_stream_dst(dst, nullptr, msg, bytes);
  } else if (bytes != 0) {
    std::memcpy(dst, msg, bytes);
  }
  from->release();
  return Status();
}

Status recv_reduce_send(Link* from, Link* to, const void* local, size_t count, const Reduction& r,
                        Xfer& x) {
  const size_t bytes = count * dtype_size(r.dtype);
  KILN_ASSIGN_OR_RETURN(const void* msg, from->peek(bytes, x.tag, *x.progress));
  KILN_ASSIGN_OR_RETURN(void* slot, to->reserve(bytes, x.tag, *x.progress));
  reduce(reduce_args(slot, nullptr, msg, local, count, r, /*last_step=*/false));
  from->release();
  return to->commit(*x.progress);
}

Status recv_reduce_copy(Link* from, const void* local, void* dst, size_t count, const Reduction& r,
                        bool last_step, Xfer& x) {
  const size_t bytes = count * dtype_size(r.dtype);
  KILN_ASSIGN_OR_RETURN(const void* msg, from->peek(bytes, x.tag, *x.progress));
  ReduceArgs args = reduce_args(dst, nullptr, msg, local, count, r, last_step);
  args.stream_dst = x.stream_out;
  reduce(args);
  from->release();
  return Status();
}

Status recv_reduce_copy_send(Link* from, Link* to, const void* local, void* dst, size_t count,
                             const Reduction& r, bool last_step, Xfer& x) {
  const size_t bytes = count * dtype_size(r.dtype);
  KILN_ASSIGN_OR_RETURN(const void* msg, from->peek(bytes, x.tag, *x.progress));
  KILN_ASSIGN_OR_RETURN(void* slot, to->reserve(bytes, x.tag, *x.progress));
  ReduceArgs args = reduce_args(dst, slot, msg, local, count, r, last_step);
  args.stream_dst = x.stream_out;
  reduce(args);
  from->release();
  return to->commit(*x.progress);
}

Status recv_copy_send(Link* from, Link* to, void* dst, size_t bytes, Xfer& x) {
  KILN_ASSIGN_OR_RETURN(const void* msg, from->peek(bytes, x.tag, *x.progress));
  KILN_ASSIGN_OR_RETURN(void* slot, to->reserve(bytes, x.tag, *x.progress));
  if (bytes != 0 && x.stream_out) {
    copy2_stream_dst(dst, slot, msg, bytes);
  } else if (bytes != 0) {
    copy2(dst, slot, msg, bytes);
  }
  from->release();
  return to->commit(*x.progress);
}

}  // namespace kiln::comm
