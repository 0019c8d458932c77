// See comm_env.h.
#include "comm/comm_env.h"

#include <cstdlib>

#include "comm/reduce/reduce_kernels_internal.h"

namespace kiln::comm {

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

Result<CommEnv> parse_comm_env(const EnvLookup& env, CpuIsa best) {
  CommEnv out;
  if (std::optional<std::string> isa = env("KILN_COMM_ISA"); isa && !isa->empty()) {
    KILN_ASSIGN_OR_RETURN(out.reduce_isa, reduce_internal::choose_reduce_isa(best, isa->c_str()));
  }
  if (std::optional<std::string> addr = env("KILN_COMM_ADDR"); addr) out.tcp_address = *addr;
  return out;
}

Result<CommEnv> comm_env_from_process() {
  return parse_comm_env(process_env(), detect_cpu_features().best_isa());
}

}  // namespace kiln::comm
