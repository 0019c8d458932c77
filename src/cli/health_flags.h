// The --health-* flags of preflight's health thresholds (include/kiln/preflight/health.h), shared
// by `kiln serve` (its gate and /v1/preflight) and `kiln preflight --facts` (offline).
#ifndef KILN_CLI_HEALTH_FLAGS_H_
#define KILN_CLI_HEALTH_FLAGS_H_

#include <CLI/CLI.hpp>

#include <vector>

#include <kiln/preflight/health.h>

namespace kiln::cli {

// The options add_health_flags made, to ask after parsing which were given.
struct HealthFlags {
  // --health-load-per-cpu: whether it was given decides its default where every node shares
  // one host (kiln serve --local-nodes).
  CLI::Option* load = nullptr;
  std::vector<CLI::Option*> all;

  bool any_given() const;
};

// Adds the flags to `app`, each writing its field of `thresholds` (defaults shown in --help).
HealthFlags add_health_flags(CLI::App* app, preflight::HealthThresholds* thresholds);

}  // namespace kiln::cli

#endif  // KILN_CLI_HEALTH_FLAGS_H_
