// See comm_test_util.h.
#include "comm/testing/comm_test_util.h"

#include <atomic>

namespace kiln::comm::testing {

Result<std::unique_ptr<ThreadCluster>> ThreadCluster::create(const ClusterSpec& spec) {
  auto cluster = std::unique_ptr<ThreadCluster>(new ThreadCluster());
  cluster->store_ = make_memory_store();
  static std::atomic<int> generation{0};  // distinct prefixes: tests may build many clusters
  const std::string prefix = "test/" + std::to_string(generation++);
  cluster->comms_.resize(spec.world_size);
  std::vector<Status> statuses(spec.world_size);
  std::vector<std::thread> threads;
  for (int r = 0; r < spec.world_size; ++r) {
    threads.emplace_back([&, r] {
      CommOptions o;
      o.rank = r;
      o.world_size = spec.world_size;
      o.host = spec.ranks_per_host > 0 ? "h" + std::to_string(r / spec.ranks_per_host) : "h0";
      o.transport = spec.transport;
      o.timeout_ms = spec.timeout_ms;
      o.setup_timeout_ms = 60'000;
      o.job_token = "test-token";
      o.store_prefix = prefix;
      o.tcp_interface = "127.0.0.1";
      o.allreduce_algorithm = spec.allreduce_algorithm;
      o.shm_message_bytes = spec.shm_message_bytes;
      o.shm_slots = spec.shm_slots;
      o.tcp_message_bytes = spec.tcp_message_bytes;
      o.tcp_slots = spec.tcp_slots;
      o.tcp_connections_per_peer = spec.tcp_connections_per_peer;
      o.flight_recorder_dir = spec.flight_recorder_dir;
      Result<std::unique_ptr<Communicator>> c =
          Communicator::create(o, cluster->store_.get(), Logger());
      if (c.ok()) {
        cluster->comms_[r] = std::move(*c);
      } else {
        statuses[r] = c.status();
      }
    });
  }
  for (auto& t : threads)
    t.join();
  for (const Status& s : statuses) {
    if (!s.ok()) return s;
  }
  return cluster;
}

ThreadCluster::~ThreadCluster() {
  std::vector<std::thread> threads;
  for (auto& comm : comms_)
    threads.emplace_back([&comm] { comm.reset(); });
  for (std::thread& t : threads)
    t.join();
}

std::vector<Status> ThreadCluster::run(const std::function<Status(int rank)>& fn) {
  std::vector<Status> statuses(comms_.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < size(); ++r) {
    threads.emplace_back([&, r] { statuses[r] = fn(r); });
  }
  for (auto& t : threads)
    t.join();
  return statuses;
}

}  // namespace kiln::comm::testing
