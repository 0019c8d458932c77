// The health check of preflight: figures of a node's facts (facts.h) against thresholds. Unlike
// the stack (stack.h) these differ from node to node by nature; each must only be good enough.
//
//   kernel_params.shm_free_bytes       >= shm_free_bytes_min     (the ranks' shared-memory links)
//   memory.available_bytes             >= memory_available_bytes_min
//   kernel_params.open_files_soft      >= open_files_min         (ranks hold 5 descriptors each,
//                                                                 a TCP link one per peer)
//   clock_offset_ms (to the asker)     <= clock_offset_ms_max    (logs and leases across nodes)
//   load.loadavg_1m / load.cpus_online <= load_per_cpu_max       (others' work on an idle node)
//   disks.<path>.free_bytes            >= disk_free_bytes_min    (checkpoints, data, logs)
//   gpu.devices.<i>                    answers (its memory size is known), where GPUs are
//   gpu.devices                        some device answers where the NVIDIA driver is loaded
//   gpu.count                          >= the count most nodes of its GPU model have
//                                      (check_gpu_counts)
//
// The defaults are those of deploy/slurm/kiln-node-check (256 MiB, 1 GiB, 4096), one second,
// four runnable tasks per CPU (a node that should idle and is that busy runs something it should
// not; a busy shared test host stays below it) and 1 GiB free on each directory. `kiln serve
// --health-*` sets them; 0 turns the load check off.
#ifndef KILN_PREFLIGHT_HEALTH_H_
#define KILN_PREFLIGHT_HEALTH_H_

#include <cstdint>
#include <map>
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
  double load_per_cpu_max = 4.0;  // 0: not checked
  int64_t disk_free_bytes_min = int64_t{1} << 30;
};

// The findings (check "health", against "threshold") of `node`'s facts. A figure the facts lack
// or report as null is a finding too ("unknown"): a node that cannot say is not known healthy.
// Sections newer than the facts document (`load`, `disks`: an agent of an older build) are not
// checked.
// `clock_offset_ms`: the node's clock minus the asker's, when the asker measured it.
std::vector<Finding> check_health(const std::string& node, const nlohmann::json& facts,
                                  const HealthThresholds& thresholds,
                                  std::optional<int64_t> clock_offset_ms = std::nullopt);

// Across nodes of one GPU model: a node with fewer devices than most nodes of its model (a device
// that fell off the bus) is named (path "gpu.count", against "majority"). `devices` is each
// node's {model (its first device's name), number of devices}; a node without GPUs or facts is
// absent. Nodes of other models (8-GPU and 4-GPU machines in one cluster) are not compared.
struct GpuCount {
  std::string model;
  int64_t devices = 0;
};
std::vector<Finding> check_gpu_counts(const std::map<std::string, GpuCount>& devices);

}  // namespace kiln::preflight

#endif  // KILN_PREFLIGHT_HEALTH_H_
