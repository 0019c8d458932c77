// A small measurement of this machine (a few hundred bytes of text), cached in a file so that
// it is taken once per boot rather than by every process: comm's MachineProfile
// (kiln/comm/machine_profile.h) and ops' GEMM library race (kiln/ops/gemm_library.h).
//
// Readers take the file without a lock (it is only ever replaced whole, by rename); a process
// that finds it missing or stale takes an advisory lock on PATH.lock, reads again (another may
// just have written it), measures, and writes it durably (write_file_durably). So processes that
// start together measure once between them, and a crash mid-write leaves the old file or none.
#ifndef KILN_BASE_MACHINE_CACHE_H_
#define KILN_BASE_MACHINE_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include <kiln/base/function_ref.h>
#include <kiln/base/result.h>

namespace kiln {

struct MachineCacheOptions {
  std::string path;                  // the cache file; REQUIRES: not empty
  bool remeasure = false;            // measure even if the cached text is valid
  int64_t lock_timeout_ms = 10'000;  // how long to wait for a process that is measuring
  size_t bytes_max = 64 << 10;       // a larger file is not a cached measurement
};

struct CachedText {
  std::string text;
  bool measured = false;  // this call measured it (else it was read from the file)
};

// The cached text at options.path if `valid` accepts it, else `measure`'s text, written there.
// `valid` returns OK for a text still good on this machine and boot. kTimeout naming PATH.lock
// when the lock is held longer than lock_timeout_ms; kIoError naming the path when the directory
// or file cannot be made or written; `measure`'s own error as it is.
Result<CachedText> load_or_measure_cached(const MachineCacheOptions& options,
                                          FunctionRef<Status(const std::string&)> valid,
                                          FunctionRef<Result<std::string>()> measure);

// The directory per-user caches go in: XDG_CACHE_HOME/kiln, else HOME/.cache/kiln, else
// /tmp/kiln-UID (an empty value counts as unset).
std::string kiln_cache_dir(const std::string& xdg_cache_home, const std::string& home);

// This boot's id (/proc/sys/kernel/random/boot_id): processes on one machine read the same, and
// a reboot changes it. Empty if unreadable.
std::string this_boot_id();

// "GenuineIntel family 6 model 207: Intel(R) Xeon(R) Processor", from /proc/cpuinfo.
std::string this_cpu_model();

}  // namespace kiln

#endif  // KILN_BASE_MACHINE_CACHE_H_
