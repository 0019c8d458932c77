// The storage lifecycle of finished jobs (kiln/sched/lifecycle.h).
#include <kiln/sched/lifecycle.h>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <map>
#include <set>
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

namespace {

// The directory as one path (no ".", "..", symlinked parents or trailing "/"), for comparing
// jobs' dirs.
std::string canonical_dir(const std::string& dir) {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::weakly_canonical(dir, ec);
  std::string out = ec ? dir : p.lexically_normal().string();
  while (out.size() > 1 && out.back() == '/')
    out.pop_back();
  return out;
}

// Whether `inner` is `outer` or lies under it.
bool within(const std::string& inner, const std::string& outer) {
  if (inner == outer) return true;
  const std::string prefix = outer.back() == '/' ? outer : outer + "/";
  return inner.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

// Why a job's checkpoint directory must not be pruned or removed; empty when it may. The
// directory is the user's text: it may be "/", the job's working directory, or shared with
// another job that resumes from it (resubmitting the same spec is how a run is continued).
std::string Lifecycle::unsafe_dir(const JobFacts& job, const Users& users) const {
  const std::string& dir = job.dir;
  // "/" and "/data" are nobody's checkpoint directory alone: "/data/run" is the least.
  const std::filesystem::path p(dir);
  if (!p.is_absolute() || std::distance(p.begin(), p.end()) < 3) return "too close to the root";
  const std::string workdir = canonical_dir(job.workdir);
  if (!job.workdir.empty() && within(workdir, dir)) return "it holds the job's working directory";
  // Another job's directory is this one, lies under it, or holds it. Looked up in the sorted
  // keys (the directories under `dir` sort between "dir/" and "dir0", '0' following '/'), not
  // by comparing with every job's: a pass must stay near-linear in the jobs.
  const auto other = [&job](Users::const_iterator from, Users::const_iterator to) -> std::string {
    for (auto it = from; it != to; ++it)
      if (it->second != job.id) return "job " + it->second + " uses it too";
    return "";
  };
  const auto [same_begin, same_end] = users.equal_range(dir);
  std::string why = other(same_begin, same_end);
  if (why.empty()) why = other(users.lower_bound(dir + "/"), users.lower_bound(dir + "0"));
  for (std::filesystem::path up = p.parent_path(); why.empty(); up = up.parent_path()) {
    const auto [begin, end] = users.equal_range(up.string());
    why = other(begin, end);
    if (up == up.parent_path()) break;  // "/" checked too
  }
  return why;
}

Status Lifecycle::read_jobs(std::vector<JobFacts>* out) {
  const size_t page = std::max<size_t>(1, std::min(options_.page_jobs, kStoreRowsMax));
  std::string after;
  while (true) {
    KILN_ASSIGN_OR_RETURN(std::vector<JobRecord> jobs, store_->list_jobs_after(after, page));
    for (const JobRecord& j : jobs) {
      out->push_back({j.id, j.team, j.workdir, j.state,
                      j.spec.checkpoint_dir.empty() ? "" : canonical_dir(j.spec.checkpoint_dir),
                      j.finished_ns, j.attempt});
    }
    if (jobs.size() < page) return Status();
    after = jobs.back().id;
  }
}

Result<LifecyclePass> Lifecycle::run_once() {
  LifecyclePass pass;
  const int64_t now = clock_->wall_ns();
  std::vector<JobFacts> jobs;
  KILN_RETURN_IF_ERROR(read_jobs(&jobs));
  // Every job's directory that still holds something of its own: a job cleaned already has
  // given its directory up. All of them before any job is visited: the job sharing a
  // directory may be on any page.
  Users users;
  for (const JobFacts& job : jobs) {
    if (!job.dir.empty() && cleaned_.count(job.id) == 0) users.emplace(job.dir, job.id);
  }
  std::set<std::string> measured;
  for (const JobFacts& job : jobs)
    KILN_RETURN_IF_ERROR(visit(job, users, now, &measured, &pass));
  std::lock_guard<std::mutex> lock(mu_);
  by_team_ = pass.checkpoint_bytes_by_team;
  return pass;
}

Status Lifecycle::visit(const JobFacts& job, const Users& users, int64_t now,
                        std::set<std::string>* measured, LifecyclePass* pass) {
  const std::string& dir = job.dir;
  const bool finished =
      job.state == "succeeded" || job.state == "failed" || job.state == "cancelled";
  if (finished && options_.keep_finished_ms > 0 && job.finished_ns != 0 &&
      now - job.finished_ns > options_.keep_finished_ms * 1'000'000) {
    if (cleaned_.count(job.id) != 0) return Status();
    // Cleaned once: a restarted coordinator finds the event and leaves the job be.
    KILN_ASSIGN_OR_RETURN(std::vector<EventRecord> done,
                          store_->newest_events(job.id, "cleaned", 1));
    if (!done.empty()) {
      cleaned_.insert(job.id);
      finished_bytes_.erase(job.id);
      return Status();
    }
    int64_t freed = 0;
    if (!dir.empty()) {
      const std::string unsafe = unsafe_dir(job, users);
      if (!unsafe.empty()) {
        if (warned_.insert(job.id).second) {
          log_.warn("a finished job's checkpoints are left in place",
                    {{"job", job.id}, {"dir", dir}, {"why", unsafe}});
        }
      } else {
        Status removed = remove_checkpoints(dir, &freed);
        if (!removed.ok()) {
          log_.warn("removing a finished job's checkpoints",
                    {{"job", job.id}, {"error", removed.to_string()}});
          return Status();  // tried again next pass; nothing is recorded as done
        }
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
    cleaned_.insert(job.id);
    finished_bytes_.erase(job.id);
    ++pass->cleaned;
    pass->bytes_freed += freed;
    return Status();
  }
  if (dir.empty()) return Status();
  if (finished && options_.keep_checkpoints > 0 && pruned_.insert(job.id).second &&
      unsafe_dir(job, users).empty()) {
    std::error_code ec;
    if (std::filesystem::is_directory(dir, ec)) {
      const int64_t before = directory_bytes(dir, options_.walk_entries_max);
      Result<std::vector<int64_t>> removed = ckpt::apply_retention(dir, options_.keep_checkpoints);
      if (!removed.ok()) {
        log_.warn("pruning a finished job's checkpoints",
                  {{"job", job.id}, {"error", removed.status().to_string()}});
      } else if (!removed->empty()) {
        const int64_t after = directory_bytes(dir, options_.walk_entries_max);
        ++pass->pruned;
        pass->bytes_freed += before - after;
        finished_bytes_[job.id] = after;  // measured just now: the walk below need not repeat it
      }
    }
  }
  // A directory two jobs share is counted once, for the first of them not cleaned.
  if (!measured->insert(dir).second) return Status();
  if (finished && users.count(dir) == 1) {
    auto it = finished_bytes_.find(job.id);
    if (it == finished_bytes_.end())
      it = finished_bytes_.emplace(job.id, directory_bytes(dir, options_.walk_entries_max)).first;
    pass->checkpoint_bytes_by_team[job.team] += it->second;
  } else {
    pass->checkpoint_bytes_by_team[job.team] += directory_bytes(dir, options_.walk_entries_max);
  }
  return Status();
}

// Removes what the checkpoint catalog calls a checkpoint (the step_* directories, complete or
// not) and nothing else, then the directory itself if that left it empty: a file a user put
// beside the checkpoints stays.
Status Lifecycle::remove_checkpoints(const std::string& dir, int64_t* freed) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) return Status();
  Result<std::vector<ckpt::CheckpointInfo>> steps = ckpt::list_checkpoints(dir);
  if (!steps.ok()) return steps.status();
  for (const ckpt::CheckpointInfo& info : *steps) {
    *freed += directory_bytes(info.path, options_.walk_entries_max);
    std::filesystem::remove_all(info.path, ec);
    if (ec) return Status::io_error(info.path + ": " + ec.message());
  }
  std::filesystem::remove(dir, ec);  // fails, harmlessly, when something else is there
  return Status();
}

}  // namespace kiln::sched
