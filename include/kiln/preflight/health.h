// The health check of preflight: figures of a node's facts (facts.h) against thresholds. Unlike
// the stack (stack.h) these differ from node to node by nature; each must only be good enough.
//
//   kernel_params.shm_free_bytes       >= shm_free_bytes_min     (the ranks' shared-memory links)
//   memory.available_bytes             >= memory_available_bytes_min
//   kernel_params.open_files_soft      >= open_files_min         (ranks hold 5 descriptors each,
//                                                                 a TCP link one per peer)
//   clock_offset_ms (to the asker)     <= clock_offset_ms_max    (logs and leases across nodes)
//
// The defaults are those of deploy/slurm/kiln-node-check (256 MiB, 1 GiB, 4096) and one second.
#ifndef KILN_PREFLIGHT_HEALTH_H_
#define KILN_PREFLIGHT_HEALTH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <kiln/preflight/stack.h>

namespace kiln::preflight {

struct HealthThresholds {
  int64_t shm_free_bytes_min = int64_t{256} << 20;
  int64_t memory_available_bytes_min = int64_t{1} << 30;
  int64_t open_files_min = 4096;
  int64_t clock_offset_ms_max = 1000;
};

// The findings (check "health", against "threshold") of `node`'s facts. A figure the facts lack
// or report as null is a finding too ("unknown"): a node that cannot say is not known healthy.
// `clock_offset_ms`: the node's clock minus the asker's, when the asker measured it.
std::vector<Finding> check_health(const std::string& node, const nlohmann::json& facts,
                                  const HealthThresholds& thresholds,
                                  std::optional<int64_t> clock_offset_ms = std::nullopt);

}  // namespace kiln::preflight

#endif  // KILN_PREFLIGHT_HEALTH_H_
