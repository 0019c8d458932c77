// WaitPolicy: how long a waiting op spins, then yields, before it sleeps (transport/progress.h),
// chosen per communicator from where its ranks run, with an override.
//
// A rank whose CPUs no other rank of the job shares (on the same machine: the same boot id) spins
// for kSpinNsAlone: a cross-core hand-off costs ~0.1-0.4 us and a blocking wake-up 20-25 us on
// these VMs, so a small collective never sleeps. A rank that shares a CPU with another (more
// ranks than cores, or a --cpu-bind list that overlaps) spins only kSpinNsShared before it
// yields: the peer it waits for may need this very CPU, and every microsecond spent spinning is
// one the peer cannot run. Measured on 2 vCPUs (AMD EPYC Zen 5), 4 ranks over 2 fake hosts bound
// two to a core, allreduce of 16-64 bytes after the first size: about 75 us spinning 20 us,
// 65 us spinning 1 us, 19 us not spinning at all (`pause` is long on these CPUs, and the spin
// reads the clock only every 64 of them). Both then yield for kYieldNs before they sleep.
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

inline constexpr int64_t kSpinNsAlone = 20'000;
inline constexpr int64_t kSpinNsShared = 0;
inline constexpr int64_t kYieldNs = 200'000;

struct WaitPolicy {
  int64_t spin_ns = kSpinNsAlone;
  int64_t yield_ns = kYieldNs;
  int cpu_sharers = 1;  // ranks (this one included) whose CPUs overlap this rank's
  std::string why;      // "alone on CPUs 0", "shares CPUs 0 with 1 other rank", or the override
};

// How many ranks of `records`, `me` included, run on the same machine as `me` with CPUs that
// overlap its own. Records without a machine or CPU set (a world of one) count only themselves.
int cpu_sharers(const std::vector<RankRecord>& records, int me);

// The policy for `sharers` (see above), with the overrides applied when given.
WaitPolicy choose_wait_policy(int sharers, const std::string& my_cpus,
                              std::optional<int64_t> spin_us, std::optional<int64_t> yield_us);

}  // namespace kiln::comm

#endif  // KILN_COMM_TRANSPORT_WAIT_POLICY_H_
