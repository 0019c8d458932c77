// Tests of a job's step points: thinning (thin_steps) and the state store's steps table.
#include <kiln/sched/step_series.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include <kiln/sched/state_store.h>
#include <unistd.h>

#include "base/testing/temp_path.h"

namespace kiln::sched {
namespace {

StepPoint point(const std::string& job, int attempt, int64_t step, double loss = 1.0) {
  StepPoint p;
  p.job_id = job;
  p.attempt = attempt;
  p.wall_ns = 1'000'000'000 + step;
  p.sample.step = step;
  p.sample.step_ms = 10;
  p.sample.loss = loss;
  return p;
}

TEST(ThinSteps, KeepsEverythingThatFits) {
  std::vector<StepPoint> points;
  for (int s = 1; s <= 10; ++s)
    points.push_back(point("j", 0, s));
  EXPECT_EQ(thin_steps(points, 10).size(), 10u);
}

TEST(ThinSteps, ThinsToTheBoundEvenlyKeepingTheNewestAndValidationPoints) {
  std::vector<StepPoint> points;
  for (int s = 1; s <= 1000; ++s) {
    points.push_back(point("j", 0, s));
    if (s % 100 == 37) points.back().sample.val_loss = 2.5;  // a validation step
  }
  const std::vector<size_t> keep = thin_steps(points, 100);
  ASSERT_LE(keep.size(), 100u);
  EXPECT_GE(keep.size(), 50u) << "the smallest width that fits, not a coarser one";
  std::set<int64_t> steps;
  for (size_t i : keep)
    steps.insert(points[i].sample.step);
  EXPECT_TRUE(steps.count(1000)) << "the newest point ends the curve";
  for (int s = 37; s <= 1000; s += 100)
    EXPECT_TRUE(steps.count(s)) << "validation step " << s << " kept";
  // Evenly: no gap between kept steps wider than two buckets.
  int64_t prev = 0;
  for (int64_t s : steps) {
    EXPECT_LE(s - prev, 2 * 16) << "a gap before step " << s;
    prev = s;
  }
}

TEST(ThinSteps, EachAttemptKeepsItsOwnCurve) {
  std::vector<StepPoint> points;
  for (int s = 1; s <= 300; ++s)
    points.push_back(point("j", 0, s));
  for (int s = 200; s <= 500; ++s)  // resumed from step 200's checkpoint
    points.push_back(point("j", 1, s));
  const std::vector<size_t> keep = thin_steps(points, 64);
  ASSERT_LE(keep.size(), 64u);
  std::set<int64_t> newest_kept;
  int per_attempt[2] = {0, 0};
  for (size_t i : keep) {
    ++per_attempt[points[i].attempt];
    if (points[i].sample.step == (points[i].attempt == 0 ? 300 : 500))
      newest_kept.insert(points[i].attempt);
  }
  EXPECT_GT(per_attempt[0], 10);
  EXPECT_GT(per_attempt[1], 10);
  EXPECT_EQ(newest_kept.size(), 2u);
}

class StepStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = kiln::testing::unique_temp_dir("steps");
    path_ = dir_ + "/state.db";
    reopen();
    JobRecord job;
    job.team = "ml";
    job.workdir = "/w";
    job.spec.name = "a";
    job.spec.config = "c.yaml";
    job.spec.command = {"kiln", "train", "c.yaml"};
    job.state = "queued";
    EventRecord queued;
    queued.type = "queued";
    Result<JobRecord> stored = store_->insert_job(job, queued);
    ASSERT_TRUE(stored.ok()) << stored.status().to_string();
    id_ = stored->id;
  }
  void TearDown() override {
    store_.reset();
    for (const char* suffix : {"", "-wal", "-shm"})
      std::remove((path_ + suffix).c_str());
    rmdir(dir_.c_str());
  }
  void reopen() {
    store_.reset();
    Result<std::unique_ptr<StateStore>> store = StateStore::open(path_, &box_);
    ASSERT_TRUE(store.ok()) << store.status().to_string();
    store_ = std::move(store).value();
  }

  SecretBox box_ = SecretBox::from_key_for_test(std::string(kSecretKeyBytes, 'k'));
  std::string dir_, path_, id_;
  std::unique_ptr<StateStore> store_;
};

TEST_F(StepStoreTest, PointsSurviveARestartWithNoValueKeptAsNoValue) {
  StepPoint p = point(id_, 0, 5, std::nan(""));
  p.sample.val_loss = 3.25;
  p.sample.lr = 6e-4;
  ASSERT_TRUE(store_->append_steps({p, point(id_, 0, 6, 4.5)}, 100).ok());
  reopen();
  Result<std::vector<StepPoint>> got = store_->steps_for_job(id_);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(got->size(), 2u);
  EXPECT_TRUE(std::isnan((*got)[0].sample.loss)) << "a diverged loss reads back as no value";
  EXPECT_DOUBLE_EQ((*got)[0].sample.val_loss, 3.25);
  EXPECT_DOUBLE_EQ((*got)[0].sample.lr, 6e-4);
  EXPECT_TRUE(std::isnan((*got)[0].sample.mfu));
  EXPECT_EQ((*got)[0].wall_ns, p.wall_ns);
  EXPECT_DOUBLE_EQ((*got)[1].sample.loss, 4.5);
  EXPECT_TRUE(std::isnan((*got)[1].sample.val_loss));
}

TEST_F(StepStoreTest, ARepeatedPointKeepsTheFirstAndTheBoundHolds) {
  ASSERT_TRUE(store_->append_steps({point(id_, 0, 1, 9.0)}, 100).ok());
  ASSERT_TRUE(store_->append_steps({point(id_, 0, 1, 1.0)}, 100).ok());
  EXPECT_DOUBLE_EQ(store_->steps_for_job(id_)->at(0).sample.loss, 9.0);
  for (int batch = 0; batch < 10; ++batch) {
    std::vector<StepPoint> points;
    for (int s = 0; s < 50; ++s)
      points.push_back(point(id_, 0, 2 + batch * 50 + s));
    ASSERT_TRUE(store_->append_steps(points, 100).ok());
    EXPECT_LE(*store_->count_steps(), 100);
  }
  Result<std::vector<StepPoint>> got = store_->steps_for_job(id_);
  EXPECT_EQ(got->back().sample.step, 501) << "the newest point stays";
  EXPECT_GE(got->size(), 25u);  // thinned to half the bound at most, never to nothing
  ASSERT_TRUE(store_->delete_steps(id_).ok());
  EXPECT_EQ(*store_->count_steps(), 0);
}

TEST_F(StepStoreTest, APointOfAnUnknownJobIsRefusedAndNothingIsAdded) {
  Status s = store_->append_steps({point(id_, 0, 1), point("j-999999", 0, 1)}, 100);
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  EXPECT_NE(s.message().find("j-999999"), std::string::npos) << s.message();
  EXPECT_EQ(*store_->count_steps(), 0);
}

}  // namespace
}  // namespace kiln::sched
