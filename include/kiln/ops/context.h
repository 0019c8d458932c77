// Context: where and how an op runs. The single dispatch point of kiln_ops: every op's public
// function validates its views, then routes to one kernel by backend (only the CPU today; a
// src/ops/cuda/ backend would add Backend::kCuda and a stream here, behind the same functions)
// and, on the CPU, by ISA. A combination that has no kernel is kNotSupported naming it; there is
// no silent fallback.
#ifndef KILN_OPS_CONTEXT_H_
#define KILN_OPS_CONTEXT_H_

#include <string_view>
#include <vector>

#include <kiln/base/cpu.h>
#include <kiln/base/result.h>
#include <kiln/base/thread_pool.h>

namespace kiln::ops {

enum class Backend { kCpu };

struct Context {
  Backend backend = Backend::kCpu;
  // The kernels to use: at most what the CPU supports (a Context asking for more is rejected by
  // every op with kNotSupported).
  CpuIsa isa = CpuIsa::kScalar;
  // Threads for every parallel loop of an op; null runs single-threaded. Matmuls split their
  // rows over this pool too and call OpenBLAS single-threaded in each task, so a process has
  // one set of compute threads (two spinning pools on the same cores would slow each other).
  ThreadPool* pool = nullptr;

  int threads() const { return pool == nullptr ? 1 : pool->size(); }
};

// The ISA ops should use on this machine: the best it has, unless KILN_OPS_ISA
// (scalar|avx2|avx512) asks for a lower one. kInvalidArgument for an unknown name,
// kNotSupported for an ISA this CPU lacks.
Result<CpuIsa> ops_isa_from_environment();

// A context for the CPU with the ISA above and `pool` (may be null).
Result<Context> make_cpu_context(ThreadPool* pool);

// Every ISA this CPU can run, lowest first (what tests and `kiln ops-check` cover).
std::vector<CpuIsa> supported_isas();

}  // namespace kiln::ops

#endif  // KILN_OPS_CONTEXT_H_
