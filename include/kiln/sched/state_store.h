// StateStore: the coordinator's durable state (jobs, nodes, events, audit, settings, and each
// job's step metrics for its curves) in one
// SQLite file, so that a coordinator restart re-reads everything and loses nothing.
//
// What it is: plain records in, plain records out, each write one transaction. What it is not:
// the state machine. Which transitions are allowed, and which events go with them, is the
// caller's business; the store only keeps a change and its events together (both or neither).
//
// Invariants:
//   - Every write method runs in ONE transaction (BEGIN IMMEDIATE ... COMMIT): a state change and
//     its events commit together or not at all.
//   - Optimistic concurrency: each job and node carries a version; a write names the version it
//     read, and is refused as kAborted ("changed underneath") when the stored one moved.
//   - Event and audit sequence numbers strictly increase and are never reused.
//   - No TEXT column ever holds a secret value: a job's spec is stored without its secrets
//     (job_spec_to_json(spec, false)), and the secret values only as one BLOB sealed by the
//     SecretBox. Event details, labels, reasons and settings are the caller's text: never put a
//     secret there.
//   - The file: WAL journal, synchronous=FULL (a commit is on disk when the call returns),
//     busy_timeout 5000 ms (another process holding the write lock), foreign keys on. Created with
//     mode 0600.
//   - Schema: the `meta` table's schema_version. open() migrates an older file step by step (each
//     step one transaction) and refuses a newer one.
//
// Thread-safe: one mutex serializes every call on the connection. Errors name the database path
// and SQLite's message. List calls return at most kStoreRowsMax rows.
#ifndef KILN_SCHED_STATE_STORE_H_
#define KILN_SCHED_STATE_STORE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <kiln/base/result.h>
#include <kiln/base/status.h>
#include <kiln/sched/job_spec.h>
#include <kiln/sched/secret_box.h>
#include <kiln/sched/step_series.h>

#include <nlohmann/json.hpp>

struct sqlite3;

namespace kiln::sched {

// The most rows one list call returns: a page a caller can hold and send whole; a caller pages on
// with after_seq for more.
inline constexpr size_t kStoreRowsMax = 10'000;

struct JobRecord {
  std::string id;  // assigned by the store on insert: "j-" + 6-digit sequence (j-000001)
  std::string team;
  std::string workdir;             // absolute; the ranks' cwd
  JobSpec spec;                    // with secret values restored from the sealed blob when read
  std::string state;               // queued, admitted, placed, running, stopping, restarting,
                                   // succeeded, failed, cancelled
  int attempt = 0;                 // current attempt number, starts at 0
  int restarts = 0;                // restarts so far
  std::vector<std::string> nodes;  // nodes of the current attempt, in rank order
  std::string reason;              // last failure / cancel reason, may be empty
  int64_t submitted_ns = 0;        // wall ns, 0 = not yet (and so the three below)
  int64_t admitted_ns = 0;
  int64_t running_ns = 0;
  int64_t finished_ns = 0;
  int64_t not_before_ns = 0;  // restart backoff: not to be placed before this wall time
  int64_t last_step = -1;     // newest step reported by any rank of the job
  double productive_ms = 0;   // sum of step time reported (for goodput)
  int64_t version = 0;        // incremented by the store on every write
};

struct EventRecord {
  int64_t seq = 0;     // assigned by the store, strictly increasing across all events
  int64_t ts_ns = 0;   // wall ns, set by the caller (from its clock)
  std::string job_id;  // empty for node-only events; else an existing job's id
  std::string type;    // queued, admitted, placed, running, fault, ..., node_down, node_up
  int attempt = 0;
  nlohmann::json detail = nlohmann::json::object();  // for a fault: cause, rank, node, message
};

// A node's last preflight (kiln/preflight/report.h) as the coordinator keeps it: the gate before
// placement reads it, `kiln nodes` shows it.
struct NodePreflight {
  std::string level;  // "quick" or "full"; empty: never checked
  bool passed = false;
  int64_t checked_ns = 0;  // wall ns of the check
  std::string summary;     // a failure's checks and values, bounded; empty when it passed
  std::string agent;       // the agent incarnation that answered (AgentReport::incarnation)
};

struct NodeRecord {
  std::string name;
  std::string state;                          // ready, suspect, cordoned, down
  std::map<std::string, std::string> labels;  // e.g. rack=r1
  int slots = 1;
  std::string reason;  // why cordoned/down/suspect
  int64_t state_since_ns = 0;
  int64_t last_heartbeat_ns = 0;
  std::vector<int64_t> fault_ns;  // wall times of recent faults on this node (trimmed by caller)
  std::string agent_address;      // how to reach the agent, may be empty
  NodePreflight preflight;
  int64_t version = 0;
};

struct AuditRecord {
  int64_t seq = 0;  // assigned by the store
  int64_t ts_ns = 0;
  std::string who;
  std::string action;
  std::string object;
  std::string result;
};

class StateStore {
 public:
  // Opens (creating, mode 0600) the database at `path` and migrates it to the code's schema.
  // kInvalidArgument naming the path and both versions when the file's schema is newer than the
  // code's; kIoError / kCorruption naming the path with SQLite's message.
  // REQUIRES: box is not null and outlives the store.
  static Result<std::unique_ptr<StateStore>> open(const std::string& path, const SecretBox* box);
  ~StateStore();
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  // The schema version of the open file (the code's, once open() returned).
  int schema_version() const;

  // --- Jobs.
  // Stores `job` as a new job: assigns its id (ignoring job.id), sets version 1, and appends
  // `queued_event` with that id as its job_id. Returns the stored record.
  Result<JobRecord> insert_job(JobRecord job, EventRecord queued_event);
  // kNotFound naming the id.
  Result<JobRecord> get_job(const std::string& id);
  // In submit order; every team's when `team` is empty. At most the newest kStoreRowsMax.
  Result<std::vector<JobRecord>> list_jobs(const std::string& team);
  // Every team's jobs submitted after the job `after_id` (from the first when it is empty or
  // names no job), in submit order, at most min(limit, kStoreRowsMax): a walk over all jobs a
  // page at a time passes the last id of each page back.
  Result<std::vector<JobRecord>> list_jobs_after(const std::string& after_id, size_t limit);
  // Jobs whose state is not succeeded, failed or cancelled, in submit order. Never a part of
  // them: kUnavailable when there are more than kStoreRowsMax (admission must keep them fewer).
  Result<std::vector<JobRecord>> list_active_jobs();
  // Writes every field of `job` but id and seq (team, workdir and spec included: a caller
  // passes a record it read, secrets restored) if the stored version equals job.version, making
  // it version + 1, and appends `events` as given, in one transaction. kAborted "changed
  // underneath" on a version mismatch, kNotFound when there is no such job; nothing written then.
  Result<JobRecord> update_job(const JobRecord& job, const std::vector<EventRecord>& events);

  // --- Events, oldest first, with seq > after_seq, at most min(limit, kStoreRowsMax).
  Result<std::vector<EventRecord>> events_for_job(const std::string& job_id, int64_t after_seq,
                                                  size_t limit);
  Result<std::vector<EventRecord>> events_after(int64_t after_seq, size_t limit);
  // The job's newest `limit` events of `type`, oldest first.
  Result<std::vector<EventRecord>> newest_events(const std::string& job_id, const std::string& type,
                                                 size_t limit);
  // The newest event's seq (0 when there is none).
  Result<int64_t> last_event_seq();
  // Appends `events` (their seq ignored) in one transaction. An event whose job_id names no job
  // is refused (kInvalidArgument) and none is appended.
  Status append_events(const std::vector<EventRecord>& events);

  // --- Nodes.
  // Inserts or overwrites `node`, appending `events`, in one transaction. node.version == 0 skips
  // the version check (registration: insert, or overwrite whatever is there); otherwise the
  // stored version must equal node.version (kAborted if not, kNotFound if there is no node).
  // Returns the stored record (its version is the stored one's + 1, or 1 for a new node).
  Result<NodeRecord> upsert_node(const NodeRecord& node, const std::vector<EventRecord>& events);
  Result<NodeRecord> get_node(const std::string& name);  // kNotFound naming the node
  Result<std::vector<NodeRecord>> list_nodes();          // by name

  // --- A scheduling plan: several job and node writes and their events in ONE transaction.
  // Jobs are updates (as update_job), nodes upserts (as upsert_node). All or nothing: the first
  // version mismatch is kAborted naming that object ("job j-000002 changed underneath ...").
  struct Batch {
    std::vector<JobRecord> jobs;
    std::vector<NodeRecord> nodes;
    std::vector<EventRecord> events;
  };
  Status apply(const Batch& batch);

  // --- Audit: who did what to which object, and how it ended. The record's seq is assigned.
  Status append_audit(const AuditRecord& record);
  Result<std::vector<AuditRecord>> audit_after(int64_t after_seq, size_t limit);

  // --- Step metrics (kiln/sched/step_series.h; state_store_steps.cc).
  // Adds `points` (a point whose job, attempt and step are stored already is left as it was)
  // and thins each job they touch that has more than `per_job_max` points to half that
  // (thin_steps), in one transaction. A point of a job that does not exist is refused
  // (kInvalidArgument), and none is added.
  Status append_steps(const std::vector<StepPoint>& points, size_t per_job_max);
  // The job's points by attempt and step (at most 2 x kStoreRowsMax rows, a bound above any
  // per_job_max the coordinator uses: it keeps kStepPointsPerJobMax).
  Result<std::vector<StepPoint>> steps_for_job(const std::string& job_id);
  // Forgets the job's points (a retention policy's cleanup).
  Status delete_steps(const std::string& job_id);
  // Points stored, all jobs together.
  Result<int64_t> count_steps();

  // --- Settings: small key-value pairs (the store daemon's address), plain TEXT, never secrets.
  Status put_setting(const std::string& key, const std::string& value);
  Result<std::optional<std::string>> get_setting(const std::string& key);

 private:
  StateStore(std::string path, sqlite3* db, const SecretBox* box, int schema_version);

  const std::string path_;
  const SecretBox* const box_;  // not owned; outlives the store
  const int schema_version_;
  std::mutex mu_;
  sqlite3* db_;  // owned; guarded by mu_
};

}  // namespace kiln::sched

#endif  // KILN_SCHED_STATE_STORE_H_
