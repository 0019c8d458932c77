// What the reduce dispatcher (reduce_kernels.cc) hands to the per-ISA kernels, and the pure rule
// that picks the ISA. Private to src/comm/reduce/.
//
// Invariants of a KernelArgs: count > 0; dst, a and b are non-null; written ranges alias read
// ranges exactly or not at all; kind == kAvg iff the op was kAvg with divide_by > 1 (an avg that
// divides by 1 is a sum). The dispatcher checks them, so kernels do not.
#ifndef KILN_COMM_REDUCE_REDUCE_KERNELS_INTERNAL_H_
#define KILN_COMM_REDUCE_REDUCE_KERNELS_INTERNAL_H_

#include <cstddef>
#include <cstdint>

#include <kiln/base/cpu.h>
#include <kiln/base/result.h>
#include <kiln/comm/types.h>

namespace kiln::comm::reduce_internal {

// The operation a kernel runs once kAvg-with-divide_by-1 has been folded into kSum.
enum class Kind : uint8_t { kSum, kMin, kMax, kAvg };

struct KernelArgs {
  unsigned char* dst = nullptr;      // (count * dtype_size) bytes, written
  unsigned char* dst2 = nullptr;     // null, or like dst
  const unsigned char* a = nullptr;  // (count * dtype_size) bytes, read
  const unsigned char* b = nullptr;  // (count * dtype_size) bytes, read
  size_t count = 0;                  // elements, > 0
  DataType dtype = DataType::kF32;
  Kind kind = Kind::kSum;
  int divide_by = 1;  // > 1 iff kind == kAvg
  // Store dst non-temporally (where it is element-aligned), and dst2 too when stream_dst2: set
  // for a destination of kStreamBytesMin or more, or when the caller asked (ReduceArgs).
  bool stream = false;
  bool stream_dst2 = false;
};

// Non-temporal (streaming) stores write whole lines to memory without first reading them into
// the cache (no read-for-ownership) and without evicting the operands: a reduction then moves 3
// bytes of memory traffic per result byte instead of 4. That pays only when the results would
// not stay in cache anyway, and it costs a reader that comes right after (the data is in DRAM).
// The vector kernels stream when a destination is at least this large. Measured with
// kiln_reduce_bench on a 2-core Zen 4 VM with 32 MiB of L3 (f32 and bf16 sum): 25-50% faster
// from 8 MiB per operand up (three buffers of 24 MiB and more no longer fit L3 with everything
// else), no gain at 4 MiB, up to 13% slower at 2 MiB where plain-stored results stay in L3.
// TODO: scale with the last-level cache per thread (as glibc's memcpy does) if other machines
// put the crossover elsewhere.
constexpr size_t kStreamBytesMin = size_t{8} << 20;

// One entry point per ISA TU. reduce_kernel_avx2/avx512 REQUIRE a CPU with that ISA.
void reduce_kernel_scalar(const KernelArgs& args);
void reduce_kernel_avx2(const KernelArgs& args);
void reduce_kernel_avx512(const KernelArgs& args);

// The ISA reduce() uses on a CPU whose best level is `best`, given the value of KILN_COMM_ISA
// (`request`, null when unset; empty counts as unset). kInvalidArgument for a name parse_cpu_isa
// rejects, kNotSupported for a request above `best`; both name the variable, the value and the
// accepted values.
Result<CpuIsa> choose_reduce_isa(CpuIsa best, const char* request);

}  // namespace kiln::comm::reduce_internal

#endif  // KILN_COMM_REDUCE_REDUCE_KERNELS_INTERNAL_H_
