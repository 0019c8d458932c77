// See wait_policy.h.
#include "comm/transport/wait_policy.h"

#include <algorithm>
#include <cstdio>

#include <kiln/base/cpu_set.h>
#include <kiln/comm/machine_profile.h>

#include "comm/topology.h"

namespace kiln::comm {

int cpu_sharers(const std::vector<RankRecord>& records, int me) {
  const RankRecord& mine = records[static_cast<size_t>(me)];
  if (mine.machine.empty() || mine.cpus.empty()) return 1;
  Result<CpuSet> my_cpus = CpuSet::parse(mine.cpus);
  if (!my_cpus.ok()) return 1;
  int sharers = 1;
  for (const RankRecord& other : records) {
    if (other.rank == me || other.machine != mine.machine || other.cpus.empty()) continue;
    Result<CpuSet> cpus = CpuSet::parse(other.cpus);
    if (cpus.ok() && !cpus->intersect(*my_cpus).empty()) ++sharers;
  }
  return sharers;
}

int64_t spin_ns_alone(const MachineProfile* profile) {
  if (profile == nullptr || !profile->cross_core || profile->wakeup_ns.p99 <= 0) {
    return kSpinNsAlone;
  }
  const double spin = kSpinWakeupMultiple * profile->wakeup_ns.p99;
  return std::clamp(static_cast<int64_t>(spin), kSpinNsMin, kSpinNsMax);
}

WaitPolicy choose_wait_policy(int sharers, const std::string& my_cpus,
                              const MachineProfile* profile, std::optional<int64_t> spin_us,
                              std::optional<int64_t> yield_us) {
  WaitPolicy p;
  p.cpu_sharers = sharers;
  const std::string where = my_cpus.empty() ? std::string("its CPUs") : "CPUs " + my_cpus;
  if (sharers > 1) {
    p.spin_ns = kSpinNsShared;
    p.why = "shares " + where + " with " + std::to_string(sharers - 1) +
            (sharers == 2 ? " other rank" : " other ranks");
  } else {
    p.spin_ns = spin_ns_alone(profile);
    p.why = "alone on " + where;
    if (p.spin_ns != kSpinNsAlone || (profile != nullptr && profile->cross_core)) {
      const bool capped = p.spin_ns == kSpinNsMin || p.spin_ns == kSpinNsMax;
      char buf[128];
      std::snprintf(buf, sizeof(buf),
                    "; spin %.0f us: %.1f x this machine's p99 wake-up of %.1f us%s",
                    static_cast<double>(p.spin_ns) / 1000.0, kSpinWakeupMultiple,
                    profile->wakeup_ns.p99 / 1000.0, capped ? ", within [5 us, 1 ms]" : "");
      p.why += buf;
    } else {
      p.why += "; spin 20 us: machine not measured";
    }
  }
  if (spin_us) {
    p.spin_ns = *spin_us * 1000;
    p.why += "; spin from KILN_COMM_SPIN_US";
  }
  p.spin_ns_overlapped = std::min(p.spin_ns, kSpinNsAlone);
  if (spin_us) p.spin_ns_overlapped = p.spin_ns;
  if (yield_us) {
    p.yield_ns = *yield_us * 1000;
    p.why += "; yield from KILN_COMM_YIELD_US";
  }
  return p;
}

}  // namespace kiln::comm
