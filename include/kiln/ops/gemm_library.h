// Which library kiln_ops' GEMMs call, chosen by measuring both on the machine.
//
// OpenBLAS picks its kernels from a table of CPU models when it loads (Kiln forces the core for
// the CPU's ISA when the table does not know the model: kiln/ops/blas.h); oneDNN (Debian's
// libdnnl, what PyTorch uses on CPUs) dispatches on the ISA flags at run time. Neither is the
// faster on every CPU: on the Intel Xeon (family 6 model 207) VMs oneDNN 2.6's sgemm ran
// GPT-2's shapes 1.02-1.36x faster than OpenBLAS 0.3.21's Cooperlake core; on the AMD EPYC
// (Zen 5) VMs OpenBLAS reached 213 GFLOP/s on one thread (`bench/ops/gemm_choice` measures both
// side by side; docs/ops.md keeps the tables). So the choice is a measurement, not a constant:
// a short race of both libraries on two of GPT-2's GEMMs, single-threaded as kiln_ops calls
// them, cached for the boot (kiln/base/machine_cache.h) so that every process on the machine
// makes the same choice, unless KILN_GEMM names a library.
//
// Both are called single-threaded inside kiln_ops' own pool, one block of output rows per task,
// each element computed by one call over the whole reduction: a thread count fixes every bit of a
// result. Another thread count may differ in the last bits where the library's kernel orders the
// sums of a call's last rows otherwise (both libraries' AVX2 kernels on an AMD Zen 3; not their
// AVX-512 kernels on the Intel Xeons seen: docs/ops.md, Threads). The two libraries' results may
// differ in the last bits.
#ifndef KILN_OPS_GEMM_LIBRARY_H_
#define KILN_OPS_GEMM_LIBRARY_H_

#include <cstdint>
#include <string>
#include <string_view>

#include <kiln/base/result.h>

namespace kiln::ops {

enum class GemmLibrary : uint8_t { kOpenBlas, kOneDnn };

std::string_view gemm_library_name(GemmLibrary library);  // "openblas", "onednn"
// "openblas" or "onednn"; kInvalidArgument naming the text and the accepted values.
Result<GemmLibrary> parse_gemm_library(std::string_view name);

// One race: both libraries on the same GEMMs, each run of one right after the same run of the
// other, so that the machine's drift (these VMs move 10-20% from minute to minute) hits both.
struct GemmRace {
  std::string machine;    // kiln::this_boot_id(): a race holds for one boot
  std::string cpu_model;  // kiln::this_cpu_model()
  std::string openblas_core;
  std::string onednn_version;
  double openblas_gflops = 0;
  double onednn_gflops = 0;
  // The median over every shape and repetition of oneDNN's speed over OpenBLAS's in the same
  // pair of runs: what the choice is made on (robust to a run that a neighbour slowed down).
  double onednn_over_openblas = 0;
  std::string measured_at;
};

// oneDNN must beat OpenBLAS by this much to be chosen: a switch of library has to stand clear
// of the race's noise (a few percent between runs on these VMs), so that two machines of one
// kind do not pick differently for nothing.
inline constexpr double kGemmSwitchRatio = 1.03;

// The rule: oneDNN iff race.onednn_over_openblas >= kGemmSwitchRatio.
GemmLibrary choose_gemm_library(const GemmRace& race);

// Runs the race now (about a second on one thread). kCorruption if the libraries disagree on
// the exact-integer inputs.
Result<GemmRace> race_gemm_libraries();

std::string gemm_race_to_json(const GemmRace& race);
// kInvalidArgument naming `what` and the field.
Result<GemmRace> gemm_race_from_json(std::string_view json, std::string_view what);

struct GemmChoice {
  GemmLibrary library = GemmLibrary::kOpenBlas;
  std::string
      why;        // "KILN_GEMM=onednn", "race: oneDNN 125.3 vs OpenBLAS (Cooperlake) 104.1 GFLOP/s"
  GemmRace race;  // when `why` is a race
};

// The choice for this process: KILN_GEMM (openblas | onednn | auto; unset or empty: auto), and
// for auto the race cached at KILN_GEMM_CACHE or kiln_cache_dir()/gemm-race.json, run and
// cached when missing or of another boot, CPU model or OpenBLAS core (the `kiln` binary forces
// the core where OpenBLAS falls back; a test binary does not, and must not reuse its race). Made
// once per process (later calls return the first answer); kInvalidArgument naming KILN_GEMM for a
// bad value. A race that cannot be run or cached is not an error: OpenBLAS, with the reason in
// `why`.
Result<GemmChoice> process_gemm_choice();

}  // namespace kiln::ops

#endif  // KILN_OPS_GEMM_LIBRARY_H_
