// Placement: which CPUs each rank of a host runs on (`--cpu-bind`), planned over the cores the
// launcher may use (kiln/base/cpu_topology.h).
//
// Unbound ranks all start on the launcher's CPU and spin against each other until the kernel's
// balancer moves one, so short jobs and every benchmark pay for it; OpenMPI and NCCL bind by
// default, and so does Kiln (`cores`):
//
//   - Ranks go to NUMA nodes in proportion to the nodes' cores, consecutive ranks on the same
//     node (a ring's neighbours share memory), then each rank gets a block of whole cores (all
//     their SMT siblings) on its node:
//   - `threads` cores each when every rank's threads fit (the rest stay free);
//   - else the node's cores split as evenly as they go (blocks differ by at most one core);
//   - else (more ranks than cores) one core each, spread evenly: no core holds more than
//     ceil(ranks / cores) ranks, never all of them on one.
//
// `none` leaves the ranks where the OS puts them; `list:A/B/...` gives rank r the cpulist
// number r mod the count (`list:0-3/4-7`: ranks 0, 2, ... on CPUs 0-3, the others on 4-7).
#ifndef KILN_LAUNCH_PLACEMENT_H_
#define KILN_LAUNCH_PLACEMENT_H_

#include <string>
#include <string_view>
#include <vector>

#include <kiln/base/cpu_set.h>
#include <kiln/base/cpu_topology.h>
#include <kiln/base/result.h>

namespace kiln::launch {

struct CpuBind {
  enum class Mode { kNone, kCores, kList };
  Mode mode = Mode::kCores;
  std::vector<CpuSet> lists;  // kList only; none empty

  // "none", "cores" or "list:<cpulist>/<cpulist>/..."; errors quote the text and name the flag.
  static Result<CpuBind> parse(std::string_view text);
  std::string to_string() const;
};

struct Placement {
  // Rank r's CPUs, for r in [0, ranks); empty when the mode is kNone (nothing is bound).
  std::vector<CpuSet> rank_cpus;
  // The most ranks any one CPU is shared by: above 1 the host is oversubscribed, and ranks
  // that wait must give their CPU away quickly.
  int ranks_per_cpu_max = 0;
  // For the log: "cores: 2 ranks x 1 thread on 2 cores (2 CPUs 0-1) on 1 NUMA node: rank 0 on
  // CPUs 0 (node 0), rank 1 on CPUs 1 (node 0)".
  std::string summary;
};

// Plans `ranks` ranks of `threads` threads each over `topology`. kInvalidArgument for a list
// naming a CPU this process may not use (naming the CPU and the usable ones).
// REQUIRES: ranks >= 1, threads >= 1, !topology.cores.empty().
Result<Placement> plan_placement(const CpuTopology& topology, int ranks, int threads,
                                 const CpuBind& bind);

}  // namespace kiln::launch

#endif  // KILN_LAUNCH_PLACEMENT_H_
