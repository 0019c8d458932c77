// run_parallel: an op's parallel loop on the Context's pool, or inline when there is none.
//
// Defined out of line in parallel.cc (compiled for plain x86-64) on purpose: the kernels that
// call it are compiled once per ISA, and an inline function they share would be emitted by each
// of those translation units under one name, leaving the linker free to keep the AVX-512 copy
// for the scalar kernels too (tests/style/check_isa_leaks.py guards against such symbols).
#ifndef KILN_OPS_PARALLEL_H_
#define KILN_OPS_PARALLEL_H_

#include <kiln/base/function_ref.h>
#include <kiln/ops/context.h>

#include <cstdint>

namespace kiln::ops {

// Runs fn(task, thread) for every task in [0, tasks); thread is in [0, ctx.threads()).
void run_parallel(const Context& ctx, int64_t tasks,
                  FunctionRef<void(int64_t task, int thread)> fn);

}  // namespace kiln::ops

#endif  // KILN_OPS_PARALLEL_H_
