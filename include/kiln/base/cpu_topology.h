// CpuTopology: the cores this process may run on, with their SMT siblings and NUMA nodes, read
// from sysfs. What placement plans over (src/launch/placement.cc).
#ifndef KILN_BASE_CPU_TOPOLOGY_H_
#define KILN_BASE_CPU_TOPOLOGY_H_

#include <string>
#include <vector>

#include <kiln/base/cpu_set.h>
#include <kiln/base/result.h>

namespace kiln {

// One physical core: the logical CPUs (SMT siblings) of it that the process may use.
struct CpuCore {
  int node = 0;     // NUMA node
  int package = 0;  // socket
  int core_id = 0;  // as the kernel numbers it within its package
  CpuSet cpus;      // never empty
};

struct CpuTopology {
  // Ordered by node, package, lowest CPU: neighbours in the list share a node (and a socket)
  // wherever the machine allows, so a contiguous run of cores is a NUMA-local block.
  std::vector<CpuCore> cores;
  // True when sysfs had no topology (some containers): every CPU was taken as its own core on
  // node 0.
  bool guessed = false;

  int cpu_count() const;
  int node_count() const;
  CpuSet all_cpus() const;
  // "2 cores (2 CPUs) on 1 NUMA node", with "(topology guessed: ...)" when it was.
  std::string describe() const;
};

// Reads the topology of the CPUs in `allowed` from `sysfs_system` (normally
// "/sys/devices/system", a fake tree in tests): cpu/cpuN/topology/{core_id,physical_package_id}
// and node/nodeN/cpulist. A CPU whose files are missing is its own core on node 0 (guessed).
// REQUIRES: !allowed.empty().
CpuTopology read_cpu_topology(const std::string& sysfs_system, const CpuSet& allowed);

// The topology of the CPUs this thread may run on, from /sys/devices/system.
Result<CpuTopology> this_machine_topology();

}  // namespace kiln

#endif  // KILN_BASE_CPU_TOPOLOGY_H_
