// The coordinator's storage lifecycle (`kiln serve --retain-days N --retain-checkpoints K`): what
// finished jobs leave behind is cleaned on a schedule, and what each team's jobs hold is
// measured for `kiln status --cluster`, the page and /metrics.
//
// Each pass (every interval, on its own thread: it walks and deletes directories, which must
// never hold up the coordinator's one mutex):
//   - measures each job's checkpoint directory (spec checkpoint.dir), summed per team;
//   - prunes a finished job's checkpoints to its newest K (ckpt::apply_retention) once;
//   - a job finished more than N days ago is cleaned: its checkpoints are removed and its step
//     points deleted, and a "cleaned" event says how many bytes went. Its record and events
//     stay (they are the history; small).
// What is removed is narrow: only what the checkpoint catalog calls a checkpoint (the step_*
// directories) and then the directory if that left it empty; and never a directory that is too
// close to the root, holds the job's working directory, or is shared with another job not yet
// cleaned (resubmitting a spec to continue a run from its checkpoints shares it): those are
// left in place and said once in the log.
// Both policies are off unless asked for (`kiln serve` defaults: keep everything): deleting is
// the operator's decision, never an upgrade's.
// A pass reads every job the store holds, a page of LifecycleOptions::page_jobs full records at a
// time, keeping a few strings of each (so a pass holds about 200 bytes a job): a coordinator's
// oldest jobs are cleaned too. The directories of running and queued jobs are walked every pass,
// a finished job's once (then again only when another job shares it).
// Known limit: "N days" is read on the wall clock, so a clock set far forward cleans early.
// The rank logs live on the nodes: each agent removes its jobs' log directories N days after
// they were last written (JoinOptions::keep_logs_ms).
//
// The checkpoint directories must be visible on the coordinator's host (shared storage, or the
// embedded cluster); a directory it cannot see is measured as 0 and left alone.
#ifndef KILN_SCHED_LIFECYCLE_H_
#define KILN_SCHED_LIFECYCLE_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <kiln/base/clock.h>
#include <kiln/base/log.h>
#include <kiln/base/result.h>
#include <kiln/sched/state_store.h>

namespace kiln::sched {

struct LifecycleOptions {
  int64_t keep_finished_ms = 0;  // clean finished jobs this long after they end; 0: never
  int keep_checkpoints = 0;      // a finished job's newest K checkpoints stay; 0: all stay
  // A directory walk stops after this many entries (its size is then a lower bound): a
  // directory of millions of files must not stall a pass.
  size_t walk_entries_max = 1'000'000;
  // Full job records read from the store at a time (at most kStoreRowsMax).
  size_t page_jobs = 1'000;
};

struct LifecyclePass {
  int pruned = 0;   // finished jobs whose checkpoints were pruned to the newest K
  int cleaned = 0;  // finished jobs cleaned
  int64_t bytes_freed = 0;
  std::map<std::string, int64_t> checkpoint_bytes_by_team;
};

class Lifecycle {
 public:
  // REQUIRES: store, clock outlive this.
  Lifecycle(LifecycleOptions options, StateStore* store, const Clock* clock, Logger log);

  // One pass over every job in the store. Thread-safe with the readers below; passes themselves
  // must not overlap (one thread runs them).
  Result<LifecyclePass> run_once();

  // What the last pass measured (empty before the first).
  std::map<std::string, int64_t> checkpoint_bytes_by_team() const;

 private:
  // What a pass needs of a job, read once a pass (full records a page at a time).
  struct JobFacts {
    std::string id, team, workdir, state;
    std::string dir;  // the checkpoint directory, canonical; empty when the job has none
    int64_t finished_ns = 0;
    int attempt = 0;
  };
  // Directory -> the jobs not cleaned that use it.
  using Users = std::multimap<std::string, std::string>;

  // Every job in submit order, a page of LifecycleOptions::page_jobs at a time.
  Status read_jobs(std::vector<JobFacts>* jobs);
  // One job's part of a pass: clean it, prune it, measure it.
  // `measured`: the directories this pass has measured, each counted once.
  Status visit(const JobFacts& job, const Users& users, int64_t now,
               std::set<std::string>* measured, LifecyclePass* pass);
  std::string unsafe_dir(const JobFacts& job, const Users& users) const;
  Status remove_checkpoints(const std::string& dir, int64_t* freed);

  const LifecycleOptions options_;
  StateStore* store_;
  const Clock* clock_;
  Logger log_;
  // Only the pass thread touches these.
  std::set<std::string> pruned_;   // jobs pruned by this process (pruning again is harmless)
  std::set<std::string> cleaned_;  // jobs known cleaned (their event seen or written)
  std::set<std::string> warned_;   // jobs whose directory was unsafe to clean, said once
  // A finished job's directory, once measured, is not walked again while it is that job's
  // alone: nothing writes there any more, and a pass must not walk every directory of a
  // coordinator's whole history. Forgotten when the job is cleaned.
  std::map<std::string, int64_t> finished_bytes_;
  mutable std::mutex mu_;
  std::map<std::string, int64_t> by_team_;  // guarded by mu_
};

// The bytes of the regular files under `dir` (not following links), at most `entries_max`
// entries walked; 0 when it does not exist.
int64_t directory_bytes(const std::string& dir, size_t entries_max);

}  // namespace kiln::sched

#endif  // KILN_SCHED_LIFECYCLE_H_
