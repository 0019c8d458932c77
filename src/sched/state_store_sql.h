// The state store's SQLite plumbing: errors, one prepared statement, one write transaction.
// Private to src/sched/ (state_store.cc and state_store_steps.cc).
#ifndef KILN_SCHED_STATE_STORE_SQL_H_
#define KILN_SCHED_STATE_STORE_SQL_H_

#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include <kiln/base/result.h>
#include <kiln/base/status.h>

namespace kiln::sched::sql {

// "state store PATH: WHAT: <sqlite's message>", with a code that says what a caller can do.
inline Status sqlite_error(sqlite3* db, const std::string& path, std::string_view what, int rc) {
  const std::string message = "state store " + path + ": " + std::string(what) + ": " +
                              (db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED: return Status::unavailable(message);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB: return Status::corruption(message);
    case SQLITE_CONSTRAINT:
    case SQLITE_TOOBIG:
    case SQLITE_MISMATCH: return Status::invalid_argument(message);
    default: return Status::io_error(message);
  }
}

inline Status exec_constant(sqlite3* db, const std::string& path, const char* sql) {
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
  return rc == SQLITE_OK ? Status() : sqlite_error(db, path, sql, rc);
}

// One prepared statement. Binds go left to right; the first failure (of prepare or a bind) is
// kept and returned by step(), so call sites read as one chain.
class Stmt {
 public:
  Stmt(sqlite3* db, const std::string& path, std::string sql)
      : db_(db), path_(path), sql_(std::move(sql)) {
    const int rc = sqlite3_prepare_v2(db, sql_.c_str(), -1, &stmt_, nullptr);
    if (rc != SQLITE_OK) status_ = sqlite_error(db_, path_, "prepare", rc);
  }
  ~Stmt() { sqlite3_finalize(stmt_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Stmt& bind_int(int64_t v) { return check(sqlite3_bind_int64(stmt_, next_++, v)); }
  Stmt& bind_double(double v) { return check(sqlite3_bind_double(stmt_, next_++, v)); }
  Stmt& bind_text(std::string_view v) {
    return check(
        sqlite3_bind_text64(stmt_, next_++, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8));
  }
  // NULL for an empty string (a node-only event's job_id).
  Stmt& bind_text_or_null(std::string_view v) {
    return v.empty() ? check(sqlite3_bind_null(stmt_, next_++)) : bind_text(v);
  }
  Stmt& bind_blob_or_null(const std::optional<std::string>& v) {
    if (!v) return check(sqlite3_bind_null(stmt_, next_++));
    return check(sqlite3_bind_blob64(stmt_, next_++, v->data(), v->size(), SQLITE_TRANSIENT));
  }

  // True when a row is ready, false when done.
  Result<bool> step() {
    KILN_RETURN_IF_ERROR(status_);
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    status_ = sqlite_error(db_, path_, sql_first_line(), rc);
    return status_;
  }
  // Steps a statement that returns no rows.
  Status run() {
    KILN_ASSIGN_OR_RETURN(const bool row, step());
    (void)row;
    return Status();
  }

  int64_t col_int(int i) const { return sqlite3_column_int64(stmt_, i); }
  double col_double(int i) const { return sqlite3_column_double(stmt_, i); }
  // SQLite stores a NaN as NULL: read NULL back as NaN ("no value").
  double col_double_or_nan(int i) const {
    return sqlite3_column_type(stmt_, i) == SQLITE_NULL ? std::numeric_limits<double>::quiet_NaN()
                                                        : sqlite3_column_double(stmt_, i);
  }
  std::string col_text(int i) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, i));
    return p == nullptr ? std::string() : std::string(p, sqlite3_column_bytes(stmt_, i));
  }
  std::optional<std::string> col_blob(int i) const {
    if (sqlite3_column_type(stmt_, i) == SQLITE_NULL) return std::nullopt;
    const auto* p = static_cast<const char*>(sqlite3_column_blob(stmt_, i));
    return std::string(p == nullptr ? "" : p, p == nullptr ? 0 : sqlite3_column_bytes(stmt_, i));
  }

 private:
  Stmt& check(int rc) {
    if (rc != SQLITE_OK && status_.ok()) status_ = sqlite_error(db_, path_, "bind", rc);
    return *this;
  }
  // Enough of the statement to tell which one failed ("UPDATE jobs SET team = ?, ...").
  std::string sql_first_line() const {
    return sql_.substr(0, std::min(sql_.find('('), size_t{60}));
  }

  sqlite3* db_;
  const std::string& path_;
  const std::string sql_;
  sqlite3_stmt* stmt_ = nullptr;
  int next_ = 1;
  Status status_;
};

// A write transaction: BEGIN IMMEDIATE takes the write lock up front, so a transaction never
// fails half-way for want of it (a deferred one can deadlock upgrading from read to write).
// Rolls back unless commit() succeeded.
class Tx {
 public:
  Tx(sqlite3* db, const std::string& path) : db_(db), path_(path) {}
  ~Tx() {
    if (open_) (void)exec_constant(db_, path_, "ROLLBACK");
  }
  Tx(const Tx&) = delete;
  Tx& operator=(const Tx&) = delete;
  Status begin() {
    KILN_RETURN_IF_ERROR(exec_constant(db_, path_, "BEGIN IMMEDIATE"));
    open_ = true;
    return Status();
  }
  Status commit() {
    KILN_RETURN_IF_ERROR(exec_constant(db_, path_, "COMMIT"));
    open_ = false;
    return Status();
  }

 private:
  sqlite3* db_;
  const std::string& path_;
  bool open_ = false;
};

}  // namespace kiln::sched::sql

#endif  // KILN_SCHED_STATE_STORE_SQL_H_
