// See include/kiln/ops/context.h.
#include <kiln/ops/context.h>

#include <cstdint>
#include <cstdlib>
#include <string>

namespace kiln::ops {

Workspace::Workspace() = default;

Workspace::~Workspace() {
  std::free(data_);
}

void* Workspace::reserve(size_t bytes) {
  if (data_ != nullptr && bytes <= capacity_) return data_;
  // Free first: the contents need not survive, and the peak stays at one block.
  std::free(data_);
  data_ = nullptr;
  capacity_ = 0;
  if (bytes > SIZE_MAX - kWorkspaceAlign) return nullptr;  // cannot be rounded up, let alone had
  const size_t wanted = bytes == 0 ? 1 : bytes;
  const size_t rounded = (wanted + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
  data_ = std::aligned_alloc(kWorkspaceAlign, rounded);
  if (data_ == nullptr) return nullptr;
  capacity_ = rounded;
  ++allocations_;
  return data_;
}

size_t Workspace::capacity() const {
  return capacity_;
}

int64_t Workspace::allocations() const {
  return allocations_;
}

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
  KILN_ASSIGN_OR_RETURN(const GemmChoice gemm, process_gemm_choice());
  Context ctx;
  ctx.isa = isa;
  ctx.pool = pool;
  ctx.gemm = gemm.library;
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
