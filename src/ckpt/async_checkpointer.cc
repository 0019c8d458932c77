// The asynchronous checkpointer: a staging copy on the caller's thread, the write, gather, commit
// and retention on one writer thread. See include/kiln/ckpt/async_checkpointer.h.
//
// State machine (under mu): idle --save()--> in_flight --writer done--> idle. save() only copies
// into the staging buffer while the state is idle, and the writer only reads it while in_flight,
// so the buffer needs no lock of its own. `job` is set together with in_flight and taken by the
// writer; there is never more than one.
#include <kiln/ckpt/async_checkpointer.h>

#include <kiln/base/check.h>
#include <kiln/ckpt/catalog.h>
#include <kiln/obs/metrics.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "ckpt/shard.h"
#include "ckpt/staging_buffer.h"

namespace kiln::ckpt {
namespace {

// What save() hands the writer: the image lies in the staging buffer, [0, bytes).
struct Job {
  int64_t step = 0;
  size_t bytes = 0;
  std::string metadata_json;
};

Status validate_options(const AsyncCheckpointerOptions& o) {
  KILN_RETURN_IF_ERROR(internal::validate_shard_spec({o.dir, 0, o.rank, o.world}));
  if (o.keep_last < 0 || o.keep_last > kKeepLastMax) {
    return Status::invalid_argument("keep_last " + std::to_string(o.keep_last) +
                                    " is outside [0, " + std::to_string(kKeepLastMax) + "]");
  }
  if (o.wait_timeout_ms < 0) return Status::invalid_argument("wait_timeout_ms is negative");
  if (o.write.chunk_bytes < kWriteChunkBytesMin) {
    return Status::invalid_argument("write chunk of " + std::to_string(o.write.chunk_bytes) +
                                    " bytes is below " + std::to_string(kWriteChunkBytesMin));
  }
  if (o.world > 1 && !o.gather) {
    return Status::invalid_argument(
        "world size " + std::to_string(o.world) +
        " needs a gather function to bring every rank's file record to rank 0");
  }
  return Status();
}

}  // namespace

std::string_view overlap_policy_name(OverlapPolicy policy) {
  return policy == OverlapPolicy::kWait ? "wait" : "skip";
}

Result<OverlapPolicy> parse_overlap_policy(std::string_view name) {
  if (name == "wait") return OverlapPolicy::kWait;
  if (name == "skip") return OverlapPolicy::kSkip;
  return Status::invalid_argument("overlap policy '" + std::string(name) +
                                  "': expected 'wait' or 'skip'");
}

std::string_view save_outcome_name(SaveOutcome outcome) {
  switch (outcome) {
    case SaveOutcome::kStarted: return "started";
    case SaveOutcome::kWaited: return "waited";
    case SaveOutcome::kSkipped: return "skipped";
  }
  return "?";
}

struct AsyncCheckpointer::Impl {
  explicit Impl(AsyncCheckpointerOptions o);
  ~Impl();

  Result<SaveTicket> save(const SaveRequest& request);
  // Decides what a request does while a write may be in flight: sets ticket->outcome, and
  // *skipped under kSkip; under kWait blocks until idle. kTimeout when the wait runs out.
  Status wait_for_writer(int64_t step, SaveTicket* ticket, bool* skipped);
  Status ensure_staging(size_t bytes);
  void writer_loop();
  CompletedSave run(const Job& job);
  Result<std::vector<FileRecord>> gather(int64_t step, const FileRecord& mine);
  void finish_save(const CompletedSave& done);

  const AsyncCheckpointerOptions options;
  const Logger log;
  const std::string rank_label;

  obs::MetricGroup metrics;
  prometheus::Counter& started_total;
  prometheus::Counter& waited_total;
  prometheus::Counter& skipped_total;
  prometheus::Counter& timed_out_total;
  prometheus::Histogram& stall_seconds;
  prometheus::Histogram& write_seconds;
  prometheus::Counter& bytes_total;
  prometheus::Counter& failures_total;
  prometheus::Gauge& in_flight_gauge;
  prometheus::Gauge& last_durable_step;
  prometheus::Gauge& staging_bytes_gauge;
  prometheus::Gauge& staging_pinned_gauge;

  std::atomic<bool> saving{false};  // save() is not reentrant; this catches misuse

  mutable std::mutex mu;
  std::condition_variable cv;
  bool in_flight = false;               // GUARDED_BY(mu)
  int64_t in_flight_step = -1;          // GUARDED_BY(mu)
  std::optional<Job> job;               // GUARDED_BY(mu)
  bool stopping = false;                // GUARDED_BY(mu)
  int waiters = 0;                      // GUARDED_BY(mu)
  std::deque<CompletedSave> completed;  // GUARDED_BY(mu); at most kCompletedSavesMax
  internal::StagingBuffer staging;      // see the state machine at the top
  std::atomic<size_t> staging_capacity{0};
  std::atomic<bool> staging_pinned{false};
  std::thread writer;  // last: starts once everything above is built
};

namespace {

prometheus::Histogram::BucketBoundaries stall_buckets() {
  // 100 us (a small model's copy) to about 7 min (a long wait under kWait), x4 per bucket.
  return obs::exponential_buckets(1e-4, 4, 12);
}

prometheus::Histogram::BucketBoundaries write_buckets() {
  // 10 ms (a tiny shard on tmpfs) to about 5.5 min (tens of GB), x2 per bucket.
  return obs::exponential_buckets(1e-2, 2, 16);
}

}  // namespace

AsyncCheckpointer::Impl::Impl(AsyncCheckpointerOptions o)
    : options(std::move(o)),
      log(options.log),
      rank_label(std::to_string(options.rank)),
      metrics(options.metrics),
      started_total(metrics.add_counter("kiln_ckpt_save_requests_total",
                                        "Checkpoint requests, by what save() did with them.",
                                        {{"rank", rank_label}, {"outcome", "started"}})),
      waited_total(metrics.add_counter("kiln_ckpt_save_requests_total",
                                       "Checkpoint requests, by what save() did with them.",
                                       {{"rank", rank_label}, {"outcome", "waited"}})),
      skipped_total(metrics.add_counter("kiln_ckpt_save_requests_total",
                                        "Checkpoint requests, by what save() did with them.",
                                        {{"rank", rank_label}, {"outcome", "skipped"}})),
      timed_out_total(metrics.add_counter("kiln_ckpt_save_requests_total",
                                          "Checkpoint requests, by what save() did with them.",
                                          {{"rank", rank_label}, {"outcome", "timed_out"}})),
      stall_seconds(metrics.add_histogram(
          "kiln_ckpt_stall_seconds",
          "Time save() blocked the training loop: waiting for the previous write, then copying.",
          stall_buckets(), {{"rank", rank_label}})),
      write_seconds(metrics.add_histogram("kiln_ckpt_write_seconds",
                                          "Shard write time, first byte to durable rename.",
                                          write_buckets(), {{"rank", rank_label}})),
      bytes_total(metrics.add_counter("kiln_ckpt_bytes_written_total",
                                      "Shard bytes written durably.", {{"rank", rank_label}})),
      failures_total(metrics.add_counter("kiln_ckpt_write_failures_total",
                                         "Checkpoints whose write, gather or commit failed.",
                                         {{"rank", rank_label}})),
      in_flight_gauge(metrics.add_gauge(
          "kiln_ckpt_in_flight", "1 while a checkpoint is being written.", {{"rank", rank_label}})),
      last_durable_step(metrics.add_gauge("kiln_ckpt_last_durable_step",
                                          "Step of the last checkpoint saved without error.",
                                          {{"rank", rank_label}})),
      staging_bytes_gauge(metrics.add_gauge("kiln_ckpt_staging_bytes",
                                            "Size of the checkpoint staging buffer.",
                                            {{"rank", rank_label}})),
      staging_pinned_gauge(metrics.add_gauge("kiln_ckpt_staging_pinned",
                                             "1 when the staging buffer is mlock'd.",
                                             {{"rank", rank_label}})) {
  last_durable_step.Set(-1);
  writer = std::thread([this] { writer_loop(); });
}

AsyncCheckpointer::Impl::~Impl() {
  {
    std::lock_guard<std::mutex> lock(mu);
    stopping = true;
  }
  cv.notify_all();
  writer.join();  // the writer finishes the checkpoint in flight first
}

Status AsyncCheckpointer::Impl::ensure_staging(size_t bytes) {
  if (staging.capacity() >= bytes) return Status();
  staging = internal::StagingBuffer();  // release the old one before mapping a larger one
  KILN_ASSIGN_OR_RETURN(staging, internal::StagingBuffer::allocate(bytes, options.pin_staging));
  staging_capacity = staging.capacity();
  staging_pinned = staging.pinned();
  staging_bytes_gauge.Set(static_cast<double>(staging.capacity()));
  staging_pinned_gauge.Set(staging.pinned() ? 1 : 0);
  if (options.pin_staging && !staging.pinned()) {
    log.warn("checkpoint staging buffer is not pinned: mlock refused (RLIMIT_MEMLOCK?)",
             {{"bytes", staging.capacity()}});
  }
  return Status();
}

Status AsyncCheckpointer::Impl::wait_for_writer(int64_t step, SaveTicket* ticket, bool* skipped) {
  std::unique_lock<std::mutex> lock(mu);
  *skipped = false;
  if (!in_flight) {
    ticket->outcome = SaveOutcome::kStarted;
    return Status();
  }
  if (options.policy == OverlapPolicy::kSkip) {
    *skipped = true;
    ticket->outcome = SaveOutcome::kSkipped;
    log.info("checkpoint request skipped: the previous one is still being written",
             {{"step", step}, {"in_flight_step", in_flight_step}});
    return Status();
  }
  ticket->outcome = SaveOutcome::kWaited;
  const Deadline deadline = Deadline::after_ms(options.wait_timeout_ms);
  ++waiters;
  const bool idle = cv.wait_until(lock, deadline.to_steady(), [this] { return !in_flight; });
  --waiters;
  if (!idle) {
    return Status::timeout("checkpoint step=" + std::to_string(step) + ": the write of step " +
                           std::to_string(in_flight_step) + " is still running after " +
                           std::to_string(options.wait_timeout_ms) + " ms");
  }
  return Status();
}

Result<SaveTicket> AsyncCheckpointer::Impl::save(const SaveRequest& request) {
  KILN_CHECK(!saving.exchange(true)) << "AsyncCheckpointer::save() called concurrently";
  struct Done {
    std::atomic<bool>* flag;
    ~Done() { *flag = false; }
  } done{&saving};

  const Stopwatch watch;
  const ShardSpec spec{options.dir, request.step, options.rank, options.world};
  KILN_ASSIGN_OR_RETURN(const internal::ShardLayout layout,
                        internal::layout_shard(spec, request.tensors, request.shard_metadata));
  const nlohmann::json metadata =
      nlohmann::json::parse(request.manifest_metadata_json, nullptr, false);
  if (metadata.is_discarded() || !metadata.is_object()) {
    return Status::invalid_argument("checkpoint step=" + std::to_string(request.step) +
                                    ": manifest metadata is not a JSON object");
  }

  SaveTicket ticket;
  bool skipped = false;
  const Stopwatch wait_watch;
  const Status waited = wait_for_writer(request.step, &ticket, &skipped);
  if (!waited.ok()) {
    timed_out_total.Increment();
    stall_seconds.Observe(watch.elapsed_seconds());
    return waited;
  }
  if (skipped) {
    skipped_total.Increment();
    ticket.blocked_seconds = watch.elapsed_seconds();
    return ticket;
  }
  if (ticket.outcome == SaveOutcome::kWaited) ticket.wait_seconds = wait_watch.elapsed_seconds();

  // The writer is idle and only this thread starts it, so the staging buffer is ours until the
  // job is published below.
  const Stopwatch copy_watch;
  KILN_RETURN_IF_ERROR(ensure_staging(layout.file_bytes()));
  std::byte* out = staging.data();
  std::memcpy(out, layout.header.data(), layout.header.size());
  out += layout.header.size();
  for (const internal::ByteSpan& span : layout.data) {
    std::memcpy(out, span.data, span.size);
    out += span.size;
  }
  KILN_CHECK_EQ(static_cast<uint64_t>(out - staging.data()), layout.file_bytes());
  ticket.copy_seconds = copy_watch.elapsed_seconds();

  {
    std::lock_guard<std::mutex> lock(mu);
    KILN_CHECK(!in_flight && !job.has_value());
    job =
        Job{request.step, static_cast<size_t>(layout.file_bytes()), request.manifest_metadata_json};
    in_flight = true;
    in_flight_step = request.step;
  }
  cv.notify_all();
  in_flight_gauge.Set(1);
  (ticket.outcome == SaveOutcome::kWaited ? waited_total : started_total).Increment();
  ticket.blocked_seconds = watch.elapsed_seconds();
  stall_seconds.Observe(ticket.blocked_seconds);
  return ticket;
}

void AsyncCheckpointer::Impl::writer_loop() {
  while (true) {
    Job next;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [this] { return stopping || job.has_value(); });
      if (!job.has_value()) return;  // stopping, nothing in flight
      next = std::move(*job);
      job.reset();
    }
    if (options.before_write) options.before_write(next.step);
    const CompletedSave done = run(next);
    finish_save(done);
  }
}

Result<std::vector<FileRecord>> AsyncCheckpointer::Impl::gather(int64_t step,
                                                                const FileRecord& mine) {
  if (!options.gather) return std::vector<FileRecord>{mine};
  // The gather function is the trainer's code; an exception must not kill the writer thread.
  try {
    return options.gather(step, mine);
  } catch (const std::exception& e) {
    return Status::aborted(std::string("gather threw: ") + e.what());
  } catch (...) {
    return Status::aborted("gather threw a non-standard exception");
  }
}

CompletedSave AsyncCheckpointer::Impl::run(const Job& next) {
  CompletedSave done;
  done.step = next.step;
  const std::string where = "checkpoint step=" + std::to_string(next.step);
  const Stopwatch total;
  const ShardSpec spec{options.dir, next.step, options.rank, options.world};
  const internal::ByteSpan image{staging.data(), next.bytes};
  Result<FileRecord> record =
      internal::write_shard_spans(spec, std::span(&image, 1), options.write);
  done.write_seconds = total.elapsed_seconds();
  if (!record.ok()) {
    done.status = record.status().with_context(where);
    return done;
  }
  done.record = *record;
  bytes_total.Increment(static_cast<double>(record->size_bytes));
  write_seconds.Observe(done.write_seconds);

  Result<std::vector<FileRecord>> records = gather(next.step, *record);
  if (!records.ok()) {
    done.status = records.status().with_context(where + ": gather");
    return done;
  }
  if (options.rank == 0) {
    const CommitSpec commit_spec{options.dir,         next.step,          options.world,
                                 std::move(*records), next.metadata_json, options.write.fs};
    done.status = commit(commit_spec);
    if (!done.status.ok()) {
      done.status = done.status.with_context(where + ": commit");
      return done;
    }
    done.committed = true;
    if (options.keep_last > 0) {
      Result<std::vector<int64_t>> removed = apply_retention(options.dir, options.keep_last);
      // The checkpoint is committed either way; a failed clean-up only costs disk space.
      if (!removed.ok()) {
        log.warn("checkpoint retention failed", {{"error", removed.status().message()}});
      } else if (!removed->empty()) {
        log.info("checkpoint retention removed old checkpoints",
                 {{"removed", removed->size()}, {"oldest_removed", removed->front()}});
      }
    }
  }
  done.total_seconds = total.elapsed_seconds();
  return done;
}

void AsyncCheckpointer::Impl::finish_save(const CompletedSave& done) {
  if (done.status.ok()) {
    last_durable_step.Set(static_cast<double>(done.step));
    const double mib_per_s = done.write_seconds > 0 ? static_cast<double>(done.record.size_bytes) /
                                                          done.write_seconds / (1 << 20)
                                                    : 0.0;
    log.info("checkpoint saved", {{"step", done.step},
                                  {"bytes", done.record.size_bytes},
                                  {"write_s", done.write_seconds},
                                  {"write_mib_per_s", mib_per_s},
                                  {"committed", done.committed}});
  } else {
    failures_total.Increment();
    log.error("checkpoint failed", {{"step", done.step}, {"error", done.status.message()}});
  }
  std::lock_guard<std::mutex> lock(mu);
  if (completed.size() == kCompletedSavesMax) {
    log.warn("completed checkpoint results were not collected; dropping the oldest",
             {{"dropped_step", completed.front().step}});
    completed.pop_front();
  }
  completed.push_back(done);
  in_flight = false;
  in_flight_step = -1;
  in_flight_gauge.Set(0);
  cv.notify_all();
}

Result<std::unique_ptr<AsyncCheckpointer>> AsyncCheckpointer::create(
    AsyncCheckpointerOptions options) {
  KILN_RETURN_IF_ERROR(validate_options(options));
  const size_t staging_bytes = options.staging_bytes;
  auto impl = std::make_unique<Impl>(std::move(options));
  if (staging_bytes > 0) KILN_RETURN_IF_ERROR(impl->ensure_staging(staging_bytes));
  return std::unique_ptr<AsyncCheckpointer>(new AsyncCheckpointer(std::move(impl)));
}

AsyncCheckpointer::AsyncCheckpointer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

AsyncCheckpointer::~AsyncCheckpointer() = default;

Result<SaveTicket> AsyncCheckpointer::save(const SaveRequest& request) {
  return impl_->save(request);
}

Status AsyncCheckpointer::wait_idle(Deadline deadline) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  const bool idle =
      deadline.infinite()
          ? (impl_->cv.wait(lock, [this] { return !impl_->in_flight; }), true)
          : impl_->cv.wait_until(lock, deadline.to_steady(), [this] { return !impl_->in_flight; });
  if (!idle) {
    return Status::timeout("checkpoint of step " + std::to_string(impl_->in_flight_step) +
                           " is still being written");
  }
  return Status();
}

std::vector<CompletedSave> AsyncCheckpointer::take_completed() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<CompletedSave> out(impl_->completed.begin(), impl_->completed.end());
  impl_->completed.clear();
  return out;
}

bool AsyncCheckpointer::in_flight() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->in_flight;
}

int AsyncCheckpointer::waiters() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->waiters;
}

bool AsyncCheckpointer::staging_pinned() const {
  return impl_->staging_pinned;
}

size_t AsyncCheckpointer::staging_bytes() const {
  return impl_->staging_capacity;
}

}  // namespace kiln::ckpt
