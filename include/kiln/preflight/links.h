// The link matrix of `kiln preflight --level full`: which node pairs are measured in which round,
// and what the measurements say (a slow link, named with both ends, or a slow node).
//
// Rounds: each node is in at most one pair per round, so the pairs of a round do not share a
// NIC and run at once. First the ring neighbours (i, i+1 mod N) in two rounds (three when N is
// odd), then `random_rounds` rounds of a seeded random matching. O(N) pairs in all, against
// N(N-1)/2 for every pair; each node meets at least two peers (the matching usually adds a
// third: with odd N one node sits it out, and at small N it may repeat a ring pair), so
// a node slow against every peer is told from one slow link. The cost model (rounds, pairs and
// time for N up to 1,000) is link_check_cost(); docs/preflight.md has the figures.
#ifndef KILN_PREFLIGHT_LINKS_H_
#define KILN_PREFLIGHT_LINKS_H_

#include <cstdint>
#include <string>
#include <vector>

#include <kiln/preflight/stack.h>

namespace kiln::preflight {

struct LinkPair {
  int a = 0;  // the lower index: it measures and reports
  int b = 0;
};

// Rounds of disjoint pairs over `nodes` nodes (no rounds for fewer than 2).
std::vector<std::vector<LinkPair>> plan_link_rounds(int nodes, int random_rounds, uint64_t seed);

// One pair's figures: each way in turn, the slower direction is the pair's.
struct LinkMeasurement {
  int a = 0;
  int b = 0;
  double gbps = 0;        // the slower direction, gigabits per second
  double latency_us = 0;  // half the median round trip of a small message
};

struct LinkThresholds {
  // Slow: below this fraction of the median pair's bandwidth, or below the lock's floor. A
  // quarter: a link that lost most of its speed (a NIC at 10G among 100G ones, a port shaped
  // down) is named, and the spread of a busy host's measurements is not.
  double bandwidth_fraction = 0.25;
  double floor_gbps = 0;  // 0: none
  // Slow: above this multiple of the median latency and above latency_min_us. A host's
  // scheduler moves a round trip by milliseconds when its CPUs are busy; a misrouted or
  // congested link costs more than that.
  double latency_factor = 10;
  double latency_min_us = 5000;
};

// The findings ("links" check): a node slow against every peer it met (at least two) is named
// alone (path "links.<node>"); any other slow pair is named as a link with both ends (path
// "links.<a>~<b>", a finding on each end). `names[i]` is node i.
std::vector<Finding> judge_links(const std::vector<std::string>& names,
                                 const std::vector<LinkMeasurement>& measured,
                                 const LinkThresholds& thresholds);

// The model of what a link check costs on `nodes` nodes: rounds, pairs measured, and the time at
// `seconds_per_round` (each round's pairs run at once).
struct LinkCheckCost {
  int rounds = 0;
  int64_t pairs = 0;
  int64_t all_pairs = 0;  // N(N-1)/2, what measuring every pair would take
  double seconds = 0;
};
LinkCheckCost link_check_cost(int nodes, int random_rounds, double seconds_per_round);

}  // namespace kiln::preflight

#endif  // KILN_PREFLIGHT_LINKS_H_
