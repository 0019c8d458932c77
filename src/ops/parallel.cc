// See parallel.h.
#include "ops/parallel.h"

namespace kiln::ops {

void run_parallel(const Context& ctx, int64_t tasks,
                  FunctionRef<void(int64_t task, int thread)> fn) {
  if (ctx.pool != nullptr && tasks > 1) {
    ctx.pool->parallel_for(tasks, fn);
    return;
  }
  for (int64_t t = 0; t < tasks; ++t)
    fn(t, 0);
}

}  // namespace kiln::ops
