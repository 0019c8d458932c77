// Tests of the storage lifecycle (kiln/sched/lifecycle.h): real checkpoints in a temp directory,
// a real SQLite store, a fake clock.
#include <kiln/sched/lifecycle.h>

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <kiln/ckpt/catalog.h>
#include <kiln/ckpt/checkpoint.h>

#include "base/testing/temp_path.h"
#include "ckpt/testing/ckpt_testing.h"

namespace kiln::sched {
namespace {

constexpr int64_t kDayNs = 24LL * 3600 * 1'000'000'000;

void write_checkpoint(const std::string& dir, int64_t step) {
  ckpt::CommitSpec spec{dir, step, 1, {}, "{}"};
  const ckpt::testing::State state(static_cast<int>(step));
  Result<ckpt::FileRecord> record = ckpt::write_shard({dir, step, 0, 1}, state.refs());
  ASSERT_TRUE(record.ok()) << record.status().to_string();
  spec.records.push_back(*record);
  ASSERT_TRUE(ckpt::commit(spec).ok());
}

class LifecycleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = kiln::testing::unique_temp_dir("lifecycle");
    Result<std::unique_ptr<StateStore>> store = StateStore::open(dir_ + "/state.db", &box_);
    ASSERT_TRUE(store.ok()) << store.status().to_string();
    store_ = std::move(store).value();
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  // A job of `team` in `state` with its checkpoints at dir_/<name> (steps 1..n).
  JobRecord job(const std::string& name, const std::string& team, const std::string& state,
                int checkpoints) {
    JobRecord j;
    j.team = team;
    j.workdir = dir_;
    j.spec.name = name;
    j.spec.config = "c.yaml";
    j.spec.command = {"kiln", "train", "c.yaml"};
    j.spec.checkpoint_dir = dir_ + "/" + name;
    j.state = "queued";
    EventRecord queued;
    queued.type = "queued";
    Result<JobRecord> stored = store_->insert_job(j, queued);
    EXPECT_TRUE(stored.ok());
    JobRecord out = *stored;
    out.state = state;
    if (state != "running") out.finished_ns = clock_.wall_ns();
    Result<JobRecord> updated = store_->update_job(out, {});
    EXPECT_TRUE(updated.ok());
    for (int s = 1; s <= checkpoints; ++s)
      write_checkpoint(out.spec.checkpoint_dir, s);
    StepPoint p;
    p.job_id = updated->id;
    p.sample.step = 1;
    EXPECT_TRUE(store_->append_steps({p}, 100).ok());
    return *updated;
  }

  SecretBox box_ = SecretBox::from_key_for_test(std::string(kSecretKeyBytes, 'k'));
  FakeClock clock_{1'000'000'000'000'000'000};
  std::string dir_;
  std::unique_ptr<StateStore> store_;
};

TEST_F(LifecycleTest, MeasuresEachTeamsCheckpointsAndPrunesFinishedJobsToTheNewestK) {
  const JobRecord running = job("run", "vision", "running", 4);
  const JobRecord done = job("done", "nlp", "succeeded", 4);
  LifecycleOptions o;
  o.keep_checkpoints = 2;
  Lifecycle lifecycle(o, store_.get(), &clock_, Logger());
  const int64_t nlp_before = directory_bytes(done.spec.checkpoint_dir, 1000);
  Result<LifecyclePass> pass = lifecycle.run_once();
  ASSERT_TRUE(pass.ok()) << pass.status().to_string();
  EXPECT_EQ(pass->pruned, 1);
  EXPECT_EQ(pass->cleaned, 0);
  // The finished job keeps its newest 2 of 4; the running one is not touched (its trainer owns
  // its retention).
  EXPECT_EQ(ckpt::list_checkpoints(done.spec.checkpoint_dir)->size(), 2u);
  EXPECT_EQ(ckpt::list_checkpoints(running.spec.checkpoint_dir)->size(), 4u);
  const std::map<std::string, int64_t> by_team = lifecycle.checkpoint_bytes_by_team();
  EXPECT_EQ(by_team.at("vision"), directory_bytes(running.spec.checkpoint_dir, 1000));
  EXPECT_EQ(by_team.at("nlp"), directory_bytes(done.spec.checkpoint_dir, 1000));
  EXPECT_GT(by_team.at("nlp"), 0);
  EXPECT_LT(by_team.at("nlp"), nlp_before);
  EXPECT_EQ(pass->bytes_freed, nlp_before - by_team.at("nlp"));
}

TEST_F(LifecycleTest, AJobFinishedLongerThanTheKeepIsCleanedOnce) {
  const JobRecord old = job("old", "nlp", "failed", 3);
  LifecycleOptions o;
  o.keep_finished_ms = 7 * 24 * 3600 * 1000LL;
  Lifecycle lifecycle(o, store_.get(), &clock_, Logger());
  ASSERT_EQ(lifecycle.run_once()->cleaned, 0) << "just finished: kept";
  clock_.advance_ns(8 * kDayNs);
  Result<LifecyclePass> pass = lifecycle.run_once();
  ASSERT_TRUE(pass.ok()) << pass.status().to_string();
  EXPECT_EQ(pass->cleaned, 1);
  EXPECT_GT(pass->bytes_freed, 0);
  EXPECT_FALSE(std::filesystem::exists(old.spec.checkpoint_dir));
  EXPECT_TRUE(store_->steps_for_job(old.id)->empty());
  Result<std::vector<EventRecord>> cleaned = store_->newest_events(old.id, "cleaned", 10);
  ASSERT_EQ(cleaned->size(), 1u);
  EXPECT_EQ((*cleaned)[0].detail["bytes_freed"].get<int64_t>(), pass->bytes_freed);
  // A second pass, or a restarted coordinator's first, finds the event and does nothing.
  Lifecycle again(o, store_.get(), &clock_, Logger());
  EXPECT_EQ(again.run_once()->cleaned, 0);
  EXPECT_EQ(store_->newest_events(old.id, "cleaned", 10)->size(), 1u);
  EXPECT_TRUE(store_->get_job(old.id).ok()) << "the record stays: it is the history";
}

TEST_F(LifecycleTest, APassReadsEveryJobAPageAtATime) {
  // Six jobs, on pages of one (six full pages, then an empty one) and of four (a full page and
  // a part). The oldest three finished long ago; the first of them shares its directory with
  // the newest job, which still runs (it resumed from those checkpoints): that sharing is seen
  // across pages, and the directory stays.
  for (const size_t page : {1, 4}) {
    SCOPED_TRACE("page_jobs " + std::to_string(page));
    Result<std::unique_ptr<StateStore>> fresh =
        StateStore::open(dir_ + "/state-" + std::to_string(page) + ".db", &box_);
    ASSERT_TRUE(fresh.ok()) << fresh.status().to_string();
    store_ = std::move(fresh).value();
    const std::string p = std::to_string(page) + "-";
    const JobRecord shared = job(p + "shared", "nlp", "succeeded", 2);
    const JobRecord old = job(p + "old", "nlp", "failed", 2);
    const JobRecord old_too = job(p + "old_too", "vision", "succeeded", 2);
    const JobRecord running = job(p + "running", "vision", "running", 1);
    clock_.advance_ns(8 * kDayNs);
    const JobRecord recent = job(p + "recent", "vision", "cancelled", 1);
    JobRecord resumed = job(p + "resumed", "nlp", "running", 0);
    resumed.spec.checkpoint_dir = shared.spec.checkpoint_dir;
    ASSERT_TRUE(store_->update_job(resumed, {}).ok());
    ASSERT_GT(directory_bytes(old.spec.checkpoint_dir, 1000), 0);

    LifecycleOptions o;
    o.keep_finished_ms = 7 * 24 * 3600 * 1000LL;
    o.page_jobs = page;
    Lifecycle lifecycle(o, store_.get(), &clock_, Logger());
    Result<LifecyclePass> pass = lifecycle.run_once();
    ASSERT_TRUE(pass.ok()) << pass.status().to_string();
    // Cleaned: the three jobs that finished more than 7 days ago, the first page's included;
    // the shared directory kept its checkpoints.
    EXPECT_EQ(pass->cleaned, 3);
    EXPECT_FALSE(std::filesystem::exists(old.spec.checkpoint_dir));
    EXPECT_FALSE(std::filesystem::exists(old_too.spec.checkpoint_dir));
    EXPECT_EQ(ckpt::list_checkpoints(shared.spec.checkpoint_dir)->size(), 2u)
        << "job " << resumed.id << " on the last page uses it";
    EXPECT_EQ(ckpt::list_checkpoints(recent.spec.checkpoint_dir)->size(), 1u);
    for (const JobRecord& j : {shared, old, old_too})
      EXPECT_EQ(store_->newest_events(j.id, "cleaned", 10)->size(), 1u) << j.id;
    // Measured on every page, each directory once: the shared one for the job that uses it.
    const std::map<std::string, int64_t> by_team = lifecycle.checkpoint_bytes_by_team();
    EXPECT_EQ(by_team.at("nlp"), directory_bytes(shared.spec.checkpoint_dir, 1000));
    EXPECT_EQ(by_team.at("vision"), directory_bytes(recent.spec.checkpoint_dir, 1000) +
                                        directory_bytes(running.spec.checkpoint_dir, 1000));
  }
}

TEST_F(LifecycleTest, ADirectoryInsideOrAroundAnotherJobsOneStays) {
  // Finished long ago: "outer" (dir X), "inner" (dir Y/deep/inner), "sibling" (dir X-b, which
  // sorts between X and X/ but is not inside X). Still running: one job inside X, one job
  // around Y/deep/inner.
  const JobRecord outer = job("outer", "nlp", "succeeded", 1);
  JobRecord inner = job("inner", "nlp", "succeeded", 1);
  const JobRecord sibling = job("outer-b", "nlp", "failed", 1);
  inner.spec.checkpoint_dir = dir_ + "/y/deep/inner";
  ASSERT_TRUE(store_->update_job(inner, {}).ok());
  write_checkpoint(inner.spec.checkpoint_dir, 1);
  clock_.advance_ns(8 * kDayNs);
  JobRecord in_outer = job("in_outer", "vision", "running", 0);
  in_outer.spec.checkpoint_dir = outer.spec.checkpoint_dir + "/nested";
  ASSERT_TRUE(store_->update_job(in_outer, {}).ok());
  JobRecord around_inner = job("around_inner", "vision", "running", 0);
  around_inner.spec.checkpoint_dir = dir_ + "/y/deep";
  ASSERT_TRUE(store_->update_job(around_inner, {}).ok());

  LifecycleOptions o;
  o.keep_finished_ms = 7 * 24 * 3600 * 1000LL;
  Lifecycle lifecycle(o, store_.get(), &clock_, Logger());
  Result<LifecyclePass> pass = lifecycle.run_once();
  ASSERT_TRUE(pass.ok()) << pass.status().to_string();
  EXPECT_EQ(pass->cleaned, 3);
  const auto checkpoints = [](const std::string& dir) {
    Result<std::vector<ckpt::CheckpointInfo>> list = ckpt::list_checkpoints(dir);
    return list.ok() ? static_cast<int>(list->size()) : -1;  // -1: the directory is gone
  };
  EXPECT_EQ(checkpoints(outer.spec.checkpoint_dir), 1)
      << "job " << in_outer.id << " writes inside it";
  EXPECT_EQ(checkpoints(inner.spec.checkpoint_dir), 1) << "job " << around_inner.id << " holds it";
  EXPECT_FALSE(std::filesystem::exists(sibling.spec.checkpoint_dir))
      << "a name that only starts like another job's directory is not inside it";
}

TEST_F(LifecycleTest, ZeroKeepsEverything) {
  const JobRecord old = job("old", "nlp", "cancelled", 3);
  LifecycleOptions o;
  o.keep_finished_ms = 0;
  o.keep_checkpoints = 0;
  Lifecycle lifecycle(o, store_.get(), &clock_, Logger());
  clock_.advance_ns(400 * kDayNs);
  Result<LifecyclePass> pass = lifecycle.run_once();
  EXPECT_EQ(pass->cleaned + pass->pruned, 0);
  EXPECT_EQ(ckpt::list_checkpoints(old.spec.checkpoint_dir)->size(), 3u);
}

}  // namespace
}  // namespace kiln::sched
