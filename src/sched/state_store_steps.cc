// The state store's step metrics (the `steps` table): appending with thinning, reading, deleting.
// See include/kiln/sched/state_store.h for the contract, kiln/sched/step_series.h for the bound.
#include <sqlite3.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include <kiln/sched/state_store.h>
#include <kiln/sched/step_series.h>

#include "sched/state_store_sql.h"

namespace kiln::sched {
namespace {

using sql::Stmt;
using sql::Tx;

constexpr const char* kStepColumns =
    "job_id, attempt, step, wall_ns, step_ms, loss, val_loss, lr, tokens_per_s, mfu, "
    "comm_exposed_ms, ckpt_stall_ms";

StepPoint decode_step(const Stmt& stmt) {
  StepPoint p;
  p.job_id = stmt.col_text(0);
  p.attempt = static_cast<int>(stmt.col_int(1));
  p.sample.step = stmt.col_int(2);
  p.wall_ns = stmt.col_int(3);
  p.sample.step_ms = stmt.col_double_or_nan(4);
  p.sample.loss = stmt.col_double_or_nan(5);
  p.sample.val_loss = stmt.col_double_or_nan(6);
  p.sample.lr = stmt.col_double_or_nan(7);
  p.sample.tokens_per_s = stmt.col_double_or_nan(8);
  p.sample.mfu = stmt.col_double_or_nan(9);
  p.sample.comm_exposed_ms = stmt.col_double_or_nan(10);
  p.sample.ckpt_stall_ms = stmt.col_double_or_nan(11);
  return p;
}

Result<std::vector<StepPoint>> read_steps(sqlite3* db, const std::string& path,
                                          const std::string& job_id) {
  Stmt stmt(db, path,
            std::string("SELECT ") + kStepColumns +
                " FROM steps WHERE job_id = ? ORDER BY attempt, step LIMIT ?");
  stmt.bind_text(job_id).bind_int(static_cast<int64_t>(2 * kStoreRowsMax));
  std::vector<StepPoint> points;
  while (true) {
    KILN_ASSIGN_OR_RETURN(const bool row, stmt.step());
    if (!row) break;
    points.push_back(decode_step(stmt));
  }
  return points;
}

// Past `max_points`, thins one job's points to half of it (thin_steps) and deletes the rest:
// half, so that the next thinning is many flushes away rather than on every one.
Status thin_job(sqlite3* db, const std::string& path, const std::string& job_id,
                size_t max_points) {
  Stmt count(db, path, "SELECT COUNT(*) FROM steps WHERE job_id = ?");
  KILN_ASSIGN_OR_RETURN(const bool row, count.bind_text(job_id).step());
  if (!row || count.col_int(0) <= static_cast<int64_t>(max_points)) return Status();
  KILN_ASSIGN_OR_RETURN(std::vector<StepPoint> points, read_steps(db, path, job_id));
  const std::vector<size_t> keep = thin_steps(points, std::max<size_t>(max_points / 2, 1));
  size_t k = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    if (k < keep.size() && keep[k] == i) {
      ++k;
      continue;
    }
    Stmt del(db, path, "DELETE FROM steps WHERE job_id = ? AND attempt = ? AND step = ?");
    KILN_RETURN_IF_ERROR(
        del.bind_text(job_id).bind_int(points[i].attempt).bind_int(points[i].sample.step).run());
  }
  return Status();
}

}  // namespace

Status StateStore::append_steps(const std::vector<StepPoint>& points, size_t per_job_max) {
  if (points.empty()) return Status();
  std::lock_guard<std::mutex> lock(mu_);
  Tx tx(db_, path_);
  KILN_RETURN_IF_ERROR(tx.begin());
  std::set<std::string> jobs;
  for (const StepPoint& p : points) {
    Stmt stmt(db_, path_,
              std::string("INSERT OR IGNORE INTO steps (") + kStepColumns +
                  ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    const StepSample& s = p.sample;
    // SQLite binds a NaN as NULL, which reads back as NaN (col_double_or_nan).
    Status st = stmt.bind_text(p.job_id)
                    .bind_int(p.attempt)
                    .bind_int(s.step)
                    .bind_int(p.wall_ns)
                    .bind_double(s.step_ms)
                    .bind_double(s.loss)
                    .bind_double(s.val_loss)
                    .bind_double(s.lr)
                    .bind_double(s.tokens_per_s)
                    .bind_double(s.mfu)
                    .bind_double(s.comm_exposed_ms)
                    .bind_double(s.ckpt_stall_ms)
                    .run();
    if (!st.ok()) return st.with_context("step point of job " + p.job_id);
    jobs.insert(p.job_id);
  }
  for (const std::string& job : jobs)
    KILN_RETURN_IF_ERROR(thin_job(db_, path_, job, per_job_max));
  return tx.commit();
}

Result<std::vector<StepPoint>> StateStore::steps_for_job(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  return read_steps(db_, path_, job_id);
}

Status StateStore::delete_steps(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Tx tx(db_, path_);
  KILN_RETURN_IF_ERROR(tx.begin());
  Stmt stmt(db_, path_, "DELETE FROM steps WHERE job_id = ?");
  KILN_RETURN_IF_ERROR(stmt.bind_text(job_id).run());
  return tx.commit();
}

Result<int64_t> StateStore::count_steps() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt stmt(db_, path_, "SELECT COUNT(*) FROM steps");
  KILN_ASSIGN_OR_RETURN(const bool row, stmt.step());
  return row ? stmt.col_int(0) : 0;
}

}  // namespace kiln::sched
