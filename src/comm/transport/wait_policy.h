// WaitPolicy: how long a waiting op spins, then yields, before it sleeps (transport/progress.h),
// chosen per communicator from where its ranks run and from this machine's measured wake-up
// latency (kiln/comm/machine_profile.h), with an override.
//
// A rank whose CPUs no other rank of the job shares (on the same machine: the same boot id)
// spins long enough to outlast its peer's wake-up: kSpinWakeupMultiple x the measured p99 of a
// futex wake-up, within [kSpinNsMin, kSpinNsMax]. Why the wake-up: a rank that sleeps makes its
// peer wait one wake-up for its next message; if that peer's own spin is shorter, the peer falls
// asleep too, and from then on every message costs a wake-up (on the Intel Xeon VMs, whose
// wake-up is ~35-40 us at the median and up to milliseconds at p99, a 2-rank 8-byte allreduce
// that spun 20 us took 330-1169 us in 4 of 10 runs). A spin that outlasts the wake-up breaks the
// chain at its first link. Unmeasured machines spin kSpinNsAlone.
//
// A rank that shares a CPU with another (more ranks than cores, or a --cpu-bind list that
// overlaps) spins only kSpinNsShared before it yields: the peer it waits for may need this very
// CPU, and every microsecond spent spinning is one the peer cannot run. Measured on 2 vCPUs (AMD
// EPYC Zen 5), 4 ranks over 2 fake hosts bound two to a core, allreduce of 16-64 bytes after the
// first size: about 75 us spinning 20 us, 65 us spinning 1 us, 19 us not spinning at all. Both
// then yield for kYieldNs before they sleep (alone on a CPU, a yield returns at once: it is a
// spin with a system call). Ops that overlap the caller's computation (submit()) run on the
// communicator's worker thread beside the rank's compute threads and spin at most kSpinNsAlone.
//
//   KILN_COMM_SPIN_US   overrides the spin, in microseconds [0, 1e6]
//   KILN_COMM_YIELD_US  overrides the yield window, in microseconds [0, 1e6]
#ifndef KILN_COMM_TRANSPORT_WAIT_POLICY_H_
#define KILN_COMM_TRANSPORT_WAIT_POLICY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <kiln/base/result.h>

namespace kiln::comm {

struct RankRecord;
struct MachineProfile;

inline constexpr int64_t kSpinNsAlone = 20'000;  // unmeasured machines only
inline constexpr double kSpinWakeupMultiple = 2.0;
// Bounds of the measured spin: below 5 us a spin is shorter than the hand-offs of a few
// messages; above 1 ms a waiting rank would burn a core that a backward pass could use.
inline constexpr int64_t kSpinNsMin = 5'000;
inline constexpr int64_t kSpinNsMax = 1'000'000;
inline constexpr int64_t kSpinNsShared = 0;
inline constexpr int64_t kYieldNs = 200'000;

struct WaitPolicy {
  int64_t spin_ns = kSpinNsAlone;  // ops the caller waits for (run(), or run inline)
  // Ops the communicator's worker thread runs while the caller computes (submit(): DDP's
  // gradient buckets): the worker shares the rank's CPUs with its compute threads, so it spins
  // at most kSpinNsAlone, whatever the wake-up; a long spin there would take the backward's CPU.
  int64_t spin_ns_overlapped = kSpinNsAlone;
  int64_t yield_ns = kYieldNs;
  int cpu_sharers = 1;  // ranks (this one included) whose CPUs overlap this rank's
  std::string why;      // "alone on CPUs 0", "shares CPUs 0 with 1 other rank", or the override
};

// How many ranks of `records`, `me` included, run on the same machine as `me` with CPUs that
// overlap its own. Records without a machine or CPU set (a world of one) count only themselves.
int cpu_sharers(const std::vector<RankRecord>& records, int me);

// The spin of a rank alone on its CPUs on the machine `profile` measured (null: unmeasured).
int64_t spin_ns_alone(const MachineProfile* profile);

// The policy for `sharers` (see above) on the machine `profile` measured (null: unmeasured),
// with the overrides applied when given.
WaitPolicy choose_wait_policy(int sharers, const std::string& my_cpus,
                              const MachineProfile* profile, std::optional<int64_t> spin_us,
                              std::optional<int64_t> yield_us);

}  // namespace kiln::comm

#endif  // KILN_COMM_TRANSPORT_WAIT_POLICY_H_
