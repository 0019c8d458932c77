// `kiln comm-tune [--remeasure] [--json]`: this machine's profile (kiln/comm/machine_profile.h),
// measured now or read from its cache, and what kiln_comm chooses from it.
#include <kiln/comm/machine_profile.h>

#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/command.h"

namespace kiln::cli {
namespace {

nlohmann::ordered_json choices_json(const comm::TuningChoices& c) {
  nlohmann::ordered_json ring = nlohmann::ordered_json::object();
  for (const auto& [n, bytes] : c.ring_from_bytes)
    ring[std::to_string(n)] = bytes;
  return {{"spin_us_alone", c.spin_us_alone},     {"spin_why", c.spin_why},
          {"shm_alpha_us", c.shm_alpha_us},       {"shm_copy_gbps", c.shm_copy_gbps},
          {"shm_reduce_gbps", c.shm_reduce_gbps}, {"ring_from_bytes", ring}};
}

void print_human(const comm::CachedProfile& got, const comm::TuningChoices& c) {
  const comm::MachineProfile& p = got.profile;
  std::printf("machine profile: %s (%s, %lld ms)\n", got.path.c_str(),
              got.measured ? "measured now" : "cached", static_cast<long long>(p.measure_ms));
  std::printf("  cpu: %s; L2 %llu KiB, last-level %llu KiB\n", p.cpu_model.c_str(),
              static_cast<unsigned long long>(p.l2_bytes >> 10),
              static_cast<unsigned long long>(p.llc_bytes >> 10));
  if (p.cross_core) {
    std::printf(
        "  between CPUs %d and %d: hand-off p50/p90/p99 %.3f/%.3f/%.3f us, "
        "wake-up %.1f/%.1f/%.1f us\n",
        p.cpus[0], p.cpus[1], p.handoff_ns.p50 / 1e3, p.handoff_ns.p90 / 1e3,
        p.handoff_ns.p99 / 1e3, p.wakeup_ns.p50 / 1e3, p.wakeup_ns.p90 / 1e3,
        p.wakeup_ns.p99 / 1e3);
  } else {
    std::printf("  no cross-core figures: one CPU, or CPUs too busy to measure (--remeasure)\n");
  }
  std::printf(
      "  one thread: copy %.1f GB/s, f32 reduce %.1f GB/s, dst streamed %.1f GB/s "
      "(3 x bytes, a 64 KiB message at a time)\n",
      p.copy_gbps, p.reduce_gbps, p.reduce_stream_gbps);
  std::printf("chosen: %s\n", c.spin_why.c_str());
  std::printf("  shared-memory link cost: %.3f us + 1/%.1f GB/s + reduce 1/%.1f GB/s\n",
              c.shm_alpha_us, c.shm_copy_gbps, c.shm_reduce_gbps);
  if (c.stream_out_bytes_min == UINT64_MAX) {
    std::printf("  collective outputs: stored plainly (streaming did not measure faster)\n");
  } else {
    std::printf("  collective outputs of %llu bytes and more: stored non-temporally\n",
                static_cast<unsigned long long>(c.stream_out_bytes_min));
  }
  for (const auto& [n, bytes] : c.ring_from_bytes) {
    std::printf("  allreduce on %d ranks: recursive doubling below %llu bytes, ring from there\n",
                n, static_cast<unsigned long long>(bytes));
  }
}

}  // namespace

Command add_comm_tune_command(CLI::App& parent) {
  struct Options {
    bool json = false;
    bool remeasure = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* app = parent.add_subcommand(
      "comm-tune",
      "Show this machine's measured profile (cached per boot; KILN_COMM_PROFILE) and what "
      "kiln_comm chooses from it");
  app->add_flag("--remeasure", o->remeasure, "measure again and replace the cache");
  app->add_flag("--json", o->json, "print one JSON object");
  return {app, [o](const GlobalOptions&) {
            Result<std::string> path = comm::machine_profile_path_from_process_env();
            if (!path.ok()) {
              std::cerr << "kiln comm-tune: " << path.status().to_string() << "\n";
              return kExitBadInput;
            }
            if (path->empty()) {
              std::cerr << "kiln comm-tune: KILN_COMM_PROFILE=off: kiln_comm uses its built-in "
                           "constants\n";
              return kExitBadInput;
            }
            comm::ProfileCacheOptions cache;
            cache.path = *path;
            cache.remeasure = o->remeasure;
            Result<comm::CachedProfile> got = comm::load_or_measure_machine_profile(cache);
            if (!got.ok()) {
              std::cerr << "kiln comm-tune: " << got.status().to_string() << "\n";
              return kExitFailure;
            }
            const comm::TuningChoices c = comm::tuning_choices(&got->profile);
            if (o->json) {
              nlohmann::ordered_json j;
              j["path"] = got->path;
              j["measured"] = got->measured;
              j["profile"] =
                  nlohmann::ordered_json::parse(comm::machine_profile_to_json(got->profile));
              j["chosen"] = choices_json(c);
              std::cout << j.dump() << "\n";
            } else {
              print_human(*got, c);
            }
            return kExitOk;
          }};
}

}  // namespace kiln::cli
