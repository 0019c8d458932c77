// See include/kiln/ops/context.h.
#include <kiln/ops/context.h>

#include <cstdlib>
#include <string>

namespace kiln::ops {

Result<CpuIsa> ops_isa_from_environment() {
  const CpuIsa best = detect_cpu_features().best_isa();
  const char* forced = std::getenv("KILN_OPS_ISA");
  if (forced == nullptr || *forced == '\0') return best;
  Result<CpuIsa> isa = parse_cpu_isa(forced);
  if (!isa.ok()) return isa.status().with_context("KILN_OPS_ISA");
  if (static_cast<int>(*isa) > static_cast<int>(best)) {
    return Status::not_supported("KILN_OPS_ISA=" + std::string(forced) +
                                 ", but this CPU's best is " + std::string(cpu_isa_name(best)));
  }
  return *isa;
}

Result<Context> make_cpu_context(ThreadPool* pool) {
  KILN_ASSIGN_OR_RETURN(CpuIsa isa, ops_isa_from_environment());
  Context ctx;
  ctx.isa = isa;
  ctx.pool = pool;
  return ctx;
}

std::vector<CpuIsa> supported_isas() {
  const CpuIsa best = detect_cpu_features().best_isa();
  std::vector<CpuIsa> out;
  for (int i = 0; i <= static_cast<int>(best); ++i)
    out.push_back(static_cast<CpuIsa>(i));
  return out;
}

}  // namespace kiln::ops
