// See dispatch.h.
#include "ops/dispatch.h"

namespace kiln::ops {

Status check_cpu_dispatch(const Context& ctx, const char* op) {
  if (ctx.backend != Backend::kCpu) {
    return Status::not_supported(std::string(op) + ": no kernel for this backend (CPU only)");
  }
  const CpuIsa best = detect_cpu_features().best_isa();
  if (static_cast<int>(ctx.isa) > static_cast<int>(best)) {
    return Status::not_supported(
        std::string(op) + ": the " + std::string(cpu_isa_name(ctx.isa)) +
        " kernel cannot run on this CPU (best: " + std::string(cpu_isa_name(best)) + ")");
  }
  return Status();
}

Status scratch_unavailable(const char* op, int64_t bytes) {
  return Status::unavailable(std::string(op) + ": cannot allocate " + std::to_string(bytes) +
                             " bytes of scratch");
}

}  // namespace kiln::ops
