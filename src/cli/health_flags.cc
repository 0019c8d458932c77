// The --health-* flags (health_flags.h).
#include "cli/health_flags.h"

#include <cstdint>

namespace kiln::cli {

bool HealthFlags::any_given() const {
  for (const CLI::Option* o : all)
    if (o->count() > 0) return true;
  return false;
}

HealthFlags add_health_flags(CLI::App* app, preflight::HealthThresholds* t) {
  HealthFlags flags;
  flags.all.push_back(app->add_option("--health-shm-free-bytes", t->shm_free_bytes_min,
                                      "preflight: /dev/shm free at least this")
                          ->capture_default_str()
                          ->check(CLI::NonNegativeNumber));
  flags.all.push_back(app->add_option("--health-memory-bytes", t->memory_available_bytes_min,
                                      "preflight: memory available at least this")
                          ->capture_default_str()
                          ->check(CLI::NonNegativeNumber));
  flags.all.push_back(app->add_option("--health-open-files", t->open_files_min,
                                      "preflight: the agent's open-file limit at least this")
                          ->capture_default_str()
                          ->check(CLI::NonNegativeNumber));
  flags.all.push_back(app->add_option("--health-clock-offset-ms", t->clock_offset_ms_max,
                                      "preflight: a node's clock within this of the coordinator's")
                          ->capture_default_str()
                          ->check(CLI::Range(int64_t{1}, int64_t{3'600'000})));
  flags.load = app->add_option("--health-load-per-cpu", t->load_per_cpu_max,
                               "preflight: the 1-minute load average per CPU at most this (0: not "
                               "checked; the default with --local-nodes, whose nodes share one "
                               "host)")
                   ->capture_default_str()
                   ->check(CLI::Range(0.0, 1e6));
  flags.all.push_back(flags.load);
  flags.all.push_back(
      app->add_option("--health-disk-free-bytes", t->disk_free_bytes_min,
                      "preflight: free space on the agents' work and --check-dir directories")
          ->capture_default_str()
          ->check(CLI::NonNegativeNumber));
  return flags;
}

}  // namespace kiln::cli
