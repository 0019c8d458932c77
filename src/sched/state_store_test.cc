#include <kiln/sched/state_store.h>

#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/testing/temp_path.h"

namespace kiln::sched {
namespace {

constexpr const char* kSecret = "hunter2-very-secret";

JobSpec spec_named(const std::string& name) {
  JobSpec spec;
  spec.name = name;
  spec.config = "configs/tiny.yaml";
  spec.command = {"kiln", "train", spec.config};
  spec.nodes = 2;
  return spec;
}

JobRecord job_named(const std::string& name, const std::string& team = "ml") {
  JobRecord job;
  job.team = team;
  job.workdir = "/work/" + name;
  job.spec = spec_named(name);
  job.state = "queued";
  job.submitted_ns = 1000;
  return job;
}

EventRecord event(const std::string& type, const std::string& job_id = "", int attempt = 0) {
  EventRecord e;
  e.ts_ns = 42;
  e.type = type;
  e.job_id = job_id;
  e.attempt = attempt;
  return e;
}

NodeRecord node_named(const std::string& name) {
  NodeRecord node;
  node.name = name;
  node.state = "ready";
  node.labels = {{"rack", "r1"}, {"gpu", "none"}};
  node.slots = 4;
  node.fault_ns = {10, 20};
  node.agent_address = "10.0.0.1:9400";
  return node;
}

// Runs `sql` on the file directly (outside the store), returning the first column of every row.
std::vector<std::string> raw_query(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  std::vector<std::string> rows;
  sqlite3_stmt* stmt = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr), SQLITE_OK)
      << sqlite3_errmsg(db);
  while (sqlite3_step(stmt) == SQLITE_ROW) {
    const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    rows.emplace_back(text == nullptr ? "" : text);
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return rows;
}

class StateStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_dir();
    path_ = dir_ + "/state.db";
    reopen();
  }
  void TearDown() override {
    store_.reset();
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
      std::remove((path_ + suffix).c_str());
    }
    rmdir(dir_.c_str());
  }
  virtual std::string make_dir() { return kiln::testing::unique_temp_dir("store"); }
  // Closes the store and opens the file again: a coordinator restart.
  void reopen() {
    store_.reset();
    Result<std::unique_ptr<StateStore>> store = StateStore::open(path_, &box_);
    ASSERT_TRUE(store.ok()) << store.status().to_string();
    store_ = std::move(store).value();
  }
  JobRecord insert(const std::string& name, const std::string& team = "ml") {
    Result<JobRecord> job = store_->insert_job(job_named(name, team), event("queued"));
    EXPECT_TRUE(job.ok()) << job.status().to_string();
    return job.ok() ? *job : JobRecord();
  }

  SecretBox box_ = SecretBox::from_key_for_test(std::string(kSecretKeyBytes, 'k'));
  std::string dir_;
  std::string path_;
  std::unique_ptr<StateStore> store_;
};

TEST_F(StateStoreTest, InsertGetAndList) {
  const JobRecord a = insert("a", "ml");
  const JobRecord b = insert("b", "infra");
  const JobRecord c = insert("c", "ml");
  EXPECT_EQ(a.id, "j-000001");
  EXPECT_EQ(b.id, "j-000002");
  EXPECT_EQ(c.id, "j-000003");
  EXPECT_EQ(a.version, 1);

  Result<JobRecord> got = store_->get_job(b.id);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->team, "infra");
  EXPECT_EQ(got->workdir, "/work/b");
  EXPECT_EQ(got->state, "queued");
  EXPECT_EQ(got->spec.name, "b");
  EXPECT_EQ(got->spec.nodes, 2);
  EXPECT_EQ(got->submitted_ns, 1000);
  EXPECT_EQ(got->last_step, -1);
  EXPECT_EQ(got->version, 1);
  EXPECT_EQ(job_spec_to_json(got->spec, true), job_spec_to_json(b.spec, true));

  Result<JobRecord> missing = store_->get_job("j-999999");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(missing.status().is_not_found());
  EXPECT_NE(missing.status().message().find("j-999999"), std::string::npos);

  Result<std::vector<JobRecord>> all = store_->list_jobs("");
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].id, a.id);
  EXPECT_EQ((*all)[2].id, c.id);
  Result<std::vector<JobRecord>> ml = store_->list_jobs("ml");
  ASSERT_TRUE(ml.ok());
  ASSERT_EQ(ml->size(), 2u);
  EXPECT_EQ((*ml)[1].id, c.id);

  JobRecord done = *got;
  done.state = "succeeded";
  ASSERT_TRUE(store_->update_job(done, {}).ok());
  Result<std::vector<JobRecord>> active = store_->list_active_jobs();
  ASSERT_TRUE(active.ok());
  ASSERT_EQ(active->size(), 2u);
  EXPECT_EQ((*active)[0].id, a.id);
  EXPECT_EQ((*active)[1].id, c.id);
}

TEST_F(StateStoreTest, ListingAfterAJobPagesThroughEveryTeamsJobsInSubmitOrder) {
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i)
    ids.push_back(insert("j" + std::to_string(i), i % 2 == 0 ? "ml" : "infra").id);
  const auto listed = [this](const std::string& after, size_t limit) {
    Result<std::vector<JobRecord>> jobs = store_->list_jobs_after(after, limit);
    EXPECT_TRUE(jobs.ok()) << jobs.status().to_string();
    std::vector<std::string> out;
    for (const JobRecord& j : *jobs)
      out.push_back(j.id);
    return out;
  };
  EXPECT_EQ(listed("", 2), (std::vector<std::string>{ids[0], ids[1]}));
  EXPECT_EQ(listed(ids[1], 2), (std::vector<std::string>{ids[2], ids[3]}));
  EXPECT_EQ(listed(ids[3], 2), (std::vector<std::string>{ids[4]}));
  EXPECT_TRUE(listed(ids[4], 2).empty());
  EXPECT_EQ(listed("j-999999", 10), ids) << "an id that names no job starts from the first";
  EXPECT_EQ(listed("", 100'000).size(), 5u) << "a limit past kStoreRowsMax is capped, not refused";
  EXPECT_EQ(store_->list_jobs_after("", 3)->at(2).spec.name, "j2") << "whole records";
}

TEST_F(StateStoreTest, UpdateWritesEveryFieldAndBumpsTheVersion) {
  JobRecord job = insert("a");
  job.state = "running";
  job.attempt = 2;
  job.restarts = 1;
  job.nodes = {"n2", "n1"};
  job.reason = "rank 3 died";
  job.admitted_ns = 5;
  job.running_ns = 6;
  job.not_before_ns = 7;
  job.last_step = 99;
  job.productive_ms = 1234.5;
  job.spec.priority = 7;
  Result<JobRecord> updated = store_->update_job(job, {event("running", job.id, 2)});
  ASSERT_TRUE(updated.ok()) << updated.status().to_string();
  EXPECT_EQ(updated->version, 2);
  Result<JobRecord> got = store_->get_job(job.id);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->state, "running");
  EXPECT_EQ(got->attempt, 2);
  EXPECT_EQ(got->restarts, 1);
  EXPECT_EQ(got->nodes, (std::vector<std::string>{"n2", "n1"}));
  EXPECT_EQ(got->reason, "rank 3 died");
  EXPECT_EQ(got->admitted_ns, 5);
  EXPECT_EQ(got->running_ns, 6);
  EXPECT_EQ(got->not_before_ns, 7);
  EXPECT_EQ(got->last_step, 99);
  EXPECT_EQ(got->productive_ms, 1234.5);
  EXPECT_EQ(got->spec.priority, 7);
  EXPECT_EQ(got->version, 2);
}

TEST_F(StateStoreTest, StaleVersionIsAbortedAndWritesNothing) {
  const JobRecord job = insert("a");
  JobRecord first = job;
  first.state = "admitted";
  ASSERT_TRUE(store_->update_job(first, {event("admitted", job.id)}).ok());
  Result<std::vector<EventRecord>> before = store_->events_after(0, 100);
  ASSERT_TRUE(before.ok());

  JobRecord stale = job;  // still version 1
  stale.state = "cancelled";
  Result<JobRecord> result = store_->update_job(stale, {event("cancelled", job.id)});
  ASSERT_FALSE(result.ok());
  EXPECT_TRUE(result.status().is_aborted()) << result.status().to_string();
  EXPECT_NE(result.status().message().find("job j-000001 changed underneath"), std::string::npos)
      << result.status().message();

  EXPECT_EQ(store_->get_job(job.id)->state, "admitted");
  EXPECT_EQ(store_->get_job(job.id)->version, 2);
  EXPECT_EQ(store_->events_after(0, 100)->size(), before->size());  // the event did not land

  JobRecord ghost = job;
  ghost.id = "j-000404";
  EXPECT_TRUE(store_->update_job(ghost, {}).status().is_not_found());
}

TEST_F(StateStoreTest, EventsAreOrderedAndFilteredByAfterSeq) {
  const JobRecord a = insert("a");  // event 1: queued a
  const JobRecord b = insert("b");  // event 2: queued b
  ASSERT_TRUE(
      store_
          ->append_events({event("placed", a.id, 0), event("node_down"), event("running", a.id, 0)})
          .ok());
  EventRecord fault = event("fault", b.id, 0);
  fault.detail = {{"cause", "rank_exit"}, {"rank", 3}, {"node", "n1"}, {"message", "exit 1"}};
  ASSERT_TRUE(store_->append_events({fault}).ok());

  Result<std::vector<EventRecord>> all = store_->events_after(0, 100);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 6u);
  for (size_t i = 1; i < all->size(); ++i)
    EXPECT_LT((*all)[i - 1].seq, (*all)[i].seq);
  EXPECT_EQ((*all)[0].type, "queued");
  EXPECT_EQ((*all)[0].job_id, a.id);
  EXPECT_EQ((*all)[3].type, "node_down");
  EXPECT_EQ((*all)[3].job_id, "");
  EXPECT_EQ((*all)[5].detail["rank"], 3);
  EXPECT_EQ((*all)[5].ts_ns, 42);

  Result<std::vector<EventRecord>> of_a = store_->events_for_job(a.id, 0, 100);
  ASSERT_TRUE(of_a.ok());
  ASSERT_EQ(of_a->size(), 3u);
  EXPECT_EQ((*of_a)[1].type, "placed");
  Result<std::vector<EventRecord>> later = store_->events_for_job(a.id, (*of_a)[1].seq, 100);
  ASSERT_TRUE(later.ok());
  ASSERT_EQ(later->size(), 1u);
  EXPECT_EQ((*later)[0].type, "running");
  Result<std::vector<EventRecord>> page = store_->events_after((*all)[1].seq, 2);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->size(), 2u);
  EXPECT_EQ((*page)[0].seq, (*all)[2].seq);

  // An event naming no job is refused, and the batch it came in lands not at all.
  Status bad = store_->append_events({event("running", a.id), event("running", "j-000404")});
  EXPECT_TRUE(bad.is_invalid_argument()) << bad.to_string();
  EXPECT_EQ(store_->events_after(0, 100)->size(), 6u);
}

TEST_F(StateStoreTest, BatchWithOneStaleJobWritesNothing) {
  JobRecord a = insert("a");
  JobRecord b = insert("b");
  JobRecord moved = b;
  moved.reason = "someone else";
  ASSERT_TRUE(store_->update_job(moved, {}).ok());  // b is now version 2

  StateStore::Batch plan;
  a.state = "placed";
  a.nodes = {"n1", "n2"};
  b.state = "placed";  // written at version 1: stale
  plan.jobs = {a, b};
  plan.nodes = {node_named("n1")};
  plan.events = {event("placed", a.id), event("placed", b.id)};
  Status status = store_->apply(plan);
  ASSERT_TRUE(status.is_aborted()) << status.to_string();
  EXPECT_NE(status.message().find("job j-000002 changed underneath"), std::string::npos)
      << status.message();

  EXPECT_EQ(store_->get_job(a.id)->state, "queued");
  EXPECT_EQ(store_->get_job(a.id)->version, 1);
  EXPECT_TRUE(store_->get_node("n1").status().is_not_found());
  EXPECT_EQ(store_->events_after(0, 100)->size(), 2u);  // the two queued events only

  b.version = 2;
  plan.jobs = {a, b};
  ASSERT_TRUE(store_->apply(plan).ok());
  EXPECT_EQ(store_->get_job(a.id)->state, "placed");
  EXPECT_EQ(store_->get_job(b.id)->version, 3);
  EXPECT_EQ(store_->get_node("n1")->version, 1);
  EXPECT_EQ(store_->events_after(0, 100)->size(), 4u);
}

TEST_F(StateStoreTest, NodesUpsertWithVersionChecks) {
  Result<NodeRecord> n = store_->upsert_node(node_named("n2"), {event("node_up")});
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  EXPECT_EQ(n->version, 1);
  ASSERT_TRUE(store_->upsert_node(node_named("n1"), {}).ok());

  NodeRecord cordon = *n;
  cordon.state = "cordoned";
  cordon.reason = "bad DIMM";
  Result<NodeRecord> cordoned = store_->upsert_node(cordon, {event("node_cordoned")});
  ASSERT_TRUE(cordoned.ok()) << cordoned.status().to_string();
  EXPECT_EQ(cordoned->version, 2);
  Result<NodeRecord> stale = store_->upsert_node(cordon, {event("node_uncordoned")});
  EXPECT_TRUE(stale.status().is_aborted()) << stale.status().to_string();
  EXPECT_NE(stale.status().message().find("node n2 changed underneath"), std::string::npos);
  EXPECT_EQ(store_->events_after(0, 100)->size(), 2u);

  NodeRecord ghost = node_named("n9");
  ghost.version = 3;
  EXPECT_TRUE(store_->upsert_node(ghost, {}).status().is_not_found());

  Result<std::vector<NodeRecord>> nodes = store_->list_nodes();
  ASSERT_TRUE(nodes.ok());
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[0].name, "n1");
  const NodeRecord& got = (*nodes)[1];
  EXPECT_EQ(got.state, "cordoned");
  EXPECT_EQ(got.reason, "bad DIMM");
  EXPECT_EQ(got.labels.at("rack"), "r1");
  EXPECT_EQ(got.slots, 4);
  EXPECT_EQ(got.fault_ns, (std::vector<int64_t>{10, 20}));
  EXPECT_EQ(got.agent_address, "10.0.0.1:9400");

  // Registration (version 0) overwrites whatever is there.
  Result<NodeRecord> again = store_->upsert_node(node_named("n2"), {});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->version, 3);
  EXPECT_EQ(store_->get_node("n2")->state, "ready");
}

TEST_F(StateStoreTest, ReopeningLosesNothing) {
  JobRecord job = insert("a");
  job.state = "running";
  job.nodes = {"n1"};
  ASSERT_TRUE(store_->update_job(job, {event("running", job.id, 0)}).ok());
  ASSERT_TRUE(store_->upsert_node(node_named("n1"), {event("node_up")}).ok());
  ASSERT_TRUE(store_->append_audit({0, 7, "alice", "submit", job.id, "ok"}).ok());
  ASSERT_TRUE(store_->append_audit({0, 8, "bob", "cancel", job.id, "denied"}).ok());
  ASSERT_TRUE(store_->put_setting("store_address", "10.0.0.1:29500").ok());
  ASSERT_TRUE(store_->put_setting("store_address", "10.0.0.2:29500").ok());

  reopen();
  EXPECT_EQ(store_->schema_version(), 3);
  Result<JobRecord> got = store_->get_job(job.id);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->state, "running");
  EXPECT_EQ(got->nodes, (std::vector<std::string>{"n1"}));
  EXPECT_EQ(got->version, 2);
  EXPECT_EQ(store_->events_after(0, 100)->size(), 3u);
  EXPECT_EQ(store_->get_node("n1")->labels.at("rack"), "r1");
  Result<std::vector<AuditRecord>> audit = store_->audit_after(0, 10);
  ASSERT_TRUE(audit.ok());
  ASSERT_EQ(audit->size(), 2u);
  EXPECT_EQ((*audit)[1].who, "bob");
  EXPECT_EQ((*audit)[1].result, "denied");
  EXPECT_EQ(store_->audit_after((*audit)[0].seq, 10)->size(), 1u);
  EXPECT_EQ(store_->get_setting("store_address")->value_or(""), "10.0.0.2:29500");
  EXPECT_FALSE(store_->get_setting("nothing")->has_value());
  // Ids continue after a restart, never reused.
  EXPECT_EQ(insert("b").id, "j-000002");
}

TEST_F(StateStoreTest, SecretsAreStoredOnlySealed) {
  JobRecord job = job_named("secretive");
  job.spec.env = {{"PLAIN", "visible", false}, {"API_KEY", kSecret, true}};
  Result<JobRecord> stored = store_->insert_job(job, event("queued"));
  ASSERT_TRUE(stored.ok()) << stored.status().to_string();
  JobRecord update = *stored;
  update.state = "admitted";
  ASSERT_TRUE(store_->update_job(update, {event("admitted", stored->id)}).ok());

  reopen();
  Result<JobRecord> got = store_->get_job(stored->id);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(got->spec.env.size(), 2u);
  EXPECT_EQ(got->spec.env[1].value, kSecret);
  EXPECT_TRUE(got->spec.env[1].secret);
  EXPECT_EQ(got->spec.env[0].value, "visible");
  EXPECT_EQ(store_->list_jobs("")->at(0).spec.env[1].value, kSecret);
  store_.reset();  // flush nothing pending: every read below is of the file

  // Every TEXT value of every column of every table.
  size_t text_values = 0;
  for (const std::string& table :
       raw_query(path_, "SELECT name FROM sqlite_master WHERE type = 'table'")) {
    for (const std::string& column :
         raw_query(path_, "SELECT name FROM pragma_table_info('" + table + "')")) {
      for (const std::string& value :
           raw_query(path_, "SELECT \"" + column + "\" FROM \"" + table + "\" WHERE typeof(\"" +
                                column + "\") = 'text'")) {
        ++text_values;
        EXPECT_EQ(value.find(kSecret), std::string::npos)
            << table << "." << column << ": " << value;
      }
    }
  }
  EXPECT_GT(text_values, 10u);
  EXPECT_EQ(raw_query(path_, "SELECT count(*) FROM jobs WHERE typeof(secrets) = 'blob'"),
            std::vector<std::string>{"1"});
  // And not in the raw bytes of the files either (the WAL holds the newest pages).
  for (const char* suffix : {"", "-wal"}) {
    std::ifstream in(path_ + suffix, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(bytes.find(kSecret), std::string::npos) << suffix;
  }
}

TEST_F(StateStoreTest, TheFileIsWal0600AndSchemaVersioned) {
  struct stat st {};
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(raw_query(path_, "PRAGMA journal_mode"), std::vector<std::string>{"wal"});
  EXPECT_EQ(raw_query(path_, "SELECT value FROM meta WHERE key = 'schema_version'"),
            std::vector<std::string>{std::to_string(store_->schema_version())});
}

TEST_F(StateStoreTest, ANodesPreflightIsKeptAndReadBack) {
  NodeRecord node = node_named("n1");
  node.preflight = {"full", false, 1234, "stack: OMP_NUM_THREADS expected 2, found 3", "77.1"};
  ASSERT_TRUE(store_->upsert_node(node, {}).ok());
  reopen();
  Result<NodeRecord> got = store_->get_node("n1");
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->preflight.level, "full");
  EXPECT_FALSE(got->preflight.passed);
  EXPECT_EQ(got->preflight.checked_ns, 1234);
  EXPECT_EQ(got->preflight.summary, "stack: OMP_NUM_THREADS expected 2, found 3");
  EXPECT_EQ(got->preflight.agent, "77.1");
  // A node never checked reads back as never checked.
  ASSERT_TRUE(store_->upsert_node(node_named("n2"), {}).ok());
  EXPECT_TRUE(store_->get_node("n2")->preflight.level.empty());
}

// An upgrade: a file written by a version-1 coordinator (no preflight column) gains it, and
// keeps its jobs, events and nodes.
TEST_F(StateStoreTest, AVersionOneFileMigratesForwardKeepingEverything) {
  JobRecord job = insert("a");
  ASSERT_TRUE(store_->upsert_node(node_named("n1"), {event("node_up")}).ok());
  store_.reset();
  raw_query(path_, "ALTER TABLE nodes DROP COLUMN preflight_json");
  raw_query(path_, "DROP TABLE steps");
  raw_query(path_, "UPDATE meta SET value = 1 WHERE key = 'schema_version'");
  reopen();
  EXPECT_EQ(store_->schema_version(), 3);
  EXPECT_EQ(store_->get_job(job.id)->spec.name, job.spec.name);
  EXPECT_EQ(store_->events_after(0, 100)->size(), 2u);
  Result<NodeRecord> node = store_->get_node("n1");
  ASSERT_TRUE(node.ok()) << node.status().to_string();
  EXPECT_TRUE(node->preflight.level.empty());
  EXPECT_EQ(node->labels.at("rack"), "r1");
}

TEST_F(StateStoreTest, ANewerSchemaIsRefusedNamingBothVersions) {
  const int code_version = store_->schema_version();
  store_.reset();
  raw_query(path_, "UPDATE meta SET value = 99 WHERE key = 'schema_version'");
  Result<std::unique_ptr<StateStore>> store = StateStore::open(path_, &box_);
  ASSERT_FALSE(store.ok());
  const std::string m = store.status().message();
  EXPECT_NE(m.find(path_), std::string::npos) << m;
  EXPECT_NE(m.find("schema version 99 is newer than this build's " + std::to_string(code_version)),
            std::string::npos)
      << m;
}

TEST_F(StateStoreTest, AnEmptyFileIsMigratedToTheSchema) {
  store_.reset();
  for (const char* suffix : {"", "-wal", "-shm"})
    std::remove((path_ + suffix).c_str());
  std::ofstream(path_).close();  // zero bytes
  reopen();
  EXPECT_EQ(store_->schema_version(), 3);
  const std::vector<std::string> tables =
      raw_query(path_, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name");
  const std::set<std::string> names(tables.begin(), tables.end());
  for (const char* table : {"meta", "jobs", "events", "nodes", "audit", "settings", "steps"}) {
    EXPECT_EQ(names.count(table), 1u) << table;
  }
  EXPECT_EQ(insert("a").id, "j-000001");
}

// This test is about the mutex and the ids, not the disk: on a disk each of its 1600 commits
// waits for an fsync (3 ms each on a CI virtual disk: 5 s in all), so it runs on tmpfs where there
// is one. Every other test runs on the real temp dir.
class StateStoreConcurrencyTest : public StateStoreTest {
 protected:
  std::string make_dir() override {
    struct stat st {};
    if (stat("/dev/shm", &st) != 0 || !S_ISDIR(st.st_mode) || access("/dev/shm", W_OK) != 0) {
      return StateStoreTest::make_dir();
    }
    const std::string unique = kiln::testing::unique_temp_path("store");
    const std::string dir = "/dev/shm/" + unique.substr(unique.rfind('/') + 1);
    return mkdir(dir.c_str(), 0700) == 0 ? dir : StateStoreTest::make_dir();
  }
};

TEST_F(StateStoreConcurrencyTest, ConcurrentInsertsAllLandWithUniqueIds) {
  constexpr int kThreads = 8;
  constexpr int kJobsPerThread = 200;
  std::vector<std::vector<std::string>> ids(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kJobsPerThread; ++i) {
        Result<JobRecord> job = store_->insert_job(
            job_named("t" + std::to_string(t) + "-" + std::to_string(i)), event("queued"));
        if (job.ok()) ids[t].push_back(job->id);
      }
    });
  }
  for (std::thread& thread : threads)
    thread.join();
  std::set<std::string> unique;
  for (const auto& per_thread : ids) {
    EXPECT_EQ(per_thread.size(), static_cast<size_t>(kJobsPerThread));
    unique.insert(per_thread.begin(), per_thread.end());
  }
  EXPECT_EQ(unique.size(), static_cast<size_t>(kThreads * kJobsPerThread));
  Result<std::vector<JobRecord>> all = store_->list_jobs("");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), static_cast<size_t>(kThreads * kJobsPerThread));
  EXPECT_EQ(all->back().id, "j-001600");
  EXPECT_EQ(store_->events_after(0, kStoreRowsMax)->size(),
            static_cast<size_t>(kThreads * kJobsPerThread));
}

TEST_F(StateStoreTest, AnInvalidSpecIsRefusedBeforeItIsStored) {
  JobRecord job = job_named("bad name!");
  Result<JobRecord> stored = store_->insert_job(job, event("queued"));
  ASSERT_FALSE(stored.ok());
  EXPECT_TRUE(stored.status().is_invalid_argument()) << stored.status().to_string();
  EXPECT_TRUE(store_->list_jobs("")->empty());
  EXPECT_TRUE(store_->events_after(0, 10)->empty());
}

}  // namespace
}  // namespace kiln::sched
