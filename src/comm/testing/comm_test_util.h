// Test support: ranks as threads in one process (Gloo's `spawn`), over the real transports.
//
// A ThreadCluster builds n communicators concurrently (rendezvous needs every rank at once) on an
// in-process store, then runs a function on every rank in parallel. Hosts can be faked per rank
// ("h0", "h1", ...), which gives TCP links between ranks of different fake hosts and shared memory
// inside each, so multi-host code paths run on one machine.
#ifndef KILN_COMM_TESTING_COMM_TEST_UTIL_H_
#define KILN_COMM_TESTING_COMM_TEST_UTIL_H_

#include <kiln/comm/communicator.h>
#include <kiln/comm/store.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace kiln::comm::testing {

struct ClusterSpec {
  int world_size = 2;
  TransportPolicy transport = TransportPolicy::kAuto;
  // Fake hosts: rank r lives on host "h" + (r / ranks_per_host). 0: every rank on one host.
  int ranks_per_host = 0;
  int64_t timeout_ms = 20'000;
  Algorithm allreduce_algorithm = Algorithm::kAuto;
  // Smaller than the defaults so that tests exercise many pieces and slot wrap-around.
  size_t shm_message_bytes = 4096;
  size_t shm_slots = 4;
  size_t tcp_message_bytes = 8192;
  size_t tcp_slots = 4;
  int tcp_connections_per_peer = 1;
  std::string flight_recorder_dir;
};

class ThreadCluster {
 public:
  // Builds every rank's communicator; fails with the first rank's error.
  static Result<std::unique_ptr<ThreadCluster>> create(const ClusterSpec& spec);

  // Destroys the communicators at once, as the ranks' processes would end: each one's orderly
  // close waits for its peers' (communicator.cc), which sequential destruction would not give.
  ~ThreadCluster();

  int size() const { return static_cast<int>(comms_.size()); }
  Communicator& comm(int rank) { return *comms_[rank]; }

  // Runs fn(rank) on every rank in its own thread; returns the statuses by rank.
  std::vector<Status> run(const std::function<Status(int rank)>& fn);

 private:
  std::unique_ptr<Store> store_;
  std::vector<std::unique_ptr<Communicator>> comms_;
};

}  // namespace kiln::comm::testing

#endif  // KILN_COMM_TESTING_COMM_TEST_UTIL_H_
