// Communicator: a group of ranks that run collectives together.
//
//   KILN_ASSIGN_OR_RETURN(auto comm, Communicator::create(options, store.get(), log, &metrics));
//   Work w = comm->allreduce(grad, grad, n, DataType::kF32, ReduceOp::kAvg);   // async
//   ...backward pass continues...
//   KILN_RETURN_IF_ERROR(w.wait());
//   KILN_RETURN_IF_ERROR(comm->run(CollectiveArgs::barrier()));                // blocking
//
// Ranks on one host talk through shared memory, ranks on different hosts over TCP (or TCP for
// everything with TransportPolicy::kTcp). The ring is ordered by failure domain (the `topology`
// labels, outermost first, then host), so it crosses each domain boundary as few times as a ring
// can. Allreduce across several hosts is hierarchical: reduce inside each host over shared
// memory, allreduce between hosts, broadcast inside each host.
//
// Ops execute one at a time, in submission order, on the communicator's worker thread; every rank
// must submit the same collectives in the same order (point-to-point pairs must match too). Each
// op has a deadline (options.timeout_ms from when it starts). When a peer dies, a connection
// breaks, a frame is malformed or an op times out, the op fails with an error naming the op, its
// sequence number, its bytes and the peer rank and host at fault; the communicator is then
// aborted: queued and future ops fail at once with that error, and the other ranks are told (shm
// abort word, TCP abort frame) so they stop within milliseconds. Build a new communicator (with a
// new store_prefix) to continue.
//
// Buffers must stay valid and untouched until an op's Work completes. Any element count works
// (0, 1, not divisible by the world size, more than 2^31 bytes); send == recv means in place.
//
// Thread-safe: ops may be submitted from any thread.
#ifndef KILN_COMM_COMMUNICATOR_H_
#define KILN_COMM_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <kiln/base/log.h>
#include <kiln/base/result.h>
#include <kiln/base/status.h>
#include <kiln/comm/flight_recorder.h>
#include <kiln/comm/store.h>
#include <kiln/comm/types.h>
#include <kiln/comm/work.h>
#include <kiln/obs/metrics.h>

namespace kiln::comm {

// Limits of a communicator; options beyond them are kInvalidArgument.
inline constexpr int kWorldSizeMax = 1024;  // TCP links form a full mesh (one per remote peer)
inline constexpr int kTcpConnectionsPerPeerMax = 8;
inline constexpr size_t kMessageBytesMax = 16 << 20;  // largest staging slot a link may have

enum class TransportPolicy {
  kAuto,  // shared memory between ranks of one host, TCP between hosts
  kTcp,   // TCP everywhere (testing, comparison)
};

enum class Algorithm {
  kAuto,               // chosen per op by a cost model of size, world size and transport
  kRing,               // bandwidth-bound sizes
  kRecursiveDoubling,  // latency-bound sizes (allreduce)
  kHierarchical,       // allreduce: inside hosts over shm, then across hosts (multi-host only)
};

std::string_view algorithm_name(Algorithm algorithm);
Result<Algorithm> parse_algorithm(std::string_view name);  // "auto", "ring", "rd", "hier"

struct CommOptions {
  int rank = 0;
  int world_size = 1;
  // Ranks naming the same host share memory. Empty: this machine's hostname.
  std::string host;
  // Failure-domain labels, outermost first ("rack", "r1"), ("switch", "s3"): KILN_TOPOLOGY.
  std::vector<std::pair<std::string, std::string>> topology;
  TransportPolicy transport = TransportPolicy::kAuto;
  // Deadline of every op, from when it starts running.
  int64_t timeout_ms = 30'000;
  // Proves membership on every TCP connection (HMAC challenge). Required when TCP is used.
  std::string job_token;
  // Namespace of this communicator's rendezvous keys; a rebuilt communicator needs a new one.
  std::string store_prefix = "kiln/comm/0";
  // How long building the communicator may take (rendezvous and connections).
  int64_t setup_timeout_ms = 120'000;

  // TCP. The address ranks bind and advertise: an interface name ("eth0"), an IP address, or
  // empty for the address `host` resolves to (127.0.0.1 when every rank is on this machine).
  std::string tcp_interface;
  int tcp_port_lo = 0;  // 0..0: any free port
  int tcp_port_hi = 0;
  int tcp_connections_per_peer = 1;
  int tcp_socket_buffer_bytes = 4 << 20;
  size_t tcp_message_bytes = 512 << 10;  // one frame; several in flight per peer
  size_t tcp_slots = 4;

  // Shared memory: FIFO slots per peer pair; small enough to stay in cache.
  size_t shm_message_bytes = 64 << 10;
  size_t shm_slots = 8;

  Algorithm allreduce_algorithm = Algorithm::kAuto;
  // Ops that may wait in the queue; submitting more blocks (up to timeout_ms) until one finishes.
  size_t queue_depth_max = 1024;
  size_t flight_recorder_entries = 1024;
  // Where a failed op dumps the flight recorder (flight-rank<R>.json); empty: log only.
  std::string flight_recorder_dir;
};

enum class OpKind : uint8_t {
  kAllreduce,
  kReduceScatter,
  kAllgather,
  kBroadcast,
  kReduce,
  kAllToAll,
  kBarrier,
  kSend,
  kRecv,
};
std::string_view op_kind_name(OpKind kind);

// One op, as plain data. Build it with the named constructors.
struct CollectiveArgs {
  OpKind kind = OpKind::kBarrier;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  // elements; see each constructor
  DataType dtype = DataType::kF32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;      // broadcast, reduce
  int peer = -1;     // send, recv
  uint32_t tag = 0;  // send, recv: must match between the pair; below 2^24

  // recv[i] = op over ranks of send[i], i < count, on every rank.
  static CollectiveArgs allreduce(const void* send, void* recv, size_t count, DataType dtype,
                                  ReduceOp op);
  // send holds count * world_size elements; rank r receives the reduced elements
  // [r * count, (r + 1) * count). In place when recv == send + r * count elements.
  static CollectiveArgs reduce_scatter(const void* send, void* recv, size_t count, DataType dtype,
                                       ReduceOp op);
  // recv holds count * world_size elements: rank r's send lands at [r * count, (r + 1) * count).
  static CollectiveArgs allgather(const void* send, void* recv, size_t count, DataType dtype);
  // Every rank's buffer gets the root's.
  static CollectiveArgs broadcast(void* buffer, size_t count, DataType dtype, int root);
  // recv (significant on the root only; may be null elsewhere) gets the reduction of every send.
  static CollectiveArgs reduce(const void* send, void* recv, size_t count, DataType dtype,
                               ReduceOp op, int root);
  // send and recv hold count * world_size elements; block j of send goes to rank j, and block j of
  // recv comes from rank j.
  static CollectiveArgs all_to_all(const void* send, void* recv, size_t count, DataType dtype);
  static CollectiveArgs barrier();
  // Point to point (pipeline parallelism): `bytes` bytes to or from `peer`.
  static CollectiveArgs send_to(const void* buffer, size_t bytes, int peer, uint32_t tag);
  static CollectiveArgs recv_from(void* buffer, size_t bytes, int peer, uint32_t tag);
};

class Communicator {
 public:
  // Rendezvous through `store` (which must outlive the call only), build links to every peer and
  // start the worker. Fails with an error naming what did not come together in
  // setup_timeout_ms (the ranks that never showed up, the address that refused connections, a
  // token that did not match).
  static Result<std::unique_ptr<Communicator>> create(const CommOptions& options, Store* store,
                                                      Logger log,
                                                      obs::MetricsRegistry* metrics = nullptr);
  // Aborts what is still queued, joins the worker and releases links and shared memory.
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // Queues an op; returns at once. Invalid arguments and an aborted communicator give an
  // already-failed Work.
  virtual Work submit(const CollectiveArgs& args) = 0;
  // Runs an op and waits for it. When nothing is queued it runs in the calling thread, so a
  // blocking small collective pays no thread hand-off.
  virtual Status run(const CollectiveArgs& args) = 0;

  Work allreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) {
    return submit(CollectiveArgs::allreduce(send, recv, count, dtype, op));
  }
  Work reduce_scatter(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) {
    return submit(CollectiveArgs::reduce_scatter(send, recv, count, dtype, op));
  }
  Work allgather(const void* send, void* recv, size_t count, DataType dtype) {
    return submit(CollectiveArgs::allgather(send, recv, count, dtype));
  }
  Work broadcast(void* buffer, size_t count, DataType dtype, int root) {
    return submit(CollectiveArgs::broadcast(buffer, count, dtype, root));
  }
  Work reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root) {
    return submit(CollectiveArgs::reduce(send, recv, count, dtype, op, root));
  }
  Work all_to_all(const void* send, void* recv, size_t count, DataType dtype) {
    return submit(CollectiveArgs::all_to_all(send, recv, count, dtype));
  }
  Work barrier() { return submit(CollectiveArgs::barrier()); }
  Work send(const void* buffer, size_t bytes, int peer, uint32_t tag) {
    return submit(CollectiveArgs::send_to(buffer, bytes, peer, tag));
  }
  Work recv(void* buffer, size_t bytes, int peer, uint32_t tag) {
    return submit(CollectiveArgs::recv_from(buffer, bytes, peer, tag));
  }

  // Fails every queued and future op with `reason` and tells the peers. Idempotent; callable from
  // any thread (a watchdog, a signal-handling thread).
  virtual void abort(const Status& reason) = 0;
  virtual bool aborted() const = 0;

  virtual const FlightRecorder& flight_recorder() const = 0;

  // The communicator's shape as JSON: ring order, each peer's host and link kind.
  virtual std::string describe_json() const = 0;
};

}  // namespace kiln::comm

#endif  // KILN_COMM_COMMUNICATOR_H_
