// The communicator: groups, the op queue and worker, dispatch to algorithms, failure handling.
// See include/kiln/comm/communicator.h for the contract.
#include <kiln/comm/communicator.h>

#include <unistd.h>

#include <kiln/base/check.h>
#include <kiln/base/clock.h>
#include <kiln/comm/machine_profile.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "comm/algorithms/algorithms.h"
#include "comm/comm_env.h"
#include "comm/mesh.h"
#include "comm/net/socket.h"
#include "comm/transport/wait_policy.h"
#include "comm/tuning.h"
#include "comm/work_state.h"

namespace kiln::comm {
namespace {

constexpr int kOpKindCount = 9;
// Point-to-point messages carry this kind in their tag's low byte; collectives their OpKind.
constexpr uint32_t kPointToPointTagKind = 0xff;
constexpr uint32_t kTagValueMax = (1u << 24) - 1;
// Below this many bytes hierarchical allreduce costs more hand-offs than it saves.
constexpr size_t kHierarchicalBytesMin = 256 << 10;
// How stale the op counters and the op-time histogram may be (see PendingStats).
constexpr int64_t kMetricsFlushNs = 100'000'000;
// How long a communicator being destroyed waits for its peers to close their side of each TCP
// link (they are finishing their own last op), reading and dropping what they still send. The
// tail of a last op reaches a live peer within milliseconds; a peer that keeps its communicator
// longer costs this rank this much at exit, once.
constexpr int64_t kOrderlyCloseMs = 500;

uint32_t collective_tag(OpKind kind, uint64_t coll_seq) {
  return static_cast<uint32_t>((coll_seq & kTagValueMax) << 8) | static_cast<uint32_t>(kind);
}
uint32_t point_to_point_tag(uint32_t user_tag) {
  return (user_tag << 8) | kPointToPointTagKind;
}

bool is_collective(OpKind kind) {
  return kind != OpKind::kSend && kind != OpKind::kRecv;
}

Status validate_options(const CommOptions& o) {
  if (o.world_size < 1 || o.world_size > kWorldSizeMax) {
    return Status::invalid_argument("world size " + std::to_string(o.world_size) +
                                    " is out of range [1, " + std::to_string(kWorldSizeMax) + "]");
  }
  if (o.rank < 0 || o.rank >= o.world_size) {
    return Status::invalid_argument("rank " + std::to_string(o.rank) + " is out of range [0, " +
                                    std::to_string(o.world_size - 1) + "]");
  }
  if (o.timeout_ms <= 0) return Status::invalid_argument("timeout_ms must be positive");
  if (o.tcp_connections_per_peer < 1 || o.tcp_connections_per_peer > kTcpConnectionsPerPeerMax) {
    return Status::invalid_argument("tcp_connections_per_peer must be 1.." +
                                    std::to_string(kTcpConnectionsPerPeerMax));
  }
  if (o.tcp_slots < static_cast<size_t>(o.tcp_connections_per_peer) || o.shm_slots < 2) {
    return Status::invalid_argument(
        "tcp_slots must be at least tcp_connections_per_peer, and shm_slots at least 2");
  }
  for (size_t bytes : {o.tcp_message_bytes, o.shm_message_bytes}) {
    if (bytes < 64 || bytes > kMessageBytesMax) {
      return Status::invalid_argument("message sizes must be 64.." +
                                      std::to_string(kMessageBytesMax) + " bytes");
    }
  }
  if (o.queue_depth_max < 1) return Status::invalid_argument("queue_depth_max must be >= 1");
  return Status();
}

class CommunicatorImpl final : public Communicator {
 public:
  CommunicatorImpl(const CommOptions& options, std::string host, Logger log,
                   std::unique_ptr<Mesh> mesh, WaitPolicy policy, obs::MetricsRegistry* metrics);
  ~CommunicatorImpl() override;

  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }
  Work submit(const CollectiveArgs& args) override;
  Status run(const CollectiveArgs& args) override;
  void abort(const Status& reason) override;
  bool aborted() const override { return abort_.aborted(); }
  const FlightRecorder& flight_recorder() const override { return recorder_; }
  std::string describe_json() const override;
  // Set once, before the first op (Communicator::create).
  void set_stream_out_bytes_min(size_t bytes) { stream_out_bytes_min_ = bytes; }

 private:
  struct Pending {
    CollectiveArgs args;
    uint64_t seq = 0;
    uint64_t coll_seq = 0;
    std::shared_ptr<Work::State> work;
  };

  Status validate(const CollectiveArgs& a) const;
  size_t op_bytes(const CollectiveArgs& a) const;
  std::string op_label(const CollectiveArgs& a, uint64_t seq, uint64_t coll_seq) const;
  // Assigns sequence numbers and records the op. REQUIRES: mu_ held.
  void number(const CollectiveArgs& a, int64_t now_ns, uint64_t* seq, uint64_t* coll_seq);
  // Runs the op; `start_ns` is the monotonic time it starts at (read once by the caller).
  // `overlapped`: run by the worker thread while the caller may compute (WaitPolicy says how
  // each kind spins).
  Status execute(const CollectiveArgs& a, uint64_t seq, uint64_t coll_seq, int64_t start_ns,
                 bool overlapped);
  Status dispatch(const CollectiveArgs& a, Xfer& x);
  Status allreduce(const CollectiveArgs& a, Xfer& x);
  Status hierarchical_allreduce(const CollectiveArgs& a, const Reduction& r, Xfer& x);
  Status point_to_point(const CollectiveArgs& a, Xfer& x);
  Status flush_tcp(Progress& progress);
  void on_failure(const Status& error, uint64_t seq, int culprit);
  void write_shm_abort_words(const Status& reason, int culprit);
  void worker_loop();
  void build_groups();

  const CommOptions options_;
  const std::string host_;
  Logger log_;
  std::unique_ptr<Mesh> mesh_;
  const WaitPolicy policy_;  // how every op waits (transport/wait_policy.h)
  Group world_;
  Group local_;    // this host's ranks (hierarchical allreduce)
  Group cross_;    // one rank per host, same local index as this one (sharded hierarchy)
  Group leaders_;  // the first rank of every host (leader-based hierarchy)
  bool multi_host_ = false;
  bool world_has_tcp_ = false;
  bool hosts_even_ = false;          // every host has the same number of ranks
  bool hierarchy_possible_ = false;  // several hosts, and some host has several ranks
  // The shared-memory cost the algorithm choice uses: the slowest of every rank's machine
  // (tuning.h), the same on every rank because all see the same records.
  LinkCost shm_cost_;
  // Ops whose output is at least this many bytes write it non-temporally (tuning.h
  // stream_output_bytes_min, from this machine's profile); SIZE_MAX: never.
  size_t stream_out_bytes_min_ = SIZE_MAX;
  AbortState abort_;
  FlightRecorder recorder_;
  std::vector<char> scratch_;                      // tree_reduce accumulator, kTreeBytesMax bytes
  std::vector<std::string> hosts_;                 // by rank, for messages
  std::vector<const ShmRankStatus*> peer_status_;  // by rank; null unless a local peer
  ShmRankStatus* self_status_ = nullptr;           // in our own inbox, if we have one

  std::mutex mu_;
  std::condition_variable work_cv_;   // queue non-empty or stopping
  std::condition_variable space_cv_;  // queue below its bound
  std::deque<Pending> queue_;         // GUARDED_BY(mu_)
  bool busy_ = false;                 // GUARDED_BY(mu_): an op is executing
  bool stopping_ = false;             // GUARDED_BY(mu_)
  uint64_t next_seq_ = 0;             // GUARDED_BY(mu_)
  uint64_t next_coll_seq_ = 0;        // GUARDED_BY(mu_)
  std::thread worker_;

  // Op statistics accumulate here, touched only by the thread running ops, and reach the
  // Prometheus series at most every kMetricsFlushNs: a counter increment is an atomic
  // compare-and-swap on a double, which small collectives should not pay several times over.
  struct PendingStats {
    std::array<uint64_t, kOpKindCount> ops{};
    std::array<uint64_t, kOpKindCount> bytes{};
    std::vector<double> seconds_buckets;  // increments per histogram bucket (+Inf last)
    double seconds_sum = 0;
    int64_t last_flush_ns = 0;
  };
  void record_stats(OpKind kind, size_t bytes, int64_t duration_ns, int64_t now_ns);
  void flush_stats();

  obs::MetricGroup metrics_;
  std::array<prometheus::Counter*, kOpKindCount> ops_total_{};
  std::array<prometheus::Counter*, kOpKindCount> bytes_total_{};
  prometheus::Counter& errors_total_;
  prometheus::Gauge& queue_depth_;
  prometheus::Gauge& aborted_gauge_;
  const prometheus::Histogram::BucketBoundaries op_seconds_bounds_;
  prometheus::Histogram& op_seconds_;
  PendingStats stats_;  // only the thread that runs ops touches it (busy_ serializes them)
};

CommunicatorImpl::CommunicatorImpl(const CommOptions& options, std::string host, Logger log,
                                   std::unique_ptr<Mesh> mesh, WaitPolicy policy,
                                   obs::MetricsRegistry* metrics)
    : options_(options),
      host_(std::move(host)),
      log_(std::move(log)),
      mesh_(std::move(mesh)),
      policy_(std::move(policy)),
      recorder_({options.rank, options.world_size, host_, static_cast<int>(getpid())},
                options.flight_recorder_entries),
      scratch_(kTreeBytesMax),
      metrics_(metrics),
      errors_total_(metrics_.add_counter(
          "kiln_comm_op_errors_total", "Collective ops that failed.",
          {{"rank", std::to_string(options.rank)}, {"comm", options.store_prefix}})),
      queue_depth_(metrics_.add_gauge(
          "kiln_comm_queue_depth", "Ops waiting to run.",
          {{"rank", std::to_string(options.rank)}, {"comm", options.store_prefix}})),
      aborted_gauge_(metrics_.add_gauge(
          "kiln_comm_aborted", "1 once the communicator aborted.",
          {{"rank", std::to_string(options.rank)}, {"comm", options.store_prefix}})),
      op_seconds_bounds_(obs::exponential_buckets(1e-6, 4, 14)),
      op_seconds_(metrics_.add_histogram(
          "kiln_comm_op_seconds", "Time ops take to run.", op_seconds_bounds_,
          {{"rank", std::to_string(options.rank)}, {"comm", options.store_prefix}})) {
  for (int k = 0; k < kOpKindCount; ++k) {
    const prometheus::Labels labels = {{"rank", std::to_string(options.rank)},
                                       {"comm", options.store_prefix},
                                       {"op", std::string(op_kind_name(static_cast<OpKind>(k)))}};
    ops_total_[k] =
        &metrics_.add_counter("kiln_comm_ops_total", "Collective ops completed.", labels);
    bytes_total_[k] =
        &metrics_.add_counter("kiln_comm_bytes_total", "Bytes of completed ops.", labels);
  }
  stats_.seconds_buckets.assign(op_seconds_bounds_.size() + 1, 0.0);
  build_groups();
  peer_status_.assign(options_.world_size, nullptr);
  for (int r = 0; r < options_.world_size; ++r) {
    hosts_.push_back(mesh_->records[r].host);
    if (mesh_->peer_inboxes[r]) peer_status_[r] = mesh_->peer_inboxes[r]->rank_status();
  }
  if (mesh_->inbox) self_status_ = mesh_->inbox->rank_status();
  worker_ = std::thread([this] { worker_loop(); });
}

CommunicatorImpl::~CommunicatorImpl() {
  bool in_flight;
  {
    std::lock_guard lock(mu_);
    in_flight = busy_ || !queue_.empty();
  }
  if (in_flight) abort(Status::aborted("communicator destroyed with ops in flight"));
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  space_cv_.notify_all();
  worker_.join();
  flush_stats();  // no op runs any more
  // Every op finished: close the TCP links in order, so that no peer loses the tail of what
  // this rank sent in its last op (tcp_link.h). An aborted communicator's links are shut already.
  if (!abort_.aborted() && !mesh_->tcp_link_impls.empty()) {
    for (TcpLink* link : mesh_->tcp_link_impls)
      link->finish_sending();
    const Deadline deadline = Deadline::after_ms(kOrderlyCloseMs);
    for (TcpLink* link : mesh_->tcp_link_impls)
      link->drain_until_eof(deadline);
  }
}

void CommunicatorImpl::build_groups() {
  const int me = options_.rank;
  const Mesh& m = *mesh_;
  const auto link_of = [&](int r) -> Link* { return r == me ? nullptr : m.links[r].get(); };
  const auto make_group = [&](const std::vector<int>& ranks, size_t piece_bytes) {
    Group g;
    g.ranks = ranks;
    g.piece_bytes = piece_bytes;
    for (int r : ranks) {
      if (r == me) g.index = static_cast<int>(g.links.size());
      g.links.push_back(link_of(r));
    }
    return g;
  };
  const std::vector<std::vector<int>> hosts = hosts_in_ring_order(m.ring, m.records);
  multi_host_ = hosts.size() > 1;
  const bool all_tcp = options_.transport == TransportPolicy::kTcp;
  world_has_tcp_ = all_tcp ? options_.world_size > 1 : multi_host_;
  const bool world_has_shm = !all_tcp && hosts.size() < static_cast<size_t>(options_.world_size);
  // One message size for the whole group, the same on every rank: the smallest link kind in it.
  size_t world_piece = world_has_tcp_ ? options_.tcp_message_bytes : options_.shm_message_bytes;
  if (world_has_tcp_ && world_has_shm) {
    world_piece = std::min(options_.tcp_message_bytes, options_.shm_message_bytes);
  }
  world_ = make_group(m.ring, world_piece);
  std::vector<LinkCost> costs;
  for (const RankRecord& r : m.records)
    costs.push_back(shm_link_cost_from(r.handoff_us, r.copy_gbps, r.reduce_gbps));
  shm_cost_ = slowest_link_cost(costs);
  hosts_even_ = true;
  size_t largest_host = 0;
  for (const auto& h : hosts) {
    hosts_even_ = hosts_even_ && h.size() == hosts[0].size();
    largest_host = std::max(largest_host, h.size());
  }
  // Every rank must reach the same verdict, so it depends only on the global layout.
  hierarchy_possible_ = multi_host_ && !all_tcp && largest_host > 1;
  if (!hierarchy_possible_) return;
  size_t my_host = 0;
  size_t my_local_index = 0;
  for (size_t h = 0; h < hosts.size(); ++h) {
    for (size_t j = 0; j < hosts[h].size(); ++j) {
      if (hosts[h][j] == me) {
        my_host = h;
        my_local_index = j;
      }
    }
  }
  local_ = make_group(hosts[my_host], options_.shm_message_bytes);
  std::vector<int> leaders;
  for (const auto& h : hosts)
    leaders.push_back(h[0]);
  if (my_local_index == 0) leaders_ = make_group(leaders, options_.tcp_message_bytes);
  if (hosts_even_) {
    std::vector<int> cross;
    for (const auto& h : hosts)
      cross.push_back(h[my_local_index]);
    cross_ = make_group(cross, options_.tcp_message_bytes);
  }
}

Status CommunicatorImpl::validate(const CollectiveArgs& a) const {
  const int n = options_.world_size;
  const auto what = [&] { return std::string(op_kind_name(a.kind)); };
  const size_t e = dtype_size(a.dtype);
  const bool p2p = !is_collective(a.kind);
  const size_t multiplier = (a.kind == OpKind::kReduceScatter || a.kind == OpKind::kAllgather ||
                             a.kind == OpKind::kAllToAll)
                                ? static_cast<size_t>(n)
                                : 1;
  if (!p2p && a.count > SIZE_MAX / e / multiplier) {
    return Status::invalid_argument(what() + ": count " + std::to_string(a.count) + " overflows");
  }
  const size_t bytes = op_bytes(a);
  const bool needs_send = a.kind != OpKind::kBarrier && a.kind != OpKind::kRecv;
  const bool needs_recv = a.kind != OpKind::kBarrier && a.kind != OpKind::kSend &&
                          !(a.kind == OpKind::kReduce && a.root != options_.rank);
  if (bytes > 0 && ((needs_send && a.send == nullptr) || (needs_recv && a.recv == nullptr))) {
    return Status::invalid_argument(what() + ": null buffer for " + std::to_string(bytes) +
                                    " bytes");
  }
  if ((a.kind == OpKind::kBroadcast || a.kind == OpKind::kReduce) && (a.root < 0 || a.root >= n)) {
    return Status::invalid_argument(what() + ": root " + std::to_string(a.root) +
                                    " is not a rank of this communicator (world size " +
                                    std::to_string(n) + ")");
  }
  if (p2p) {
    if (a.peer < 0 || a.peer >= n || a.peer == options_.rank) {
      return Status::invalid_argument(what() + ": peer " + std::to_string(a.peer) +
                                      " is not another rank of this communicator");
    }
    if (a.tag > kTagValueMax) {
      return Status::invalid_argument(what() + ": tag " + std::to_string(a.tag) +
                                      " exceeds 2^24-1");
    }
  }
  if (a.kind == OpKind::kAllToAll && bytes > 0 && a.send == a.recv) {
    return Status::invalid_argument("all_to_all: in-place operation is not supported");
  }
  return Status();
}

size_t CommunicatorImpl::op_bytes(const CollectiveArgs& a) const {
  if (!is_collective(a.kind)) return a.count;
  const size_t per_rank = a.count * dtype_size(a.dtype);
  switch (a.kind) {
    case OpKind::kReduceScatter:
    case OpKind::kAllgather:
    case OpKind::kAllToAll: return per_rank * static_cast<size_t>(options_.world_size);
    case OpKind::kBarrier: return 0;
    default: return per_rank;
  }
}

std::string CommunicatorImpl::op_label(const CollectiveArgs& a, uint64_t seq,
                                       uint64_t coll_seq) const {
  std::string label(op_kind_name(a.kind));
  if (is_collective(a.kind)) {
    label += " seq=" + std::to_string(coll_seq);
  } else {
    label += " seq=" + std::to_string(seq) + " peer=" + std::to_string(a.peer) +
             " tag=" + std::to_string(a.tag);
  }
  label += " bytes=" + std::to_string(op_bytes(a));
  if (a.kind == OpKind::kAllreduce || a.kind == OpKind::kReduceScatter ||
      a.kind == OpKind::kReduce) {
    label += " " + std::string(dtype_name(a.dtype)) + " " + std::string(reduce_op_name(a.op));
  }
  if (a.kind == OpKind::kBroadcast || a.kind == OpKind::kReduce) {
    label += " root=" + std::to_string(a.root);
  }
  return label;
}

void CommunicatorImpl::number(const CollectiveArgs& a, int64_t now_ns, uint64_t* seq,
                              uint64_t* coll_seq) {
  *seq = next_seq_++;
  *coll_seq = is_collective(a.kind) ? next_coll_seq_++ : 0;
  recorder_.record_submit(*seq, *coll_seq, op_kind_name(a.kind).data(), op_bytes(a),
                          dtype_name(a.dtype).data(), now_ns);
}

Work CommunicatorImpl::submit(const CollectiveArgs& args) {
  if (Status s = validate(args); !s.ok()) return Work::done(s);
  auto work = std::make_shared<Work::State>();
  std::unique_lock lock(mu_);
  if (abort_.aborted()) return Work::done(abort_.reason());
  if (queue_.size() >= options_.queue_depth_max) {
    const bool room =
        space_cv_.wait_until(lock, Deadline::after_ms(options_.timeout_ms).to_steady(),
                             [&] { return stopping_ || queue_.size() < options_.queue_depth_max; });
    if (!room) {
      return Work::done(Status::timeout("submit: the op queue stayed full (" +
                                        std::to_string(options_.queue_depth_max) + " ops) for " +
                                        std::to_string(options_.timeout_ms) + " ms"));
    }
    if (stopping_) return Work::done(Status::aborted("communicator is shutting down"));
  }
  Pending p;
  p.args = args;
  number(args, monotonic_now_ns(), &p.seq, &p.coll_seq);
  work->label = op_label(args, p.seq, p.coll_seq);
  p.work = work;
  queue_.push_back(std::move(p));
  queue_depth_.Set(static_cast<double>(queue_.size()));
  lock.unlock();
  work_cv_.notify_one();
  return Work(work);
}

Status CommunicatorImpl::run(const CollectiveArgs& args) {
  if (Status s = validate(args); !s.ok()) return s;
  std::unique_lock lock(mu_);
  if (abort_.aborted()) return abort_.reason();
  if (!queue_.empty() || busy_) {
    lock.unlock();
    return submit(args).wait();
  }
  // Nothing queued or running: run here, in the caller's thread. Claiming busy_ keeps the worker
  // from starting a later op in the meantime, so the order of ops is still the order of calls.
  busy_ = true;
  uint64_t seq;
  uint64_t coll_seq;
  const int64_t now_ns = monotonic_now_ns();
  number(args, now_ns, &seq, &coll_seq);
  lock.unlock();
  Status status = execute(args, seq, coll_seq, now_ns, /*overlapped=*/false);
  lock.lock();
  busy_ = false;
  const bool wake = !queue_.empty();
  lock.unlock();
  if (wake) work_cv_.notify_one();
  return status;
}

void CommunicatorImpl::worker_loop() {
  std::unique_lock lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&] { return stopping_ || (!queue_.empty() && !busy_); });
    if (stopping_) break;
    Pending p = std::move(queue_.front());
    queue_.pop_front();
    queue_depth_.Set(static_cast<double>(queue_.size()));
    busy_ = true;
    lock.unlock();
    space_cv_.notify_one();
    Status status = abort_.aborted() ? abort_.reason()
                                     : execute(p.args, p.seq, p.coll_seq, monotonic_now_ns(),
                                               /*overlapped=*/true);
    p.work->finish(std::move(status));
    lock.lock();
    busy_ = false;
  }
  // Shutting down: whatever is still queued never runs.
  const Status gone = abort_.aborted()
                          ? abort_.reason()
                          : Status::aborted("communicator destroyed before the op ran");
  for (Pending& p : queue_)
    p.work->finish(gone);
  queue_.clear();
}

Status CommunicatorImpl::execute(const CollectiveArgs& a, uint64_t seq, uint64_t coll_seq,
                                 int64_t start_ns, bool overlapped) {
  recorder_.record_start(seq, start_ns);
  // The label is only formatted if the op fails: building it costs more than a small collective.
  auto label = [&] { return op_label(a, seq, coll_seq); };
  Progress::Context ctx(label);
  ctx.deadline = Deadline::after_ms_from(start_ns, options_.timeout_ms);
  ctx.timeout_ms = options_.timeout_ms;
  ctx.abort = &abort_;
  ctx.shm_abort = mesh_->inbox ? mesh_->inbox->abort_word() : nullptr;
  ctx.tcp_links = &mesh_->tcp_links;
  ctx.local_peers = &mesh_->local_peers;
  ctx.self_status = self_status_;
  ctx.peer_status = &peer_status_;
  ctx.hosts = &hosts_;
  ctx.coll_seq_plus1 = is_collective(a.kind) ? coll_seq + 1 : 0;
  ctx.self_rank = options_.rank;
  ctx.spin_ns = overlapped ? policy_.spin_ns_overlapped : policy_.spin_ns;
  ctx.yield_ns = policy_.yield_ns;
  if (self_status_ != nullptr) {
    self_status_->waiting_on.store(-1, std::memory_order_relaxed);
    if (is_collective(a.kind)) {
      self_status_->coll_seq_plus1.store(coll_seq + 1, std::memory_order_relaxed);
    }
    self_status_->in_op.store(1, std::memory_order_release);
  }
  Progress progress(std::move(ctx));
  Xfer x;
  x.progress = &progress;
  x.tag = is_collective(a.kind) ? collective_tag(a.kind, coll_seq) : point_to_point_tag(a.tag);
  x.stream_out = op_bytes(a) >= stream_out_bytes_min_;
  Status status = progress.check_abort();
  if (status.ok()) status = dispatch(a, x);
  // TCP sends move only while some op waits on something: an op is complete once its messages
  // have left this process, or a peer could wait forever for the tail of a send.
  if (status.ok() && !mesh_->tcp_links.empty()) status = flush_tcp(progress);
  if (self_status_ != nullptr) {
    // Before in_op drops: a peer diagnosing the stall must not take this rank's exit from a
    // failed collective for never having entered it.
    if (!status.ok() && is_collective(a.kind)) {
      self_status_->failed_coll_seq_plus1.store(coll_seq + 1, std::memory_order_release);
    }
    self_status_->in_op.store(0, std::memory_order_release);
  }
  auto peer_ref = [&](int r) {
    FlightRecorder::PeerRef ref;
    ref.rank = r;
    if (r >= 0 && r < options_.world_size) ref.host = hosts_[r];
    return ref;
  };
  const int64_t end_ns = monotonic_now_ns();
  recorder_.record_end(seq, status, peer_ref(progress.last_waited_rank()),
                       peer_ref(progress.culprit_rank()), end_ns);
  op_seconds_.Observe(static_cast<double>(end_ns - start_ns) * 1e-9);
  if (status.ok()) {
    record_stats(a.kind, op_bytes(a), end_ns - start_ns, end_ns);
  } else {
    flush_stats();
    on_failure(status, seq, progress.culprit_rank());
  }
  return status;
}

void CommunicatorImpl::record_stats(OpKind kind, size_t bytes, int64_t duration_ns,
                                    int64_t now_ns) {
  const int k = static_cast<int>(kind);
  ++stats_.ops[k];
  stats_.bytes[k] += bytes;
  const double seconds = static_cast<double>(duration_ns) * 1e-9;
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(op_seconds_bounds_.begin(), op_seconds_bounds_.end(), seconds) -
      op_seconds_bounds_.begin());
  stats_.seconds_buckets[bucket] += 1;
  stats_.seconds_sum += seconds;
  if (now_ns - stats_.last_flush_ns >= kMetricsFlushNs) {
    flush_stats();
    stats_.last_flush_ns = now_ns;
  }
}

void CommunicatorImpl::flush_stats() {
  for (int k = 0; k < kOpKindCount; ++k) {
    if (stats_.ops[k] == 0) continue;
    ops_total_[k]->Increment(static_cast<double>(stats_.ops[k]));
    bytes_total_[k]->Increment(static_cast<double>(stats_.bytes[k]));
    stats_.ops[k] = 0;
    stats_.bytes[k] = 0;
  }
  if (stats_.seconds_sum > 0) {
    op_seconds_.ObserveMultiple(stats_.seconds_buckets, stats_.seconds_sum);
    std::fill(stats_.seconds_buckets.begin(), stats_.seconds_buckets.end(), 0.0);
    stats_.seconds_sum = 0;
  }
}

Status CommunicatorImpl::dispatch(const CollectiveArgs& a, Xfer& x) {
  const int n = options_.world_size;
  const size_t e = dtype_size(a.dtype);
  Reduction r;
  r.dtype = a.dtype;
  r.op = a.op;
  r.divide_by = a.op == ReduceOp::kAvg ? n : 1;
  // Block j of a reduce_scatter or allgather belongs to the rank at ring position j.
  auto blocks = [&] {
    std::vector<Range> b(n);
    for (int j = 0; j < n; ++j)
      b[j] = {static_cast<size_t>(world_.ranks[j]) * a.count, a.count};
    return b;
  };
  switch (a.kind) {
    case OpKind::kAllreduce: return allreduce(a, x);
    case OpKind::kReduceScatter: return ring_reduce_scatter(world_, a.send, a.recv, blocks(), r, x);
    case OpKind::kAllgather: {
      char* mine = static_cast<char*>(a.recv) + static_cast<size_t>(options_.rank) * a.count * e;
      if (a.send != mine && a.count > 0) std::memmove(mine, a.send, a.count * e);
      return ring_allgather(world_, a.recv, blocks(), a.dtype, x);
    }
    case OpKind::kBroadcast: {
      const int root = world_.position_of(a.root);
      const size_t bytes = a.count * e;
      return bytes <= kTreeBytesMax ? tree_broadcast(world_, a.recv, bytes, root, x)
                                    : chain_broadcast(world_, a.recv, bytes, root, x);
    }
    case OpKind::kReduce: {
      const int root = world_.position_of(a.root);
      if (a.count * e <= kTreeBytesMax) {
        return tree_reduce(world_, a.send, a.recv, scratch_.data(), a.count, root, r, x);
      }
      return chain_reduce(world_, a.send, a.recv, a.count, root, r, x);
    }
    case OpKind::kAllToAll: return pairwise_all_to_all(world_, a.send, a.recv, a.count * e, x);
    case OpKind::kBarrier: return dissemination_barrier(world_, x);
    case OpKind::kSend:
    case OpKind::kRecv: return point_to_point(a, x);
  }
  return Status::not_supported("unknown op kind");
}

Status CommunicatorImpl::allreduce(const CollectiveArgs& a, Xfer& x) {
  const int n = options_.world_size;
  const size_t bytes = a.count * dtype_size(a.dtype);
  Reduction r;
  r.dtype = a.dtype;
  r.op = a.op;
  r.divide_by = a.op == ReduceOp::kAvg ? n : 1;
  Algorithm algo = options_.allreduce_algorithm;
  if (algo == Algorithm::kHierarchical && !hierarchy_possible_) algo = Algorithm::kRing;
  if (algo == Algorithm::kAuto) {
    if (hierarchy_possible_ && bytes >= kHierarchicalBytesMin) {
      algo = Algorithm::kHierarchical;
    } else {
      algo = choose_allreduce(bytes, n, world_has_tcp_ ? tcp_link_cost() : shm_cost_);
    }
  }
  switch (algo) {
    case Algorithm::kRecursiveDoubling:
      return recursive_doubling_allreduce(world_, a.send, a.recv, a.count, r, x);
    case Algorithm::kHierarchical: return hierarchical_allreduce(a, r, x);
    default: return ring_allreduce(world_, a.send, a.recv, a.count, r, x);
  }
}

// Hierarchical allreduce. With the same number of ranks L on every host: reduce-scatter inside
// each host (local rank j ends with the host's sum of chunk j), allreduce chunk j among the ranks
// with local index j across hosts (L rings in parallel, each on 1/L of the data), then allgather
// inside each host. Otherwise: reduce to each host's first rank, allreduce among those leaders,
// broadcast inside each host. Either way the inter-host links carry only reduced data.
Status CommunicatorImpl::hierarchical_allreduce(const CollectiveArgs& a, const Reduction& r,
                                                Xfer& x) {
  const size_t e = dtype_size(a.dtype);
  Reduction inner = r;
  inner.op = r.op == ReduceOp::kAvg ? ReduceOp::kSum : r.op;
  inner.divide_by = 1;
  const int L = local_.size();
  if (hosts_even_) {
    std::vector<Range> chunks(L);
    for (int j = 0; j < L; ++j)
      chunks[j] = even_range(a.count, L, j);
    const Range mine = chunks[local_.index];
    char* my_chunk = static_cast<char*>(a.recv) + mine.offset * e;
    KILN_RETURN_IF_ERROR(ring_reduce_scatter(local_, a.send, my_chunk, chunks, inner, x));
    const LinkCost cost = tcp_link_cost();
    if (choose_allreduce(mine.count * e, cross_.size(), cost) == Algorithm::kRecursiveDoubling) {
      KILN_RETURN_IF_ERROR(
          recursive_doubling_allreduce(cross_, my_chunk, my_chunk, mine.count, r, x));
    } else {
      KILN_RETURN_IF_ERROR(ring_allreduce(cross_, my_chunk, my_chunk, mine.count, r, x));
    }
    return ring_allgather(local_, a.recv, chunks, a.dtype, x);
  }
  const bool leader = local_.index == 0;
  KILN_RETURN_IF_ERROR(chain_reduce(local_, a.send, a.recv, a.count, 0, inner, x));
  if (leader) KILN_RETURN_IF_ERROR(ring_allreduce(leaders_, a.recv, a.recv, a.count, r, x));
  return chain_broadcast(local_, a.recv, a.count * e, 0, x);
}

Status CommunicatorImpl::point_to_point(const CollectiveArgs& a, Xfer& x) {
  Link* link = mesh_->links[a.peer].get();
  const size_t piece = link->message_bytes_max();
  const Range all{0, a.count};
  const size_t pieces = std::max<size_t>(1, piece_count(a.count, piece));  // empty sends count
  for (size_t s = 0; s < pieces; ++s) {
    const Range p = piece_of(all, piece, s);
    if (a.kind == OpKind::kSend) {
      KILN_RETURN_IF_ERROR(
          send_bytes(link, static_cast<const char*>(a.send) + p.offset, p.count, x));
    } else {
      KILN_RETURN_IF_ERROR(recv_bytes(link, static_cast<char*>(a.recv) + p.offset, p.count, x));
    }
  }
  return Status();
}

Status CommunicatorImpl::flush_tcp(Progress& progress) {
  for (Link* link : mesh_->tcp_links) {
    if (link->flushed()) continue;
    KILN_RETURN_IF_ERROR(
        progress.wait([link] { return link->flushed(); },
                      {"room to send", link->peer_rank(), &link->peer_host(), nullptr, nullptr}));
  }
  return Status();
}

void CommunicatorImpl::write_shm_abort_words(const Status& reason, int culprit) {
  const std::string text = reason.to_string();
  auto write = [&](ShmAbortWord* w) {
    uint32_t expected = 0;
    if (!w->state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) return;
    w->rank = options_.rank;
    w->culprit = culprit;
    const size_t n = std::min(text.size(), ShmAbortWord::kReasonBytes - 1);
    std::memcpy(w->reason, text.data(), n);
    w->reason[n] = '\0';
    w->state.store(2, std::memory_order_release);
  };
  for (const auto& inbox : mesh_->peer_inboxes) {
    if (inbox) write(inbox->abort_word());
  }
}

void CommunicatorImpl::on_failure(const Status& error, uint64_t seq, int culprit) {
  errors_total_.Increment();
  aborted_gauge_.Set(1);
  const Status reason = abort_.aborted() ? abort_.reason() : error;
  abort_.abort(error);
  write_shm_abort_words(reason, culprit);
  // This is the op thread, the only one touching the links: tell TCP peers why, then close.
  for (TcpLink* link : mesh_->tcp_link_impls)
    link->send_abort_and_close(reason.to_string(), culprit);
  log_.error("collective failed; communicator aborted",
             {{"seq", seq}, {"error", error.to_string()}, {"rank", options_.rank}});
  if (!options_.flight_recorder_dir.empty()) {
    Result<std::string> path =
        recorder_.dump_to_dir(options_.flight_recorder_dir, error.to_string());
    if (path.ok()) {
      log_.error("flight recorder dumped", {{"path", *path}});
    } else {
      log_.warn("flight recorder dump failed", {{"error", path.status().to_string()}});
    }
  }
}

void CommunicatorImpl::abort(const Status& reason) {
  if (!abort_.abort(reason.ok() ? Status::aborted("aborted by the application") : reason)) return;
  aborted_gauge_.Set(1);
  write_shm_abort_words(abort_.reason(), -1);
  // Another thread may be inside a link right now: only shut the sockets (a system call on a
  // descriptor that stays open), which makes the op thread's next I/O fail at once.
  for (TcpLink* link : mesh_->tcp_link_impls)
    link->shutdown_connections();
  log_.warn("communicator aborted", {{"reason", abort_.reason().to_string()}});
}

std::string CommunicatorImpl::describe_json() const {
  nlohmann::ordered_json j;
  j["rank"] = options_.rank;
  j["world_size"] = options_.world_size;
  j["host"] = host_;
  j["ring"] = world_.ranks;
  j["piece_bytes"] = world_.piece_bytes;
  j["hierarchical"] = hierarchy_possible_;
  j["shm_cost"] = {{"alpha_us", shm_cost_.alpha_us},
                   {"copy_gbps", 1.0 / (shm_cost_.beta_us_per_byte * 1000.0)},
                   {"reduce_gbps", 3.0 / (shm_cost_.gamma_us_per_byte * 1000.0)},
                   {"ring_from_bytes", ring_crossover_bytes(options_.world_size, shm_cost_)}};
  j["stream_out_bytes_min"] = stream_out_bytes_min_;
  j["wait"] = {{"spin_us", static_cast<double>(policy_.spin_ns) / 1000.0},
               {"spin_us_overlapped", static_cast<double>(policy_.spin_ns_overlapped) / 1000.0},
               {"yield_us", static_cast<double>(policy_.yield_ns) / 1000.0},
               {"cpu_sharers", policy_.cpu_sharers},
               {"why", policy_.why}};
  nlohmann::ordered_json peers = nlohmann::ordered_json::array();
  for (int r = 0; r < options_.world_size; ++r) {
    if (r == options_.rank) continue;
    nlohmann::ordered_json p;
    p["rank"] = r;
    p["host"] = mesh_->records[r].host;
    p["link"] = mesh_->links[r]->kind() == LinkKind::kShm ? "shm" : "tcp";
    peers.push_back(p);
  }
  j["peers"] = peers;
  return j.dump();
}

}  // namespace

Result<std::unique_ptr<Communicator>> Communicator::create(const CommOptions& options, Store* store,
                                                           Logger log,
                                                           obs::MetricsRegistry* metrics) {
  KILN_RETURN_IF_ERROR(validate_options(options));
  // KILN_COMM_* (comm_env.h): a bad value fails here, before any collective.
  KILN_ASSIGN_OR_RETURN(const CommEnv env, comm_env_from_process());
  const std::string host = options.host.empty() ? net::local_hostname() : options.host;
  // This machine's measured profile (read from its cache; measured once per boot, usually by the
  // launcher before it starts the ranks). Without one the built-in constants apply: every rank
  // still agrees on the algorithms, which come from all ranks' records.
  std::optional<MachineProfile> profile;
  if (!env.profile_path.empty()) {
    ProfileCacheOptions cache;
    cache.path = env.profile_path;
    Result<CachedProfile> cached = load_or_measure_machine_profile(cache);
    if (cached.ok()) {
      profile = std::move(cached->profile);
      if (cached->measured) {
        log.info("machine profile measured",
                 {{"path", cached->path}, {"measure_ms", profile->measure_ms}});
      }
    } else {
      log.warn("no machine profile; comm uses its built-in costs",
               {{"error", cached.status().to_string()}});
    }
  }
  const MachineProfile* measured = profile ? &*profile : nullptr;
  Result<std::unique_ptr<Mesh>> mesh = build_mesh(options, host, env, measured, store, log);
  if (!mesh.ok()) {
    return mesh.status().with_context("communicator rank " + std::to_string(options.rank) + "/" +
                                      std::to_string(options.world_size));
  }
  const RankRecord& mine = (*mesh)->records[static_cast<size_t>(options.rank)];
  WaitPolicy policy = choose_wait_policy(cpu_sharers((*mesh)->records, options.rank), mine.cpus,
                                         measured, env.spin_us, env.yield_us);
  auto comm = std::make_unique<CommunicatorImpl>(options, host, log, std::move(*mesh),
                                                 std::move(policy), metrics);
  if (measured != nullptr) {
    comm->set_stream_out_bytes_min(stream_output_bytes_min(
        measured->reduce_gbps, measured->reduce_stream_gbps, measured->l2_bytes));
  }
  log.info("communicator ready", {{"rank", options.rank},
                                  {"world_size", options.world_size},
                                  {"host", host},
                                  {"layout", comm->describe_json()}});
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace kiln::comm
