// The coordinator's state in SQLite. See include/kiln/sched/state_store.h for the contract.
//
// Schema (version 1; every later change is a new numbered step in kMigrations, never an edit):
//   meta(key TEXT PRIMARY KEY, value INTEGER)       -- 'schema_version'
//   jobs(seq INTEGER PRIMARY KEY AUTOINCREMENT,     -- submit order; id = printf('j-%06d', seq)
//        id TEXT UNIQUE, team, workdir, spec_json,  -- spec_json: job_spec_to_json(spec, false)
//        secrets BLOB,                              -- SecretBox-sealed {"NAME": "value"} or NULL
//        state, attempt, restarts, nodes_json, reason, submitted_ns, admitted_ns, running_ns,
//        finished_ns, not_before_ns, last_step, productive_ms, version)
//   events(seq INTEGER PRIMARY KEY AUTOINCREMENT, ts_ns, job_id REFERENCES jobs(id) or NULL,
//          type, attempt, detail_json)
//   nodes(name TEXT PRIMARY KEY, state, labels_json, slots, reason, state_since_ns,
//         last_heartbeat_ns, fault_ns_json, agent_address, version,
//         preflight_json)                           -- version 2: {level, passed, checked_ns,
//                                                   --   summary, agent}, '{}' before a check
//   audit(seq INTEGER PRIMARY KEY AUTOINCREMENT, ts_ns, who, action, object, result)
//   settings(key TEXT PRIMARY KEY, value TEXT)
//   steps(job_id, attempt, step, wall_ns, step_ms, loss, val_loss, lr, tokens_per_s, mfu,
//         comm_exposed_ms, ckpt_stall_ms)         -- version 3; state_store_steps.cc
// AUTOINCREMENT (not plain rowid) is what makes a sequence number never reused, even for the
// largest one after a delete.
//
// Every statement is prepared with bound parameters; the only SQL run as plain text is constant
// (the migrations and the connection's pragmas).
#include <kiln/sched/state_store.h>

#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <set>
#include <utility>

#include <kiln/base/check.h>
#include <kiln/base/file_system.h>
#include <kiln/base/json.h>

#include "sched/state_store_sql.h"

namespace kiln::sched {
namespace {

using Json = nlohmann::json;
using sql::exec_constant;
using sql::sqlite_error;
using sql::Stmt;
using sql::Tx;

// Another process (or a backup) holding the write lock is waited for this long before a write
// fails as kUnavailable: far above a commit's few milliseconds, well below a client's patience.
constexpr int kBusyTimeoutMs = 5000;

// A stored JSON text above this is a damaged row, not a big job: a spec's limits
// (kiln/sched/job_spec.h) keep it in the low megabytes. The depth of a record is 3 or 4.
constexpr JsonLimits kStoredJsonLimits{size_t{64} << 20, 16};

struct Migration {
  int version;
  const char* sql;
};

// Append only: a released step is never edited, since files already carry its result.
constexpr Migration kMigrations[] = {
    {1, R"sql(
CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE jobs (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  team TEXT NOT NULL,
  workdir TEXT NOT NULL,
  spec_json TEXT NOT NULL,
  secrets BLOB,
  state TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  restarts INTEGER NOT NULL,
  nodes_json TEXT NOT NULL,
  reason TEXT NOT NULL,
  submitted_ns INTEGER NOT NULL,
  admitted_ns INTEGER NOT NULL,
  running_ns INTEGER NOT NULL,
  finished_ns INTEGER NOT NULL,
  not_before_ns INTEGER NOT NULL,
  last_step INTEGER NOT NULL,
  productive_ms REAL NOT NULL,
  version INTEGER NOT NULL);
CREATE INDEX jobs_by_team ON jobs (team, seq);
CREATE INDEX jobs_by_state ON jobs (state, seq);
CREATE TABLE events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  ts_ns INTEGER NOT NULL,
  job_id TEXT REFERENCES jobs (id),
  type TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  detail_json TEXT NOT NULL);
CREATE INDEX events_by_job ON events (job_id, seq);
CREATE TABLE nodes (
  name TEXT PRIMARY KEY,
  state TEXT NOT NULL,
  labels_json TEXT NOT NULL,
  slots INTEGER NOT NULL,
  reason TEXT NOT NULL,
  state_since_ns INTEGER NOT NULL,
  last_heartbeat_ns INTEGER NOT NULL,
  fault_ns_json TEXT NOT NULL,
  agent_address TEXT NOT NULL,
  version INTEGER NOT NULL);
CREATE TABLE audit (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  ts_ns INTEGER NOT NULL,
  who TEXT NOT NULL,
  action TEXT NOT NULL,
  object TEXT NOT NULL,
  result TEXT NOT NULL);
CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
)sql"},
    // Each node's last preflight, for the placement gate and `kiln nodes`.
    {2, R"sql(
ALTER TABLE nodes ADD COLUMN preflight_json TEXT NOT NULL DEFAULT '{}';
)sql"},
    // Each job's step metrics, for its curves (kiln/sched/step_series.h). NULL: no value.
    {3, R"sql(
CREATE TABLE steps (
  job_id TEXT NOT NULL REFERENCES jobs (id),
  attempt INTEGER NOT NULL,
  step INTEGER NOT NULL,
  wall_ns INTEGER NOT NULL,
  step_ms REAL,
  loss REAL,
  val_loss REAL,
  lr REAL,
  tokens_per_s REAL,
  mfu REAL,
  comm_exposed_ms REAL,
  ckpt_stall_ms REAL,
  PRIMARY KEY (job_id, attempt, step)) WITHOUT ROWID;
)sql"},
};
constexpr int kSchemaVersion = kMigrations[std::size(kMigrations) - 1].version;

// --- Encoding -----------------------------------------------------------------------------------

// JSON text for a column. nlohmann throws on invalid UTF-8; that is the caller's bad input.
Result<std::string> dump_json(const Json& json, std::string_view what) {
  try {
    return json.dump();
  } catch (const nlohmann::json::exception& e) {
    return Status::invalid_argument(std::string(what) + ": " + e.what());
  }
}

Result<Json> load_json(const std::string& path, const std::string& text, std::string_view what) {
  return parse_json_bounded(text, kStoredJsonLimits,
                            "state store " + path + ": " + std::string(what),
                            StatusCode::kCorruption);
}

// The columns of a job that a write sets, in the order the INSERT and UPDATE below bind them.
struct JobColumns {
  std::string spec_json;
  std::optional<std::string> secrets;  // sealed; nullopt when the job has no secret variable
  std::string nodes_json;
};

Result<JobColumns> encode_job(const JobRecord& job, const SecretBox& box) {
  const std::string what = "job " + (job.id.empty() ? job.spec.name : job.id);
  // What is stored must read back: check the spec by the reader's own rules now.
  const Json spec = job_spec_to_json(job.spec, /*with_secrets=*/false);
  Result<JobSpec> readable = job_spec_from_json(spec);
  if (!readable.ok()) return readable.status().with_context(what);
  JobColumns out;
  KILN_ASSIGN_OR_RETURN(out.spec_json, dump_json(spec, what + ": spec"));
  KILN_ASSIGN_OR_RETURN(out.nodes_json, dump_json(Json(job.nodes), what + ": nodes"));
  Json secrets = Json::object();
  for (const EnvVar& var : job.spec.env) {
    if (var.secret) secrets[var.name] = var.value;
  }
  if (!secrets.empty()) {
    KILN_ASSIGN_OR_RETURN(std::string plain, dump_json(secrets, what + ": secrets"));
    out.secrets = box.seal(plain);
    std::fill(plain.begin(), plain.end(), '\0');
  }
  return out;
}

// Binds the mutable columns: team .. productive_ms, 16 values.
Stmt& bind_job_columns(Stmt& stmt, const JobRecord& job, const JobColumns& c) {
  return stmt.bind_text(job.team)
      .bind_text(job.workdir)
      .bind_text(c.spec_json)
      .bind_blob_or_null(c.secrets)
      .bind_text(job.state)
      .bind_int(job.attempt)
      .bind_int(job.restarts)
      .bind_text(c.nodes_json)
      .bind_text(job.reason)
      .bind_int(job.submitted_ns)
      .bind_int(job.admitted_ns)
      .bind_int(job.running_ns)
      .bind_int(job.finished_ns)
      .bind_int(job.not_before_ns)
      .bind_int(job.last_step)
      .bind_double(job.productive_ms);
}

// The columns decode_job() reads, in its order.
constexpr const char* kJobColumns =
    "id, team, workdir, spec_json, secrets, state, attempt, restarts, nodes_json, reason, "
    "submitted_ns, admitted_ns, running_ns, finished_ns, not_before_ns, last_step, productive_ms, "
    "version";

// "SELECT <kJobColumns> FROM <from> <where>".
std::string select_jobs(std::string_view from, std::string_view where) {
  return std::string("SELECT ") + kJobColumns + " FROM " + std::string(from) + " " +
         std::string(where);
}

// Restores the secret values of `spec` from the sealed blob.
Status restore_secrets(const std::string& path, const std::string& id,
                       const std::optional<std::string>& sealed, const SecretBox& box,
                       JobSpec* spec) {
  if (!sealed) return Status();
  const std::string what = "state store " + path + ": job " + id + ": secrets";
  Result<std::string> plain = box.open(*sealed);
  if (!plain.ok()) return plain.status().with_context(what);
  Json secrets = Json::parse(*plain, nullptr, /*allow_exceptions=*/false);
  std::fill(plain->begin(), plain->end(), '\0');
  if (!secrets.is_object()) return Status::corruption(what + ": not a JSON object");
  for (EnvVar& var : spec->env) {
    if (!var.secret) continue;
    auto it = secrets.find(var.name);
    if (it == secrets.end() || !it->is_string()) {
      return Status::corruption(what + ": no value for " + var.name);
    }
    var.value = it->get<std::string>();
  }
  return Status();
}

Result<JobRecord> decode_job(const Stmt& row, const std::string& path, const SecretBox& box) {
  JobRecord job;
  job.id = row.col_text(0);
  job.team = row.col_text(1);
  job.workdir = row.col_text(2);
  const std::string what = "job " + job.id;
  KILN_ASSIGN_OR_RETURN(const Json spec, load_json(path, row.col_text(3), what + ": spec_json"));
  Result<JobSpec> parsed = job_spec_from_json(spec);
  if (!parsed.ok()) {
    return Status::corruption("state store " + path + ": " + what + ": " +
                              parsed.status().message());
  }
  job.spec = std::move(parsed).value();
  KILN_RETURN_IF_ERROR(restore_secrets(path, job.id, row.col_blob(4), box, &job.spec));
  job.state = row.col_text(5);
  job.attempt = static_cast<int>(row.col_int(6));
  job.restarts = static_cast<int>(row.col_int(7));
  KILN_ASSIGN_OR_RETURN(const Json nodes, load_json(path, row.col_text(8), what + ": nodes_json"));
  for (size_t i = 0; nodes.is_array() && i < nodes.size(); ++i) {
    if (!nodes[i].is_string()) break;
    job.nodes.push_back(nodes[i].get<std::string>());
  }
  if (!nodes.is_array() || job.nodes.size() != nodes.size()) {
    return Status::corruption("state store " + path + ": " + what +
                              ": nodes_json is not a list of names");
  }
  job.reason = row.col_text(9);
  job.submitted_ns = row.col_int(10);
  job.admitted_ns = row.col_int(11);
  job.running_ns = row.col_int(12);
  job.finished_ns = row.col_int(13);
  job.not_before_ns = row.col_int(14);
  job.last_step = row.col_int(15);
  job.productive_ms = row.col_double(16);
  job.version = row.col_int(17);
  return job;
}

Result<std::vector<JobRecord>> collect_jobs(Stmt& stmt, const std::string& path,
                                            const SecretBox& box) {
  std::vector<JobRecord> jobs;
  while (true) {
    KILN_ASSIGN_OR_RETURN(const bool row, stmt.step());
    if (!row) break;
    KILN_ASSIGN_OR_RETURN(JobRecord job, decode_job(stmt, path, box));
    jobs.push_back(std::move(job));
  }
  return jobs;
}

constexpr const char* kNodeSelect =
    "SELECT name, state, labels_json, slots, reason, state_since_ns, last_heartbeat_ns, "
    "fault_ns_json, agent_address, version, preflight_json FROM nodes ";

Result<NodeRecord> decode_node(const Stmt& row, const std::string& path) {
  NodeRecord node;
  node.name = row.col_text(0);
  node.state = row.col_text(1);
  const std::string what = "node " + node.name;
  KILN_ASSIGN_OR_RETURN(const Json labels, load_json(path, row.col_text(2), what + ": labels"));
  KILN_ASSIGN_OR_RETURN(const Json faults, load_json(path, row.col_text(7), what + ": fault_ns"));
  if (!labels.is_object() || !faults.is_array()) {
    return Status::corruption("state store " + path + ": " + what + ": labels or fault_ns");
  }
  for (auto it = labels.begin(); it != labels.end(); ++it) {
    if (!it->is_string()) return Status::corruption("state store " + path + ": " + what);
    node.labels[it.key()] = it->get<std::string>();
  }
  for (const Json& t : faults) {
    if (!t.is_number_integer()) return Status::corruption("state store " + path + ": " + what);
    node.fault_ns.push_back(t.get<int64_t>());
  }
  node.slots = static_cast<int>(row.col_int(3));
  node.reason = row.col_text(4);
  node.state_since_ns = row.col_int(5);
  node.last_heartbeat_ns = row.col_int(6);
  node.agent_address = row.col_text(8);
  node.version = row.col_int(9);
  KILN_ASSIGN_OR_RETURN(const Json preflight,
                        load_json(path, row.col_text(10), what + ": preflight"));
  if (!preflight.is_object()) {
    return Status::corruption("state store " + path + ": " + what + ": preflight_json");
  }
  if (!preflight.empty()) {
    try {
      node.preflight.level = preflight.at("level").get<std::string>();
      node.preflight.passed = preflight.at("passed").get<bool>();
      node.preflight.checked_ns = preflight.at("checked_ns").get<int64_t>();
      node.preflight.summary = preflight.at("summary").get<std::string>();
      node.preflight.agent = preflight.value("agent", "");
    } catch (const Json::exception& e) {
      return Status::corruption("state store " + path + ": " + what +
                                ": preflight_json: " + e.what());
    }
  }
  return node;
}

constexpr const char* kEventSelect =
    "SELECT seq, ts_ns, job_id, type, attempt, detail_json FROM events ";

Result<std::vector<EventRecord>> collect_events(Stmt& stmt, const std::string& path) {
  std::vector<EventRecord> events;
  while (true) {
    KILN_ASSIGN_OR_RETURN(const bool row, stmt.step());
    if (!row) break;
    EventRecord e;
    e.seq = stmt.col_int(0);
    e.ts_ns = stmt.col_int(1);
    e.job_id = stmt.col_text(2);
    e.type = stmt.col_text(3);
    e.attempt = static_cast<int>(stmt.col_int(4));
    KILN_ASSIGN_OR_RETURN(
        e.detail, load_json(path, stmt.col_text(5), "event " + std::to_string(e.seq) + ": detail"));
    events.push_back(std::move(e));
  }
  return events;
}

int64_t capped(size_t limit) {
  return static_cast<int64_t>(std::min(limit, kStoreRowsMax));
}

// --- Writes, each inside the caller's transaction -----------------------------------------------

Status insert_events(sqlite3* db, const std::string& path, const std::vector<EventRecord>& events) {
  for (const EventRecord& e : events) {
    if (e.type.empty())
      return Status::invalid_argument("state store " + path + ": event without a type");
    KILN_ASSIGN_OR_RETURN(const std::string detail, dump_json(e.detail, "event " + e.type));
    Stmt stmt(db, path,
              "INSERT INTO events (ts_ns, job_id, type, attempt, detail_json) "
              "VALUES (?, ?, ?, ?, ?)");
    Status status = stmt.bind_int(e.ts_ns)
                        .bind_text_or_null(e.job_id)
                        .bind_text(e.type)
                        .bind_int(e.attempt)
                        .bind_text(detail)
                        .run();
    if (!status.ok()) {
      return status.with_context("event " + e.type + " of job '" + e.job_id + "'");
    }
  }
  return Status();
}

// The stored version of a row, or nullopt when there is none.
Result<std::optional<int64_t>> stored_version(sqlite3* db, const std::string& path, const char* sql,
                                              const std::string& key) {
  Stmt stmt(db, path, sql);
  KILN_ASSIGN_OR_RETURN(const bool row, stmt.bind_text(key).step());
  if (!row) return std::optional<int64_t>();
  return std::optional<int64_t>(stmt.col_int(0));
}

// Why an update that matched no row matched none: the object is gone, or it moved.
Status explain_no_match(sqlite3* db, const std::string& path, std::string_view kind,
                        const std::string& key, int64_t expected_version) {
  const char* sql = kind == "job" ? "SELECT version FROM jobs WHERE id = ?"
                                  : "SELECT version FROM nodes WHERE name = ?";
  KILN_ASSIGN_OR_RETURN(const std::optional<int64_t> stored, stored_version(db, path, sql, key));
  const std::string what = "state store " + path + ": " + std::string(kind) + " " + key;
  if (!stored) return Status::not_found(what + ": no such " + std::string(kind));
  return Status::aborted(what + " changed underneath: written at version " +
                         std::to_string(expected_version) + ", stored version is " +
                         std::to_string(*stored));
}

Status write_job_update(sqlite3* db, const std::string& path, const SecretBox& box,
                        const JobRecord& job) {
  KILN_ASSIGN_OR_RETURN(const JobColumns columns, encode_job(job, box));
  Stmt stmt(db, path,
            "UPDATE jobs SET team = ?, workdir = ?, spec_json = ?, secrets = ?, state = ?, "
            "attempt = ?, restarts = ?, nodes_json = ?, reason = ?, submitted_ns = ?, "
            "admitted_ns = ?, running_ns = ?, finished_ns = ?, not_before_ns = ?, last_step = ?, "
            "productive_ms = ?, version = version + 1 WHERE id = ? AND version = ?");
  KILN_RETURN_IF_ERROR(
      bind_job_columns(stmt, job, columns).bind_text(job.id).bind_int(job.version).run());
  if (sqlite3_changes(db) == 1) return Status();
  return explain_no_match(db, path, "job", job.id, job.version);
}

// Returns the node's new version.
Result<int64_t> write_node(sqlite3* db, const std::string& path, const NodeRecord& node) {
  const std::string what = "node " + node.name;
  if (node.name.empty())
    return Status::invalid_argument("state store " + path + ": node without a name");
  KILN_ASSIGN_OR_RETURN(const std::string labels, dump_json(Json(node.labels), what + ": labels"));
  KILN_ASSIGN_OR_RETURN(const std::string faults,
                        dump_json(Json(node.fault_ns), what + ": faults"));
  Json preflight = Json::object();
  if (!node.preflight.level.empty()) {
    preflight = {{"level", node.preflight.level},
                 {"passed", node.preflight.passed},
                 {"checked_ns", node.preflight.checked_ns},
                 {"summary", node.preflight.summary},
                 {"agent", node.preflight.agent}};
  }
  KILN_ASSIGN_OR_RETURN(const std::string preflight_text,
                        dump_json(preflight, what + ": preflight"));
  // Registration (version 0) writes whatever is there; an update only the version it read.
  const char* sql =
      node.version == 0
          ? "INSERT INTO nodes (state, labels_json, slots, reason, state_since_ns, "
            "last_heartbeat_ns, fault_ns_json, agent_address, preflight_json, name, version) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1) ON CONFLICT (name) DO UPDATE SET "
            "state = excluded.state, labels_json = excluded.labels_json, slots = excluded.slots, "
            "reason = excluded.reason, state_since_ns = excluded.state_since_ns, "
            "last_heartbeat_ns = excluded.last_heartbeat_ns, "
            "fault_ns_json = excluded.fault_ns_json, agent_address = excluded.agent_address, "
            "preflight_json = excluded.preflight_json, "
            "version = nodes.version + 1 RETURNING version"
          : "UPDATE nodes SET state = ?, labels_json = ?, slots = ?, reason = ?, "
            "state_since_ns = ?, last_heartbeat_ns = ?, fault_ns_json = ?, agent_address = ?, "
            "preflight_json = ?, "
            "version = version + 1 WHERE name = ? AND version = ? RETURNING version";
  Stmt stmt(db, path, sql);
  stmt.bind_text(node.state)
      .bind_text(labels)
      .bind_int(node.slots)
      .bind_text(node.reason)
      .bind_int(node.state_since_ns)
      .bind_int(node.last_heartbeat_ns)
      .bind_text(faults)
      .bind_text(node.agent_address)
      .bind_text(preflight_text)
      .bind_text(node.name);
  if (node.version != 0) stmt.bind_int(node.version);
  KILN_ASSIGN_OR_RETURN(const bool row, stmt.step());
  if (!row) return explain_no_match(db, path, "node", node.name, node.version);
  const int64_t version = stmt.col_int(0);
  KILN_RETURN_IF_ERROR(stmt.run());  // step to the end: the statement is complete and reset-free
  return version;
}

// --- Opening ------------------------------------------------------------------------------------

// The file's schema version: 0 for a file without the meta table (new or empty).
Result<int> file_schema_version(sqlite3* db, const std::string& path) {
  Stmt exists(db, path,
              "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'");
  KILN_ASSIGN_OR_RETURN(const bool row, exists.step());
  if (!row || exists.col_int(0) == 0) return 0;
  Stmt stmt(db, path, "SELECT value FROM meta WHERE key = 'schema_version'");
  KILN_ASSIGN_OR_RETURN(const bool found, stmt.step());
  if (!found) return Status::corruption("state store " + path + ": meta has no schema_version");
  return static_cast<int>(stmt.col_int(0));
}

// Applies the migrations the file lacks, each step in its own transaction, re-reading the
// version inside it so that two processes opening one new file do not both apply a step.
Result<int> migrate(sqlite3* db, const std::string& path) {
  while (true) {
    Tx tx(db, path);
    KILN_RETURN_IF_ERROR(tx.begin());
    KILN_ASSIGN_OR_RETURN(const int version, file_schema_version(db, path));
    if (version > kSchemaVersion) {
      return Status::invalid_argument("state store " + path + ": schema version " +
                                      std::to_string(version) + " is newer than this build's " +
                                      std::to_string(kSchemaVersion) +
                                      "; run the coordinator that wrote it, or a newer one");
    }
    if (version == kSchemaVersion) {
      KILN_RETURN_IF_ERROR(tx.commit());
      return version;
    }
    const Migration& step = kMigrations[version];  // steps are numbered 1.. in order
    KILN_CHECK_EQ(step.version, version + 1);
    KILN_RETURN_IF_ERROR(
        exec_constant(db, path, step.sql)
            .with_context("migration to schema version " + std::to_string(step.version)));
    Stmt set(db, path,
             "INSERT INTO meta (key, value) VALUES ('schema_version', ?) "
             "ON CONFLICT (key) DO UPDATE SET value = excluded.value");
    KILN_RETURN_IF_ERROR(set.bind_int(step.version).run());
    KILN_RETURN_IF_ERROR(tx.commit());
  }
}

Status configure(sqlite3* db, const std::string& path) {
  sqlite3_extended_result_codes(db, 1);
  int rc = sqlite3_busy_timeout(db, kBusyTimeoutMs);
  if (rc != SQLITE_OK) return sqlite_error(db, path, "busy_timeout", rc);
  Stmt wal(db, path, "PRAGMA journal_mode = WAL");
  KILN_ASSIGN_OR_RETURN(const bool row, wal.step());
  if (!row || wal.col_text(0) != "wal") {
    return Status::io_error("state store " + path + ": cannot use a WAL journal here (got '" +
                            (row ? wal.col_text(0) : std::string()) + "')");
  }
  KILN_RETURN_IF_ERROR(exec_constant(db, path, "PRAGMA synchronous = FULL"));
  return exec_constant(db, path, "PRAGMA foreign_keys = ON");
}

}  // namespace

StateStore::StateStore(std::string path, sqlite3* db, const SecretBox* box, int schema_version)
    : path_(std::move(path)), box_(box), schema_version_(schema_version), db_(db) {}

StateStore::~StateStore() {
  sqlite3_close_v2(db_);
}

Result<std::unique_ptr<StateStore>> StateStore::open(const std::string& path,
                                                     const SecretBox* box) {
  KILN_CHECK(box != nullptr) << "StateStore::open needs a SecretBox";
  // Create the file ourselves so that it (and the -wal and -shm files SQLite makes with the
  // main file's mode) is 0600 from the start; an existing file keeps its mode.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return os_error(path, "open", errno).with_context("state store");
  ::close(fd);
  sqlite3* db = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Status status = sqlite_error(db, path, "open", rc);
    sqlite3_close_v2(db);
    return status;
  }
  Status status = configure(db, path);
  Result<int> version = status.ok() ? migrate(db, path) : Result<int>(status);
  if (!version.ok()) {
    sqlite3_close_v2(db);
    return version.status();
  }
  return std::unique_ptr<StateStore>(new StateStore(path, db, box, *version));
}

int StateStore::schema_version() const {
  return schema_version_;
}

Result<JobRecord> StateStore::insert_job(JobRecord job, EventRecord queued_event) {
  std::lock_guard<std::mutex> lock(mu_);
  Tx tx(db_, path_);
  KILN_RETURN_IF_ERROR(tx.begin());
  // The next sequence number, read under the write lock: AUTOINCREMENT's counter, so an id is
  // never reused even if the newest job were deleted.
  int64_t seq = 0;
  {
    Stmt next(db_, path_,
              "SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'jobs'), 0) + 1");
    KILN_ASSIGN_OR_RETURN(const bool row, next.step());
    KILN_CHECK(row);
    seq = next.col_int(0);
  }
  char id[32];
  std::snprintf(id, sizeof(id), "j-%06lld", static_cast<long long>(seq));
  job.id = id;
  job.version = 1;
  KILN_ASSIGN_OR_RETURN(const JobColumns columns, encode_job(job, *box_));
  Stmt insert(db_, path_,
              "INSERT INTO jobs (team, workdir, spec_json, secrets, state, attempt, restarts, "
              "nodes_json, reason, submitted_ns, admitted_ns, running_ns, finished_ns, "
              "not_before_ns, last_step, productive_ms, seq, id, version) "
              "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)");
  KILN_RETURN_IF_ERROR(
      bind_job_columns(insert, job, columns).bind_int(seq).bind_text(job.id).run());
  queued_event.job_id = job.id;
  KILN_RETURN_IF_ERROR(insert_events(db_, path_, {queued_event}));
  KILN_RETURN_IF_ERROR(tx.commit());
  return job;
}

Result<JobRecord> StateStore::get_job(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt stmt(db_, path_, select_jobs("jobs", "WHERE id = ?"));
  KILN_ASSIGN_OR_RETURN(const bool row, stmt.bind_text(id).step());
  if (!row) return Status::not_found("state store " + path_ + ": no job " + id);
  return decode_job(stmt, path_, *box_);
}

Result<std::vector<JobRecord>> StateStore::list_jobs(const std::string& team) {
  std::lock_guard<std::mutex> lock(mu_);
  // The newest rows, put back in submit order.
  Stmt stmt(
      db_, path_,
      select_jobs("(SELECT * FROM jobs WHERE ?1 = '' OR team = ?1 ORDER BY seq DESC LIMIT ?2)",
                  "ORDER BY seq"));
  stmt.bind_text(team).bind_int(static_cast<int64_t>(kStoreRowsMax));
  return collect_jobs(stmt, path_, *box_);
}

Result<std::vector<JobRecord>> StateStore::list_jobs_after(const std::string& after_id,
                                                           size_t limit) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt stmt(db_, path_,
            select_jobs("jobs",
                        "WHERE seq > COALESCE((SELECT seq FROM jobs WHERE id = ?1), 0) "
                        "ORDER BY seq LIMIT ?2"));
  stmt.bind_text(after_id).bind_int(capped(limit));
  return collect_jobs(stmt, path_, *box_);
}

Result<std::vector<JobRecord>> StateStore::list_active_jobs() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt stmt(
      db_, path_,
      select_jobs("jobs",
                  "WHERE state NOT IN ('succeeded', 'failed', 'cancelled') ORDER BY seq LIMIT ?"));
  stmt.bind_int(static_cast<int64_t>(kStoreRowsMax) + 1);
  KILN_ASSIGN_OR_RETURN(std::vector<JobRecord> jobs, collect_jobs(stmt, path_, *box_));
  if (jobs.size() > kStoreRowsMax) {
    return Status::unavailable("state store " + path_ + ": more than " +
                               std::to_string(kStoreRowsMax) + " active jobs");
  }
  return jobs;
}

Result<JobRecord> StateStore::update_job(const JobRecord& job,
                                         const std::vector<EventRecord>& events) {
  std::lock_guard<std::mutex> lock(mu_);
  Tx tx(db_, path_);
  KILN_RETURN_IF_ERROR(tx.begin());
  KILN_RETURN_IF_ERROR(write_job_update(db_, path_, *box_, job));
  KILN_RETURN_IF_ERROR(insert_events(db_, path_, events));
  KILN_RETURN_IF_ERROR(tx.commit());
  JobRecord stored = job;
  ++stored.version;
  return stored;
}

Result<std::vector<EventRecord>> StateStore::events_for_job(const std::string& job_id,
                                                            int64_t after_seq, size_t limit) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt stmt(db_, path_,
            std::string(kEventSelect) + "WHERE job_id = ? AND seq > ? ORDER BY seq LIMIT ?");
  stmt.bind_text(job_id).bind_int(after_seq).bind_int(capped(limit));
  return collect_events(stmt, path_);
}

Result<std::vector<EventRecord>> StateStore::newest_events(const std::string& job_id,
                                                           const std::string& type, size_t limit) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt stmt(db_, path_,
            std::string(kEventSelect) + "WHERE job_id = ? AND type = ? ORDER BY seq DESC LIMIT ?");
  stmt.bind_text(job_id).bind_text(type).bind_int(capped(limit));
  KILN_ASSIGN_OR_RETURN(std::vector<EventRecord> events, collect_events(stmt, path_));
  std::reverse(events.begin(), events.end());
  return events;
}

Result<std::vector<EventRecord>> StateStore::events_after(int64_t after_seq, size_t limit) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt stmt(db_, path_, std::string(kEventSelect) + "WHERE seq > ? ORDER BY seq LIMIT ?");
  stmt.bind_int(after_seq).bind_int(capped(limit));
  return collect_events(stmt, path_);
}

Result<int64_t> StateStore::last_event_seq() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt stmt(db_, path_, "SELECT COALESCE(MAX(seq), 0) FROM events");
  KILN_ASSIGN_OR_RETURN(const bool row, stmt.step());
  return row ? stmt.col_int(0) : 0;
}

Status StateStore::append_events(const std::vector<EventRecord>& events) {
  std::lock_guard<std::mutex> lock(mu_);
  Tx tx(db_, path_);
  KILN_RETURN_IF_ERROR(tx.begin());
  KILN_RETURN_IF_ERROR(insert_events(db_, path_, events));
  return tx.commit();
}

Result<NodeRecord> StateStore::upsert_node(const NodeRecord& node,
                                           const std::vector<EventRecord>& events) {
  std::lock_guard<std::mutex> lock(mu_);
  Tx tx(db_, path_);
  KILN_RETURN_IF_ERROR(tx.begin());
  KILN_ASSIGN_OR_RETURN(const int64_t version, write_node(db_, path_, node));
  KILN_RETURN_IF_ERROR(insert_events(db_, path_, events));
  KILN_RETURN_IF_ERROR(tx.commit());
  NodeRecord stored = node;
  stored.version = version;
  return stored;
}

Result<NodeRecord> StateStore::get_node(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt stmt(db_, path_, std::string(kNodeSelect) + "WHERE name = ?");
  KILN_ASSIGN_OR_RETURN(const bool row, stmt.bind_text(name).step());
  if (!row) return Status::not_found("state store " + path_ + ": no node " + name);
  return decode_node(stmt, path_);
}

Result<std::vector<NodeRecord>> StateStore::list_nodes() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt stmt(db_, path_, std::string(kNodeSelect) + "ORDER BY name LIMIT ?");
  stmt.bind_int(static_cast<int64_t>(kStoreRowsMax));
  std::vector<NodeRecord> nodes;
  while (true) {
    KILN_ASSIGN_OR_RETURN(const bool row, stmt.step());
    if (!row) break;
    KILN_ASSIGN_OR_RETURN(NodeRecord node, decode_node(stmt, path_));
    nodes.push_back(std::move(node));
  }
  return nodes;
}

Status StateStore::apply(const Batch& batch) {
  std::lock_guard<std::mutex> lock(mu_);
  Tx tx(db_, path_);
  KILN_RETURN_IF_ERROR(tx.begin());
  for (const JobRecord& job : batch.jobs) {
    KILN_RETURN_IF_ERROR(write_job_update(db_, path_, *box_, job));
  }
  for (const NodeRecord& node : batch.nodes) {
    KILN_ASSIGN_OR_RETURN(const int64_t version, write_node(db_, path_, node));
    (void)version;
  }
  KILN_RETURN_IF_ERROR(insert_events(db_, path_, batch.events));
  return tx.commit();
}

Status StateStore::append_audit(const AuditRecord& record) {
  std::lock_guard<std::mutex> lock(mu_);
  Tx tx(db_, path_);
  KILN_RETURN_IF_ERROR(tx.begin());
  Stmt stmt(db_, path_,
            "INSERT INTO audit (ts_ns, who, action, object, result) VALUES (?, ?, ?, ?, ?)");
  KILN_RETURN_IF_ERROR(stmt.bind_int(record.ts_ns)
                           .bind_text(record.who)
                           .bind_text(record.action)
                           .bind_text(record.object)
                           .bind_text(record.result)
                           .run());
  return tx.commit();
}

Result<std::vector<AuditRecord>> StateStore::audit_after(int64_t after_seq, size_t limit) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt stmt(db_, path_,
            "SELECT seq, ts_ns, who, action, object, result FROM audit WHERE seq > ? "
            "ORDER BY seq LIMIT ?");
  stmt.bind_int(after_seq).bind_int(capped(limit));
  std::vector<AuditRecord> records;
  while (true) {
    KILN_ASSIGN_OR_RETURN(const bool row, stmt.step());
    if (!row) break;
    records.push_back({stmt.col_int(0), stmt.col_int(1), stmt.col_text(2), stmt.col_text(3),
                       stmt.col_text(4), stmt.col_text(5)});
  }
  return records;
}

Status StateStore::put_setting(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(mu_);
  Tx tx(db_, path_);
  KILN_RETURN_IF_ERROR(tx.begin());
  Stmt stmt(db_, path_,
            "INSERT INTO settings (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value");
  KILN_RETURN_IF_ERROR(stmt.bind_text(key).bind_text(value).run());
  return tx.commit();
}

Result<std::optional<std::string>> StateStore::get_setting(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt stmt(db_, path_, "SELECT value FROM settings WHERE key = ?");
  KILN_ASSIGN_OR_RETURN(const bool row, stmt.bind_text(key).step());
  if (!row) return std::optional<std::string>();
  return std::optional<std::string>(stmt.col_text(0));
}

}  // namespace kiln::sched
