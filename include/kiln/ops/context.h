// Context: where and how an op runs. The single dispatch point of kiln_ops: every op's public
// function validates its views, then routes to one kernel by backend (only the CPU today; a
// src/ops/cuda/ backend would add Backend::kCuda and a stream here, behind the same functions)
// and, on the CPU, by ISA. A combination that has no kernel is kNotSupported naming it; there is
// no silent fallback.
//
// A Context may carry a Workspace: scratch memory the caller owns, which ops use instead of
// allocating their own per call, so that a loop of op calls (a training step) allocates nothing
// once the workspace has grown to the largest call's need.
#ifndef KILN_OPS_CONTEXT_H_
#define KILN_OPS_CONTEXT_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include <kiln/base/cpu.h>
#include <kiln/base/result.h>
#include <kiln/base/thread_pool.h>
#include <kiln/ops/gemm_library.h>

namespace kiln::ops {

enum class Backend { kCpu };

// Every block a Workspace hands out starts at a multiple of this: a cache line and an AVX-512
// vector, so each op's scratch is as aligned as memory of its own would be.
inline constexpr size_t kWorkspaceAlign = 64;

// Scratch memory for op calls, owned by the caller: one kWorkspaceAlign-aligned block that grows
// only when a request exceeds it (the old block is freed first, then one of the requested size,
// rounded up to kWorkspaceAlign, is allocated), never shrinks, and is freed by the destructor. Its
// size is therefore bounded by the largest single request, which each op bounds by its shapes.
//
// An op that needs scratch makes one reserve() per call, sized for all of that call's scratch,
// and partitions the block among its tasks itself; the block is valid until the next reserve()
// and its contents are unspecified (ops write before they read). Not thread-safe: a Context that
// carries a workspace must not run two op calls at once (a pool's tasks inside one call are
// fine: only the calling thread reserves).
//
// Every member is out of line (context.cc): the per-ISA kernel objects call them, and an inline
// member emitted there could be kept by the linker in its AVX-512 form (docs/ops.md).
class Workspace {
 public:
  Workspace();
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // A block of at least `bytes` bytes (0 counts as 1), aligned to kWorkspaceAlign; null when the
  // memory cannot be had, which leaves the workspace empty (a later reserve tries again).
  void* reserve(size_t bytes);
  // The bytes of the current block: 0 before the first reserve() and after a failed one.
  size_t capacity() const;
  // How many blocks reserve() has allocated so far: constant once the workspace covers every
  // request of a loop (what a caller checks to see that it allocates nothing more).
  int64_t allocations() const;

 private:
  void* data_ = nullptr;
  size_t capacity_ = 0;
  int64_t allocations_ = 0;
};

struct Context {
  Backend backend = Backend::kCpu;
  // The kernels to use: at most what the CPU supports (a Context asking for more is rejected by
  // every op with kNotSupported).
  CpuIsa isa = CpuIsa::kScalar;
  // Threads for every parallel loop of an op; null runs single-threaded. Matmuls split their
  // rows over this pool too and call OpenBLAS single-threaded in each task, so a process has
  // one set of compute threads (two spinning pools on the same cores would slow each other).
  ThreadPool* pool = nullptr;
  // Scratch for ops that need it (attention, the norms' backward, global_grad_norm); null makes
  // each such call allocate and free its own. Results are bitwise the same either way.
  Workspace* workspace = nullptr;
  // The library every matmul calls (kiln/ops/gemm_library.h); make_cpu_context() sets the one
  // this machine's race chose, or KILN_GEMM's.
  GemmLibrary gemm = GemmLibrary::kOpenBlas;

  int threads() const { return pool == nullptr ? 1 : pool->size(); }
};

// The ISA ops should use on this machine: the best it has, unless KILN_OPS_ISA
// (scalar|avx2|avx512) asks for a lower one. kInvalidArgument for an unknown name,
// kNotSupported for an ISA this CPU lacks.
Result<CpuIsa> ops_isa_from_environment();

// A context for the CPU with the ISA above, the GEMM library process_gemm_choice() names and
// `pool` (may be null), without a workspace (set ctx.workspace to give it one).
Result<Context> make_cpu_context(ThreadPool* pool);

// Every ISA this CPU can run, lowest first (what tests and `kiln ops-check` cover).
std::vector<CpuIsa> supported_isas();

}  // namespace kiln::ops

#endif  // KILN_OPS_CONTEXT_H_
