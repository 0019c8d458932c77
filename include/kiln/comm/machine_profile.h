// MachineProfile: what kiln_comm's tuning depends on, measured on the machine it runs on instead
// of taken from constants measured on one CPU: how long a cross-core hand-off of a cache line
// takes, how long a sleeping thread takes to run again after a futex wake, and how fast one
// thread copies and reduces buffers that live in memory. comm's tuning (src/comm/tuning.h,
// transport/wait_policy.h) turns these into the spin window, the shared-memory link cost and so
// the algorithm crossover; docs/comm.md ("Tuning from the machine") says how.
//
// Measuring takes about 0.2 s and wants both CPUs it measures between to be idle, so it happens
// once per machine and boot: the launcher measures before it starts ranks, and every process
// after it reads the cached profile (`kiln comm-tune` shows it and measures it again on request).
// The cache is one JSON file (kiln/base/machine_cache.h: an advisory lock, so processes that
// start together measure once between them); a profile of another boot, CPU model or format
// version is measured anew.
//
// Cache file grammar (JSON, one object; every field required):
//   {"version": 2, "machine": BOOT_ID, "cpu_model": TEXT, "l2_bytes": N, "llc_bytes": N,
//    "cpus": [A, B], "cross_core": BOOL,
//    "handoff_ns": {"p50": X, "p90": X, "p99": X}, "wakeup_ns": {"p50": X, "p90": X, "p99": X},
//    "copy_gbps": X, "reduce_gbps": X, "reduce_stream_gbps": X, "measure_ms": N,
//    "measured_at": ISO_TIME}
#ifndef KILN_COMM_MACHINE_PROFILE_H_
#define KILN_COMM_MACHINE_PROFILE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <kiln/base/result.h>
#include <kiln/comm/bootstrap.h>

namespace kiln::comm {

inline constexpr int kMachineProfileVersion = 2;

struct LatencyNs {
  double p50 = 0;
  double p90 = 0;
  double p99 = 0;
};

struct MachineProfile {
  int version = kMachineProfileVersion;
  std::string machine;    // kiln::this_boot_id(): a profile is valid for one boot
  std::string cpu_model;  // kiln::this_cpu_model()
  uint64_t l2_bytes = 0;  // of one core; 0 when sysfs does not say
  uint64_t llc_bytes = 0;
  std::vector<int> cpus;    // the two CPUs the cross-core figures were taken between
  bool cross_core = false;  // false: fewer than two CPUs to measure on; the latencies are 0
  LatencyNs handoff_ns;     // one way: a store on one core seen by a spinning load on the other
  LatencyNs wakeup_ns;      // FUTEX_WAKE on one core to the waiter running on the other
  double copy_gbps = 0;     // memcpy of buffers larger than the last-level cache, one thread
  double reduce_gbps = 0;   // f32 dst = a + b of such buffers, counting 3 x bytes, one thread
  // The same with dst stored non-temporally (ReduceArgs::stream_dst): whether a collective's
  // large output should bypass the cache on this machine (tuning.h stream_output_bytes_min).
  double reduce_stream_gbps = 0;
  int64_t measure_ms = 0;   // how long measuring took
  std::string measured_at;  // UTC, ISO 8601
};

// Each cross-core measurement also stops at a time budget (50 ms hand-off, 150 ms wake-up), so
// that busy CPUs make it noisier, not slower; too few samples leave cross_core false.
struct MeasureOptions {
  int handoff_round_trips = 20'000;  // ~5 ms at 0.1 us a hand-off
  int wakeups = 300;                 // ~30 ms at ~100 us a sample (each waits for a sleep)
  size_t bandwidth_bytes = 0;        // per buffer; 0: 2 x the last-level cache, within bounds
};

// Measures this machine. Threads it starts bind themselves to two CPUs of this process's
// affinity, or of the machine's online CPUs when the process has only one. Never fails for want
// of a second CPU, a CPU it cannot bind or CPUs too busy to answer (cross_core is then false);
// kCorruption if the reduction computes a wrong sum.
Result<MachineProfile> measure_machine_profile(const MeasureOptions& options = {});

std::string machine_profile_to_json(const MachineProfile& profile);
// kInvalidArgument naming `what` and the field for a missing, mistyped or out-of-range field.
Result<MachineProfile> machine_profile_from_json(std::string_view json, std::string_view what);

// Where the profile is cached when KILN_COMM_PROFILE (comm_env.h) does not say:
// $XDG_CACHE_HOME/kiln/machine-profile.json, else $HOME/.cache/kiln/..., else
// /tmp/kiln-UID/... (variables looked up through `env`; empty ones count as unset).
std::string default_machine_profile_path(const EnvLookup& env);

// The cache path of this process's KILN_COMM_PROFILE (or the default one); empty when it says
// `off`. kInvalidArgument naming the variable for a path that is not absolute.
Result<std::string> machine_profile_path_from_process_env();

struct ProfileCacheOptions {
  std::string path;                  // the cache file; REQUIRES: not empty
  bool remeasure = false;            // measure even if the cached profile is valid
  int64_t lock_timeout_ms = 10'000;  // how long to wait for another process that is measuring
  MeasureOptions measure;
};

struct CachedProfile {
  MachineProfile profile;
  bool measured = false;  // this call measured it (else read it from the cache)
  std::string path;
};

// The cached profile if it is of this boot, CPU model and version; else measures under the
// cache's lock (re-reading first: another process may just have written it) and writes it
// durably. kTimeout naming the path if the lock is held longer than lock_timeout_ms; kIoError
// naming the path if the directory or file cannot be made. A corrupt cache is measured over.
Result<CachedProfile> load_or_measure_machine_profile(const ProfileCacheOptions& options);

// What kiln_comm chooses on a machine with `profile` (null: an unmeasured one), for
// `kiln comm-tune` and the docs. A communicator applies the same rules (plus, for the link cost,
// the slowest machine of its group, and for the spin, whether its ranks share CPUs).
struct TuningChoices {
  double spin_us_alone = 0;  // how long a rank alone on its CPUs spins before it yields
  std::string spin_why;
  double shm_alpha_us = 0;  // the shared-memory link cost the algorithm choice uses
  double shm_copy_gbps = 0;
  double shm_reduce_gbps = 0;
  // For groups of 2, 4, 8 and 16 ranks on shared memory: the smallest power-of-two size in
  // bytes at which allreduce takes the ring rather than recursive doubling.
  std::vector<std::pair<int, uint64_t>> ring_from_bytes;
  // Collectives write outputs of this many bytes and more with non-temporal stores; UINT64_MAX:
  // never (streaming did not measure faster, or nothing was measured).
  uint64_t stream_out_bytes_min = UINT64_MAX;
};
TuningChoices tuning_choices(const MachineProfile* profile);

}  // namespace kiln::comm

#endif  // KILN_COMM_MACHINE_PROFILE_H_
