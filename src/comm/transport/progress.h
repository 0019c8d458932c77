// Progress: how an op waits. Every blocking step of a collective (waiting for a peer's data, or
// for room in a peer's buffer) goes through Progress::wait, which
//
//   1. spins (a cross-core hand-off costs ~0.1 us, a blocking wake-up tens of microseconds to
//      milliseconds on these VMs): as long as this machine's measured wake-up requires, and not
//      at all when another rank shares this rank's CPUs (wait_policy.h),
//   2. then yields the CPU (ranks may outnumber cores: 8 ranks on 2 cores must still progress),
//   3. then sleeps on a futex the peer rings, or in poll() on the TCP sockets, 1 ms at a time,
//
// and while waiting moves TCP data in both directions, so sends to other peers never stall. About
// once a millisecond (and whenever it would sleep) it checks the op's deadline, this
// communicator's abort flag (set locally or by any peer), and whether a local peer process has
// died (pidfd). Each of those ends the wait with an error naming the op and the peer at fault.
//
// One Progress per running op; not thread-safe.
#ifndef KILN_COMM_TRANSPORT_PROGRESS_H_
#define KILN_COMM_TRANSPORT_PROGRESS_H_

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include <kiln/base/clock.h>
#include <kiln/base/function_ref.h>
#include <kiln/base/status.h>

#include "comm/transport/link.h"
#include "comm/transport/wait_policy.h"

namespace kiln::comm {

// The abort word every shared-memory inbox carries, so that any rank on a host can stop every
// other rank there without a system call.
struct ShmAbortWord {
  static constexpr size_t kReasonBytes = 256;
  std::atomic<uint32_t> state;  // 0 live, 1 being written, 2 aborted (reason valid)
  int32_t rank;                 // who aborted
  int32_t culprit;              // the rank its failure points at, or -1
  char reason[kReasonBytes];    // NUL-terminated, truncated
};

// What a rank is doing, published in its shared-memory inbox for the ranks on its host to read
// when they diagnose a stall (which rank never entered which collective). Written only by its
// owner: at the start and end of every op, and when a wait stops spinning.
struct alignas(64) ShmRankStatus {
  std::atomic<uint64_t> coll_seq_plus1;  // 1 + the last collective it started; 0: none yet
  std::atomic<int32_t> waiting_on;       // the rank its current wait is for; -1: none
  std::atomic<uint32_t> in_op;           // 1 while an op runs
  // 1 + the last collective it gave up on (timed out or aborted); 0: none. A rank that left a
  // collective this way entered it: a stall diagnosis follows its wait, not blames it.
  std::atomic<uint64_t> failed_coll_seq_plus1;
};

// The communicator-wide record of why it stopped. Thread-safe. The first abort wins; later ones
// are ignored so the error every op reports names the original cause.
class AbortState {
 public:
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  // The reason. REQUIRES: aborted().
  Status reason() const;
  // Records `reason` unless already aborted; returns true if this call did it.
  bool abort(const Status& reason);

 private:
  std::atomic<bool> aborted_{false};
  mutable std::mutex mu_;
  Status reason_;  // GUARDED_BY(mu_)
};

// A local peer whose death Progress watches for (through a pidfd).
struct PeerProcess {
  int rank = -1;
  std::string host;
  int pid = 0;
  int pidfd = -1;  // -1 when the peer is this process (ranks as threads)
};

// Who an op waits for and why, for error messages: "data from rank 3 (host h3)".
struct WaitTarget {
  const char* what = "data";  // "data", "space"
  int peer_rank = -1;
  const std::string* peer_host = nullptr;
  // Optional futex to sleep on: the peer increments *bell and wakes it when it changes the
  // condition, but only when *sleepers > 0. Both live in shared memory.
  std::atomic<uint32_t>* bell = nullptr;
  std::atomic<uint32_t>* sleepers = nullptr;
};

class Progress {
 public:
  struct Context {
    // Formats "allreduce seq=12 bytes=4194304 ...", prefixed to errors. Called only on failure.
    // REQUIRES: outlives the Progress.
    explicit Context(FunctionRef<std::string()> label) : op_label(label) {}
    FunctionRef<std::string()> op_label;
    Deadline deadline = Deadline::never();
    int64_t timeout_ms = 0;                           // for the timeout message
    AbortState* abort = nullptr;                      // not owned
    ShmAbortWord* shm_abort = nullptr;                // this rank's inbox abort word, or null
    const std::vector<Link*>* tcp_links = nullptr;    // polled while waiting; not owned
    std::vector<PeerProcess>* local_peers = nullptr;  // watched while waiting; not owned
    // Stall diagnosis (shared memory only): this rank's status, and every rank's by rank number
    // (null for ranks on other hosts). `coll_seq_plus1` is this op's, 0 for point to point.
    ShmRankStatus* self_status = nullptr;
    const std::vector<const ShmRankStatus*>* peer_status = nullptr;
    const std::vector<std::string>* hosts = nullptr;  // by rank, for messages
    uint64_t coll_seq_plus1 = 0;
    int self_rank = -1;
    // How long to spin, then yield, before sleeping (a WaitPolicy's; two integers, not the
    // policy, since a context is built for every op).
    int64_t spin_ns = kSpinNsAlone;
    int64_t yield_ns = kYieldNs;
  };

  explicit Progress(Context context) : ctx_(std::move(context)) {}

  // Waits until ready() returns true. On failure returns the error and records it in the abort
  // state (so every later op fails at once with the same cause).
  Status wait(FunctionRef<bool()> ready, const WaitTarget& target);

  // Checks deadline, abort flags and peer liveness once, without waiting. A peer found dead is
  // a failure only if ready() is still false: what it wrote before it exited is visible once
  // its exit is (the last op of a peer that finished and left is complete, not failed).
  Status check(const WaitTarget& target, FunctionRef<bool()> ready);
  // Only the abort flags (a few atomic loads): cheap enough for the start of every op.
  Status check_abort();

  // Adds the op label to an error and records it as the abort reason.
  Status fail(const Status& error);
  // The same for an error that came from a peer (its abort, a closed connection): also says
  // whom this rank was waiting for, which may be closer to the cause.
  Status fail_from_peer(const Status& error);
  // The same for an error that points at `rank`.
  Status fail_at(int rank, const Status& error);
  // The same for an error of `link`: its peer closed the connection (the peer is the culprit),
  // or aborted (then the culprit is the one its abort named, see adopt_culprit).
  Status fail_link(const Link& link, const Status& error);

  const Context& context() const { return ctx_; }
  // The peer the op last waited on, for the flight recorder (-1 if none).
  int last_waited_rank() const { return last_waited_rank_; }
  // The rank the failure points at: a dead peer, the rank a stall leads to, or the peer waited
  // for (-1 if none).
  int culprit_rank() const { return culprit_rank_; }

 private:
  // Moves TCP data; on a link's failure returns its error and sets *failed to it.
  Status poll_tcp(const Link** failed);
  Status check_liveness(int needed_rank);
  void sleep_once(const WaitTarget& target);
  // Follows who-waits-for-whom among local ranks from `rank` and says where the chain ends.
  std::string explain_stall(int rank);
  void publish_wait(const WaitTarget& target, bool* published);
  std::string describe(int rank) const;
  // Adopts the culprit a peer's abort named, unless it is this rank: then the peer was waiting
  // for us, and whom we were waiting for says more.
  void adopt_culprit(int named);

  Context ctx_;
  int last_waited_rank_ = -1;
  int culprit_rank_ = -1;
};

// Wakes a Progress sleeping on `bell` (call after making its condition true).
void ring_bell(std::atomic<uint32_t>* bell, std::atomic<uint32_t>* sleepers);

// Opens a pidfd for `pid`; -1 if the kernel has none (the peer then is only checked through its
// data and the deadline).
int open_pidfd(int pid);

}  // namespace kiln::comm

#endif  // KILN_COMM_TRANSPORT_PROGRESS_H_
