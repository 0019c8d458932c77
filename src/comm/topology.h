// Topology: who sits where, and the ring order that follows it.
//
// Every rank publishes a RankRecord (its host and failure-domain labels, outermost first, as in
// KILN_TOPOLOGY=rack=r1,switch=s3). From the full set, every rank computes the same ring order:
// ranks sorted by their label values level by level (in rank 0's key order), then by host, then by
// rank. Consecutive ranks then share as many domains as possible, so the ring enters and leaves
// each domain exactly once: 2 crossings per domain boundary, the minimum for a ring.
#ifndef KILN_COMM_TOPOLOGY_H_
#define KILN_COMM_TOPOLOGY_H_

#include <string>
#include <utility>
#include <vector>

#include <kiln/base/result.h>

namespace kiln::comm {

using Labels = std::vector<std::pair<std::string, std::string>>;

struct RankRecord {
  int rank = 0;
  std::string host;
  int pid = 0;
  Labels labels;
  std::string tcp_address;  // where its TCP listener is; empty when it has none
  int tcp_port = 0;
  // The kernel's boot id: ranks with the same one run on one machine and share its CPUs
  // (fake hosts and containers included). Empty: unknown.
  std::string machine;
  std::string cpus;  // the CPUs it may run on (cpulist); empty: unknown
  // Its machine's measured shared-memory figures (kiln/comm/machine_profile.h), from which every
  // rank derives the same link cost (tuning.h slowest_link_cost); 0: not measured.
  double handoff_us = 0;
  double copy_gbps = 0;
  double reduce_gbps = 0;
};

// JSON for the rendezvous store, and back (kInvalidArgument names the bad field).
std::string record_to_json(const RankRecord& record);
Result<RankRecord> record_from_json(const std::string& json);

// Parses "rack=r1,switch=s3" (KILN_TOPOLOGY). Keys and values are non-empty; keys unique.
Result<Labels> parse_topology(const std::string& text);

// The ring order described above. REQUIRES: records[r].rank == r for every r.
std::vector<int> ring_order(const std::vector<RankRecord>& records);

// How many adjacent pairs of `ring` (wrap-around included) differ at `level`: a label index in
// rank 0's key order, or the number of keys to compare hosts.
int domain_crossings(const std::vector<int>& ring, const std::vector<RankRecord>& records,
                     size_t level);

// The ranks of each host, hosts in the order they first appear in `ring`, ranks in ring order.
std::vector<std::vector<int>> hosts_in_ring_order(const std::vector<int>& ring,
                                                  const std::vector<RankRecord>& records);

}  // namespace kiln::comm

#endif  // KILN_COMM_TOPOLOGY_H_
