// The storage lifecycle of finished jobs (kiln/sched/lifecycle.h).
#include <kiln/sched/lifecycle.h>

#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include <kiln/ckpt/catalog.h>

namespace kiln::sched {

int64_t directory_bytes(const std::string& dir, size_t entries_max) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(dir, ec))) return 0;
  int64_t bytes = 0;
  size_t entries = 0;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (++entries > entries_max) break;
    const fs::file_status st = it->symlink_status(ec);
    if (ec) break;
    if (fs::is_regular_file(st)) {
      const uintmax_t size = it->file_size(ec);
      if (!ec) bytes += static_cast<int64_t>(size);
      ec.clear();
    }
  }
  return bytes;
}

Lifecycle::Lifecycle(LifecycleOptions options, StateStore* store, const Clock* clock, Logger log)
    : options_(options), store_(store), clock_(clock), log_(std::move(log)) {}

std::map<std::string, int64_t> Lifecycle::checkpoint_bytes_by_team() const {
  std::lock_guard<std::mutex> lock(mu_);
  return by_team_;
}

Result<LifecyclePass> Lifecycle::run_once() {
  KILN_ASSIGN_OR_RETURN(std::vector<JobRecord> jobs, store_->list_jobs(""));
  LifecyclePass pass;
  const int64_t now = clock_->wall_ns();
  for (const JobRecord& job : jobs) {
    const std::string& dir = job.spec.checkpoint_dir;
    const bool finished =
        job.state == "succeeded" || job.state == "failed" || job.state == "cancelled";
    if (finished && options_.keep_finished_ms > 0 && job.finished_ns != 0 &&
        now - job.finished_ns > options_.keep_finished_ms * 1'000'000) {
      // Cleaned once: a restarted coordinator finds the event and leaves the job be.
      KILN_ASSIGN_OR_RETURN(std::vector<EventRecord> done,
                            store_->newest_events(job.id, "cleaned", 1));
      if (!done.empty()) continue;
      int64_t freed = 0;
      if (!dir.empty()) {
        freed = directory_bytes(dir, options_.walk_entries_max);
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
        if (ec) {
          log_.warn("removing a finished job's checkpoints",
                    {{"job", job.id}, {"dir", dir}, {"error", ec.message()}});
          continue;  // tried again next pass; nothing is recorded as done
        }
      }
      KILN_RETURN_IF_ERROR(store_->delete_steps(job.id));
      EventRecord e;
      e.ts_ns = now;
      e.job_id = job.id;
      e.type = "cleaned";
      e.attempt = job.attempt;
      e.detail = {{"bytes_freed", freed},
                  {"checkpoint_dir", dir},
                  {"why", "finished more than " +
                              std::to_string(options_.keep_finished_ms / 3'600'000) + " h ago"}};
      KILN_RETURN_IF_ERROR(store_->append_events({e}));
      log_.info("finished job cleaned", {{"job", job.id}, {"bytes_freed", freed}});
      ++pass.cleaned;
      pass.bytes_freed += freed;
      continue;
    }
    if (dir.empty()) continue;
    if (finished && options_.keep_checkpoints > 0 && pruned_.insert(job.id).second) {
      std::error_code ec;
      if (std::filesystem::is_directory(dir, ec)) {
        const int64_t before = directory_bytes(dir, options_.walk_entries_max);
        Result<std::vector<int64_t>> removed =
            ckpt::apply_retention(dir, options_.keep_checkpoints);
        if (!removed.ok()) {
          log_.warn("pruning a finished job's checkpoints",
                    {{"job", job.id}, {"error", removed.status().to_string()}});
        } else if (!removed->empty()) {
          ++pass.pruned;
          pass.bytes_freed += before - directory_bytes(dir, options_.walk_entries_max);
        }
      }
    }
    pass.checkpoint_bytes_by_team[job.team] += directory_bytes(dir, options_.walk_entries_max);
  }
  std::lock_guard<std::mutex> lock(mu_);
  by_team_ = pass.checkpoint_bytes_by_team;
  return pass;
}

}  // namespace kiln::sched
