// See wait_policy.h.
#include "comm/transport/wait_policy.h"

#include <kiln/base/cpu_set.h>

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

WaitPolicy choose_wait_policy(int sharers, const std::string& my_cpus,
                              std::optional<int64_t> spin_us, std::optional<int64_t> yield_us) {
  WaitPolicy p;
  p.cpu_sharers = sharers;
  const std::string where = my_cpus.empty() ? std::string("its CPUs") : "CPUs " + my_cpus;
  if (sharers > 1) {
    p.spin_ns = kSpinNsShared;
    p.why = "shares " + where + " with " + std::to_string(sharers - 1) +
            (sharers == 2 ? " other rank" : " other ranks");
  } else {
    p.why = "alone on " + where;
  }
  if (spin_us) {
    p.spin_ns = *spin_us * 1000;
    p.why += "; spin from KILN_COMM_SPIN_US";
  }
  if (yield_us) {
    p.yield_ns = *yield_us * 1000;
    p.why += "; yield from KILN_COMM_YIELD_US";
  }
  return p;
}

}  // namespace kiln::comm
