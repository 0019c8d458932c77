// One node's part of the link check (links.h): every node of the check runs it as one rank of a
// TCP-only communicator, the rounds run in lockstep (a barrier between rounds, so pairs of
// different rounds never share a link), and in each round the two ends of a pair measure the
// link between them with point-to-point sends: a ping-pong of small messages for the latency,
// then `bytes` each way in turn (the receiver acknowledges, so the
// time covers delivery), `iters` times, for the bandwidth (the best time counts: the
// check asks what the link can do, not what a passing hiccup did).
#ifndef KILN_PREFLIGHT_LINK_PROBE_H_
#define KILN_PREFLIGHT_LINK_PROBE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include <kiln/base/result.h>
#include <kiln/comm/communicator.h>
#include <kiln/preflight/links.h>

namespace kiln::preflight {

struct LinkProbeOptions {
  int random_rounds = 1;
  uint64_t seed = 1;
  size_t bytes = size_t{4} << 20;  // each way, per iteration
  int iters = 3;
  int pings = 20;
};

// Runs every round on `comm` (one rank per node; rank i is node i of the plan). Returns the
// measurements of the pairs this rank leads (it is their `a`). A failed send or receive fails
// the probe with comm's error, which names the peer.
Result<std::vector<LinkMeasurement>> run_link_probe(comm::Communicator& comm,
                                                    const LinkProbeOptions& options);

}  // namespace kiln::preflight

#endif  // KILN_PREFLIGHT_LINK_PROBE_H_
