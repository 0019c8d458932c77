// See comm_env.h.
#include "comm/comm_env.h"

#include <charconv>
#include <cstdlib>

#include <kiln/comm/machine_profile.h>

#include "comm/reduce/reduce_kernels_internal.h"

namespace kiln::comm {

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

namespace {

constexpr int64_t kWaitUsMax = 1'000'000;

// A whole number of microseconds in [0, kWaitUsMax], or an error naming the variable.
Result<std::optional<int64_t>> parse_wait_us(const EnvLookup& env, const char* name) {
  std::optional<std::string> text = env(name);
  if (!text || text->empty()) return std::optional<int64_t>();
  int64_t value = 0;
  const char* end = text->data() + text->size();
  auto [ptr, ec] = std::from_chars(text->data(), end, value);
  if (ec != std::errc() || ptr != end || value < 0 || value > kWaitUsMax) {
    return Status::invalid_argument(std::string(name) + "='" + *text +
                                    "' is not a whole number of microseconds in [0, " +
                                    std::to_string(kWaitUsMax) + "]");
  }
  return std::optional<int64_t>(value);
}

}  // namespace

Result<CommEnv> parse_comm_env(const EnvLookup& env, CpuIsa best) {
  CommEnv out;
  if (std::optional<std::string> isa = env("KILN_COMM_ISA"); isa && !isa->empty()) {
    KILN_ASSIGN_OR_RETURN(out.reduce_isa, reduce_internal::choose_reduce_isa(best, isa->c_str()));
  }
  if (std::optional<std::string> addr = env("KILN_COMM_ADDR"); addr) out.tcp_address = *addr;
  KILN_ASSIGN_OR_RETURN(out.spin_us, parse_wait_us(env, "KILN_COMM_SPIN_US"));
  KILN_ASSIGN_OR_RETURN(out.yield_us, parse_wait_us(env, "KILN_COMM_YIELD_US"));
  std::optional<std::string> profile = env("KILN_COMM_PROFILE");
  if (!profile || profile->empty()) {
    out.profile_path = default_machine_profile_path(env);
  } else if (*profile != "off") {
    if ((*profile)[0] != '/') {
      return Status::invalid_argument("KILN_COMM_PROFILE='" + *profile +
                                      "' is neither 'off' nor an absolute path");
    }
    out.profile_path = *profile;
  }
  return out;
}

Result<std::string> machine_profile_path_from_process_env() {
  KILN_ASSIGN_OR_RETURN(const CommEnv env, comm_env_from_process());
  return env.profile_path;
}

Result<CommEnv> comm_env_from_process() {
  return parse_comm_env(process_env(), detect_cpu_features().best_isa());
}

}  // namespace kiln::comm
