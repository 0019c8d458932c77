// See progress.h.
#include "comm/transport/progress.h"

#include <immintrin.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace kiln::comm {
namespace {

// How long to spin, then yield, comes from the context's WaitPolicy (wait_policy.h).
// Longest single sleep; bounds how late a deadline, an abort or a peer's death is noticed.
constexpr int64_t kSleepNs = 1'000'000;
// While spinning, read the clock once every this many iterations (a clock read costs ~20 ns).
constexpr uint64_t kSpinIterationsPerClockRead = 64;
// Check deadline, abort flags and peer liveness at least this often while waiting.
constexpr int64_t kCheckIntervalNs = 1'000'000;
// When both a futex and sockets could wake us, poll the sockets this long at a time instead.
constexpr int64_t kMixedSleepNs = 50'000;

std::string describe_peer(int rank, const std::string* host) {
  std::string s = "rank " + std::to_string(rank);
  if (host != nullptr && !host->empty()) s += " (host " + *host + ")";
  return s;
}

}  // namespace

std::string Progress::describe(int rank) const {
  const std::string* host = nullptr;
  if (ctx_.hosts != nullptr && rank >= 0 && static_cast<size_t>(rank) < ctx_.hosts->size()) {
    host = &(*ctx_.hosts)[rank];
  }
  return describe_peer(rank, host);
}

std::string Progress::explain_stall(int rank) {
  culprit_rank_ = rank;
  if (ctx_.peer_status == nullptr || ctx_.coll_seq_plus1 == 0) return "";
  std::string chain;
  std::vector<bool> seen(ctx_.peer_status->size(), false);
  while (rank >= 0 && static_cast<size_t>(rank) < seen.size() && !seen[rank]) {
    seen[rank] = true;
    const ShmRankStatus* st = (*ctx_.peer_status)[rank];
    if (st == nullptr) break;  // on another host: its state is not visible from here
    const uint64_t seq = st->coll_seq_plus1.load(std::memory_order_acquire);
    const bool in_op = st->in_op.load(std::memory_order_acquire) != 0;
    const bool gave_up =
        st->failed_coll_seq_plus1.load(std::memory_order_acquire) == ctx_.coll_seq_plus1;
    if (seq < ctx_.coll_seq_plus1 || (seq == ctx_.coll_seq_plus1 && !in_op && !gave_up)) {
      culprit_rank_ = rank;
      const std::string last = seq == 0 ? "none" : "seq=" + std::to_string(seq - 1);
      return chain + "; " + describe(rank) + " has not entered this collective (its last " +
             "collective is " + last + (in_op ? ", and it is running another op" : "") + ")";
    }
    if (seq > ctx_.coll_seq_plus1) break;  // it finished this one already: not the hold-up
    const int next = st->waiting_on.load(std::memory_order_acquire);
    if (next < 0) break;
    chain += "; " + describe(rank) + " waits for " + describe(next);
    culprit_rank_ = next;
    rank = next;
  }
  return chain;
}

Status AbortState::reason() const {
  std::lock_guard lock(mu_);
  return reason_;
}

bool AbortState::abort(const Status& reason) {
  std::lock_guard lock(mu_);
  if (aborted_.load(std::memory_order_relaxed)) return false;
  reason_ = reason.ok() ? Status::aborted("communicator aborted") : reason;
  aborted_.store(true, std::memory_order_release);
  return true;
}

void ring_bell(std::atomic<uint32_t>* bell, std::atomic<uint32_t>* sleepers) {
  // The fence orders the caller's publishing store before the read of `sleepers`; a sleeper
  // increments `sleepers` before re-checking its condition, so one of the two sees the other.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sleepers->load(std::memory_order_relaxed) == 0) return;
  bell->fetch_add(1, std::memory_order_release);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(bell), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

int open_pidfd(int pid) {
  const long fd = syscall(SYS_pidfd_open, pid, 0);
  return fd < 0 ? -1 : static_cast<int>(fd);
}

Status Progress::fail(const Status& error) {
  Status labelled = error.with_context(ctx_.op_label());
  if (ctx_.abort != nullptr) ctx_.abort->abort(labelled);
  return labelled;
}

Status Progress::fail_from_peer(const Status& error) {
  if (last_waited_rank_ < 0) return fail(error);
  if (culprit_rank_ < 0) culprit_rank_ = last_waited_rank_;
  return fail(Status(error.code(), error.message() + " (this rank was waiting for " +
                                       describe(last_waited_rank_) + ")"));
}

void Progress::adopt_culprit(int named) {
  if (named >= 0 && named != ctx_.self_rank) {
    culprit_rank_ = named;
  } else if (last_waited_rank_ >= 0) {
    culprit_rank_ = last_waited_rank_;
  }
}

Status Progress::fail_at(int rank, const Status& error) {
  culprit_rank_ = rank;
  return fail(error);
}

Status Progress::fail_link(const Link& link, const Status& error) {
  if (culprit_rank_ < 0) {
    if (link.abort_culprit() >= 0) {
      adopt_culprit(link.abort_culprit());
    } else {
      culprit_rank_ = link.peer_rank();
    }
  }
  return fail_from_peer(error);
}

Status Progress::poll_tcp(const Link** failed) {
  if (ctx_.tcp_links == nullptr) return Status();
  for (Link* link : *ctx_.tcp_links) {
    Status s = link->poll_io();
    if (!s.ok()) {
      *failed = link;
      return s;
    }
  }
  return Status();
}

Status Progress::check_liveness(int needed_rank) {
  // Only the peer this wait needs: a peer that finished its part of the op and exited is fine,
  // and a dead peer further along the chain is noticed by the rank that waits on it, whose
  // abort then reaches this one.
  if (ctx_.local_peers == nullptr || needed_rank < 0) return Status();
  for (const PeerProcess& peer : *ctx_.local_peers) {
    if (peer.pidfd < 0 || peer.rank != needed_rank) continue;
    pollfd p{peer.pidfd, POLLIN, 0};
    if (poll(&p, 1, 0) > 0) {
      culprit_rank_ = peer.rank;
      return Status::unavailable(describe_peer(peer.rank, &peer.host) + " (pid " +
                                 std::to_string(peer.pid) + ") exited");
    }
  }
  return Status();
}

Status Progress::check_abort() {
  if (ctx_.abort != nullptr && ctx_.abort->aborted()) return ctx_.abort->reason();
  if (ctx_.shm_abort != nullptr && ctx_.shm_abort->state.load(std::memory_order_acquire) == 2) {
    const ShmAbortWord& w = *ctx_.shm_abort;
    const std::string reason(w.reason, strnlen(w.reason, ShmAbortWord::kReasonBytes));
    adopt_culprit(w.culprit);
    return fail_from_peer(
        Status::aborted("rank " + std::to_string(w.rank) + " aborted: " + reason));
  }
  return Status();
}

Status Progress::check(const WaitTarget& target, FunctionRef<bool()> ready) {
  KILN_RETURN_IF_ERROR(check_abort());
  const int culprit_before = culprit_rank_;
  if (Status s = check_liveness(target.peer_rank); !s.ok()) {
    // The peer may have written what this wait needs and exited since ready() was last read.
    if (ready()) {
      culprit_rank_ = culprit_before;
      return Status();
    }
    return fail(s);
  }
  const Link* failed = nullptr;
  if (Status s = poll_tcp(&failed); !s.ok()) return fail_link(*failed, s);
  if (ctx_.deadline.expired()) {
    return fail(Status::timeout("timed out after " + std::to_string(ctx_.timeout_ms) +
                                " ms waiting for " + target.what + " from " +
                                describe_peer(target.peer_rank, target.peer_host) +
                                explain_stall(target.peer_rank)));
  }
  return Status();
}

void Progress::sleep_once(const WaitTarget& target) {
  const int64_t left_ns = std::max<int64_t>(ctx_.deadline.remaining_ms(), 1) * 1'000'000;
  const int64_t sleep_ns = std::min(kSleepNs, left_ns);
  const bool have_futex = target.bell != nullptr && target.sleepers != nullptr;
  if (ctx_.tcp_links != nullptr && !ctx_.tcp_links->empty()) {
    std::vector<pollfd> fds;
    for (const Link* link : *ctx_.tcp_links)
      link->add_poll_fds(&fds);
    const int64_t poll_ns = have_futex ? std::min(kMixedSleepNs, sleep_ns) : sleep_ns;
    timespec ts{0, static_cast<long>(poll_ns)};
    ppoll(fds.data(), fds.size(), &ts, nullptr);
    return;
  }
  if (have_futex) {
    const uint32_t seen = target.bell->load(std::memory_order_acquire);
    target.sleepers->fetch_add(1, std::memory_order_seq_cst);
    timespec ts{0, static_cast<long>(sleep_ns)};
    // Returns at once if the bell already moved (EAGAIN) or when the peer rings it.
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(target.bell), FUTEX_WAIT, seen, &ts, nullptr, 0);
    target.sleepers->fetch_sub(1, std::memory_order_relaxed);
    return;
  }
  timespec ts{0, static_cast<long>(std::min(kMixedSleepNs, sleep_ns))};
  nanosleep(&ts, nullptr);
}

void Progress::publish_wait(const WaitTarget& target, bool* published) {
  // Only once a wait stops being a quick hand-off: peers diagnosing a stall read it.
  if (*published || ctx_.self_status == nullptr) return;
  ctx_.self_status->waiting_on.store(target.peer_rank, std::memory_order_release);
  *published = true;
}

Status Progress::wait(FunctionRef<bool()> ready, const WaitTarget& target) {
  last_waited_rank_ = target.peer_rank;
  if (ready()) return Status();
  const bool have_tcp = ctx_.tcp_links != nullptr && !ctx_.tcp_links->empty();
  const int64_t start_ns = monotonic_now_ns();
  int64_t now_ns = start_ns;
  int64_t next_check_ns = start_ns + kCheckIntervalNs;
  bool published = false;
  for (uint64_t i = 1;; ++i) {
    if (have_tcp) {
      const Link* failed = nullptr;
      if (Status s = poll_tcp(&failed); !s.ok()) return fail_link(*failed, s);
    }
    if (ready()) return Status();
    const int64_t waited_ns = now_ns - start_ns;
    if (waited_ns < ctx_.spin_ns) {
      _mm_pause();
      if (i % kSpinIterationsPerClockRead != 0) continue;
    } else if (waited_ns < ctx_.spin_ns + ctx_.yield_ns) {
      publish_wait(target, &published);
      sched_yield();
    } else {
      // About to sleep: make sure nothing already ended the wait, then sleep at most 1 ms.
      publish_wait(target, &published);
      KILN_RETURN_IF_ERROR(check(target, ready));
      next_check_ns = now_ns + kCheckIntervalNs;
      if (ready()) return Status();
      sleep_once(target);
    }
    now_ns = monotonic_now_ns();
    if (now_ns >= next_check_ns) {
      KILN_RETURN_IF_ERROR(check(target, ready));
      next_check_ns = now_ns + kCheckIntervalNs;
    }
  }
}

}  // namespace kiln::comm
