// Tuning: which algorithm an op uses, from a cost model of its size, the group size and the
// transport (NCCL's tuning.cc idea, much smaller). Kept apart from the algorithms so that the
// choice can be tested and overridden (CommOptions::allreduce_algorithm) without touching them.
//
// The model, per step: alpha (latency) + bytes * beta (moving them) + reduced bytes * gamma
// (the reduction pass over memory). Ring allreduce takes 2(n-1) steps of bytes/n and reduces
// (n-1)/n of the buffer; recursive doubling takes ceil(log2 n) steps of the whole buffer (two more
// when n is not a power of two) and reduces all of it at every step.
#ifndef KILN_COMM_TUNING_H_
#define KILN_COMM_TUNING_H_

#include <cstddef>
#include <vector>

#include <kiln/comm/communicator.h>

namespace kiln::comm {

struct LinkCost {
  double alpha_us = 0;           // per message hand-off
  double beta_us_per_byte = 0;   // moving bytes across the link
  double gamma_us_per_byte = 0;  // one reduction pass (read two, write one)
};

// The built-in costs, used where a machine was not measured (KILN_COMM_PROFILE=off, or the
// profile could not be had): measured once on a 2 vCPU EPYC VM, a shared-memory hand-off
// ~0.3 us and ~10 GB/s per direction; loopback TCP ~20 us per message and ~2.5 GB/s; the
// reduction pass ~10 GB/s.
LinkCost shm_link_cost();
// TCP stays a constant: what dominates it is the wire between hosts, which a machine's own
// profile cannot see (loopback is not the link); CommOptions::allreduce_algorithm overrides.
LinkCost tcp_link_cost();

// The shared-memory cost on a measured machine: alpha is one cross-core hand-off (p50), beta one
// byte copied by one thread, gamma one result byte of a reduction (which reads two and writes
// one). A figure the profile lacks (0: not measured) comes from shm_link_cost().
LinkCost shm_link_cost_from(double handoff_us, double copy_gbps, double reduce_gbps);

// The cost every rank of a group uses: field by field the slowest of its ranks' costs. All ranks
// see the same records, so all make the same choice of algorithm, whatever machine each is on.
// REQUIRES: !costs.empty().
LinkCost slowest_link_cost(const std::vector<LinkCost>& costs);

double ring_allreduce_cost_us(size_t bytes, int n, const LinkCost& c);
double recursive_doubling_allreduce_cost_us(size_t bytes, int n, const LinkCost& c);

// Ring or recursive doubling, whichever the model says is faster (ties go to the ring).
Algorithm choose_allreduce(size_t bytes, int n, const LinkCost& c);

// The smallest power of two of bytes (up to 1 GiB) at which choose_allreduce picks the ring for
// a group of n; SIZE_MAX when it never does. For the log and docs: where the crossover lies.
size_t ring_crossover_bytes(int n, const LinkCost& c);

// Collectives write their output with non-temporal stores (Xfer::stream_out) from this many
// bytes of output on, on a machine whose profile measured that faster; SIZE_MAX: never.
// Why: a collective writes its output a message at a time, so each of its reduce and copy calls
// is small, but an output many times a core's L2 is not read back from cache, and a plain store
// first reads every line it writes (read-for-ownership): a quarter more memory traffic for a
// reduction, half more for a copy. Where streaming stores measured at least kStreamOutGain x
// plain (reduce_stream_gbps against reduce_gbps, one message at a time over buffers larger than
// the cache), outputs of kStreamOutL2Multiple x L2 and more stream; an output within a few L2s
// is likely read again from cache by the caller, and stays there.
inline constexpr double kStreamOutGain = 1.05;
inline constexpr uint64_t kStreamOutL2Multiple = 4;
size_t stream_output_bytes_min(double reduce_gbps, double reduce_stream_gbps, uint64_t l2_bytes);

// Broadcast and reduce use a binomial tree up to this size and a pipelined chain beyond.
// The tree's log2(n) hops beat the chain's n-1 only while the message is small; 64 KiB is one
// shared-memory message, where the chain cannot pipeline yet.
inline constexpr size_t kTreeBytesMax = 64 << 10;

}  // namespace kiln::comm

#endif  // KILN_COMM_TUNING_H_
