// AsyncCheckpointer: checkpoints that cost the training loop a memory copy, not a disk write.
//
// At a step boundary the trainer calls save(): the state is copied into a staging buffer laid out
// as the shard file's exact image (mlock'd where the OS allows, plain memory otherwise) and
// save() returns; a background writer thread writes that image (write_shard's protocol), gathers
// every rank's FileRecord through the trainer's `gather` function, and on rank 0 commits the
// manifest and applies retention. Training continues meanwhile.
//
// At most one checkpoint is in flight (one staging buffer, one writer). A save() that arrives
// while one is still being written follows the policy: kWait blocks until it is done (bounded by
// wait_timeout_ms), kSkip drops the request. Both are counted, and what the loop waited is the
// stall:
//
//   kiln_ckpt_save_requests_total{rank,outcome="started|waited|skipped"}
//   kiln_ckpt_stall_seconds{rank}          time save() blocked the caller (wait + copy)
//   kiln_ckpt_write_seconds{rank}          shard write, first byte to durable rename
//   kiln_ckpt_bytes_written_total{rank}    shard bytes written
//   kiln_ckpt_write_failures_total{rank}   saves whose write, gather or commit failed
//   kiln_ckpt_in_flight{rank}              1 while a checkpoint is being written
//   kiln_ckpt_last_durable_step{rank}      step of the last save that completed without error
//   kiln_ckpt_staging_bytes{rank}, kiln_ckpt_staging_pinned{rank}
//
// Thread safety: save() is called from one thread at a time (the training loop); the other
// methods may be called from any thread. The destructor waits for the write in flight.
#ifndef KILN_CKPT_ASYNC_CHECKPOINTER_H_
#define KILN_CKPT_ASYNC_CHECKPOINTER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/base/clock.h>
#include <kiln/base/log.h>
#include <kiln/base/result.h>
#include <kiln/base/status.h>
#include <kiln/ckpt/checkpoint.h>
#include <kiln/ckpt/limits.h>
#include <kiln/ckpt/safetensors.h>

namespace kiln::obs {
class MetricsRegistry;
}

namespace kiln::ckpt {

// What save() does while a previous checkpoint is still being written.
enum class OverlapPolicy {
  kWait,  // block until it is durable (bounded by wait_timeout_ms), then save
  kSkip,  // drop this request; the next one will be taken
};
std::string_view overlap_policy_name(OverlapPolicy policy);  // "wait", "skip"
Result<OverlapPolicy> parse_overlap_policy(std::string_view name);

enum class SaveOutcome { kStarted, kWaited, kSkipped };
std::string_view save_outcome_name(SaveOutcome outcome);  // "started", "waited", "skipped"

struct AsyncCheckpointerOptions {
  std::string dir;  // the checkpoint root
  int rank = 0;
  int world = 1;
  OverlapPolicy policy = OverlapPolicy::kWait;
  // How long save() may block under kWait before it gives up with kTimeout.
  int64_t wait_timeout_ms = kSaveWaitTimeoutMsDefault;
  // Rank 0 keeps this many complete checkpoints after each commit (apply_retention); 0 keeps all.
  int keep_last = 3;
  WriteOptions write;

  // Performance: the staging buffer. It is allocated at create() when staging_bytes > 0 (the
  // state's size is known at start-up: allocate up front), else at the first save(), and grows
  // only when a save needs more. pin_staging asks mlock to keep it resident; where that is not
  // allowed (RLIMIT_MEMLOCK) it stays plain memory, pre-faulted, and staging_pinned() says so.
  size_t staging_bytes = 0;
  bool pin_staging = true;

  // Called on the writer thread once this rank's shard is durable, with its record; returns every
  // rank's records in rank order (required on rank 0; other ranks may return an empty vector).
  // The trainer implements it over the rendezvous store or kiln_comm (using a communicator or
  // tags that cannot interleave with the training loop's collectives). It must not block longer
  // than the trainer's own timeout. Required when world > 1; with world 1 it may be empty.
  std::function<Result<std::vector<FileRecord>>(int64_t step, const FileRecord& mine)> gather;

  // Test hook, called on the writer thread before each write begins; a test blocks here to hold a
  // write in flight. Empty in production.
  std::function<void(int64_t step)> before_write;

  obs::MetricsRegistry* metrics = nullptr;  // not owned; outlives the checkpointer; may be null
  Logger log;
};

struct SaveRequest {
  int64_t step = 0;
  // The state to save; copied before save() returns, so the caller may change it right after.
  std::span<const TensorRef> tensors;
  std::map<std::string, std::string> shard_metadata;  // the shard's __metadata__
  std::string manifest_metadata_json = "{}";          // CommitSpec::metadata_json (rank 0)
};

struct SaveTicket {
  SaveOutcome outcome = SaveOutcome::kStarted;
  double wait_seconds = 0;  // blocked on the previous write (kWaited only)
  double copy_seconds = 0;  // copying the state into the staging buffer (0 when skipped)
  // The whole call as the caller saw it (laying out the shard, waiting, copying), measured with
  // one clock from entry to return: at least wait + copy, never derived from them.
  double blocked_seconds = 0;
  double stall_seconds() const { return blocked_seconds; }
};

// The result of one save's background work.
struct CompletedSave {
  int64_t step = 0;
  Status status;  // OK iff the shard is durable and, on rank 0, the checkpoint is committed
  FileRecord record;
  bool committed = false;    // rank 0: the manifest was written
  double write_seconds = 0;  // the shard, first byte to durable rename
  double total_seconds = 0;  // write + gather + commit + retention
};

class AsyncCheckpointer {
 public:
  // Starts the writer thread (and allocates the staging buffer when staging_bytes > 0).
  // kInvalidArgument for inconsistent options (rank, world, keep_last, a missing gather when
  // world > 1, chunk size); kIoError when the staging buffer cannot be allocated.
  static Result<std::unique_ptr<AsyncCheckpointer>> create(AsyncCheckpointerOptions options);
  ~AsyncCheckpointer();
  AsyncCheckpointer(const AsyncCheckpointer&) = delete;
  AsyncCheckpointer& operator=(const AsyncCheckpointer&) = delete;

  // Copies `request`'s state and hands it to the writer; returns once the copy is done (see the
  // policy above for what happens when a write is in flight). Errors: kInvalidArgument for a bad
  // request (step, tensors, metadata), kTimeout when kWait waited wait_timeout_ms in vain,
  // kIoError when the staging buffer cannot grow. Background failures are not returned here;
  // they arrive through take_completed() and the failure counter.
  Result<SaveTicket> save(const SaveRequest& request);

  // Blocks until no checkpoint is in flight. kTimeout when `deadline` passes first.
  Status wait_idle(Deadline deadline);

  // The saves completed since the last call, oldest first (at most kCompletedSavesMax; older ones
  // are dropped and logged).
  std::vector<CompletedSave> take_completed();

  bool in_flight() const;
  // How many save() calls are blocked waiting for the writer (0 or 1): for tests and diagnostics.
  int waiters() const;
  bool staging_pinned() const;
  size_t staging_bytes() const;

 private:
  struct Impl;
  explicit AsyncCheckpointer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::ckpt

#endif  // KILN_CKPT_ASYNC_CHECKPOINTER_H_
