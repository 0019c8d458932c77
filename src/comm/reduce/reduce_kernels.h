// Element-wise reduction kernels: dst[i] = op(a[i], b[i]) for every DataType x ReduceOp, the one
// loop where a collective spends its compute (recv-reduce, recv-reduce-copy).
//
// Kernels exist for three ISA levels (scalar, AVX2, AVX-512), each in its own translation unit
// compiled with its own -m flags; reduce() picks one at run time, so one binary runs on any x86-64.
// Every path gives results bit-identical to the scalar path, except the sign of a zero result of
// min/max and the payload of a NaN (any NaN is a NaN).
//
// Semantics (the scalar path, reduce_kernels_scalar.cc, is the specification):
//   sum      a + b; integers wrap modulo 2^bits.
//   min/max  NaN-propagating for floats (a NaN operand gives a NaN), like torch.minimum.
//   avg      sum, then if divide_by > 1 divided by it: integers with truncation toward zero after
//            the wrapping sum, floats in their own precision, bf16 in fp32.
//   bf16     both operands widened to fp32 (exact), computed in fp32, rounded back to nearest
//            even; a NaN result is a quiet NaN.
// No kernel allocates, logs or throws. Not a place for validation of user input: a broken
// argument is a programmer error and fails a KILN_CHECK.
#ifndef KILN_COMM_REDUCE_REDUCE_KERNELS_H_
#define KILN_COMM_REDUCE_REDUCE_KERNELS_H_

#include <cstddef>

#include <kiln/base/cpu.h>
#include <kiln/comm/types.h>

namespace kiln::comm {

struct ReduceArgs {
  void* dst = nullptr;      // required: receives op(a, b)
  void* dst2 = nullptr;     // optional: receives the same values as dst (fused copy), or null
  const void* a = nullptr;  // first operand
  const void* b = nullptr;  // second operand
  size_t count = 0;         // elements (may be 0, odd, huge: > 2^31 elements must work)
  DataType dtype = DataType::kF32;
  ReduceOp op = ReduceOp::kSum;  // kAvg reduces like kSum here ...
  int divide_by = 1;  // ... and when > 1 the result is divided by it (last step of an avg)
  // Store dst non-temporally even when this call is small: the caller knows dst is not read
  // again soon (the output of a large collective, written one message at a time), so fetching
  // its lines first (the read-for-ownership of a plain store) only spends memory bandwidth. dst2
  // (a link's slot, which a peer reads next) is still stored plainly. Results are identical.
  bool stream_dst = false;
};

// dst/dst2 may alias a or b exactly (in place) but never partially overlap. Pointers need no
// particular alignment. Thread-safe (pure function of its arguments).
// REQUIRES: dst, a and b are non-null when count > 0; divide_by >= 1; no partial overlap between
// any written range (dst, dst2) and any other range. Checked; a violation aborts.
void reduce(const ReduceArgs& args);  // best path for this CPU (detected once)
// REQUIRES: the CPU supports `isa` (checked), and everything reduce() requires.
void reduce_with_isa(const ReduceArgs& args, CpuIsa isa);

// Copies `bytes` from src to dst and, if dst2 is not null, also to dst2, reading src once from
// memory. dst or dst2 may equal src (that copy is then skipped) but no range may partially
// overlap another.
void copy2(void* dst, void* dst2, const void* src, size_t bytes);

// copy2, with dst written by non-temporal stores (16-byte SSE2 streams, then an SFENCE) for the
// reason of ReduceArgs::stream_dst; dst2 is written plainly. Same REQUIRES as copy2.
void copy2_stream_dst(void* dst, void* dst2, const void* src, size_t bytes);

// The ISA reduce() uses: the best the CPU has, unless the environment variable KILN_COMM_ISA
// (scalar|avx2|avx512) asks for a lower one (read once at first use, see comm_env.h). An empty
// KILN_COMM_ISA counts as unset. Communicator::create reports a bad value as an error; reduce()
// called outside a communicator with a bad value is a KILN_CHECK failure naming it.
CpuIsa reduce_isa();

}  // namespace kiln::comm

#endif  // KILN_COMM_REDUCE_REDUCE_KERNELS_H_
