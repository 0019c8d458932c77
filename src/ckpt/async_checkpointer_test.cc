// The asynchronous checkpointer. No test asserts a duration: the writer is held on its test hook
// (a Gate) to make "save() returned while the write was still pending" a fact, not a timing.
#include <kiln/ckpt/async_checkpointer.h>

#include <kiln/ckpt/catalog.h>
#include <kiln/obs/metrics.h>

#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/testing/temp_path.h"
#include "ckpt/testing/ckpt_testing.h"

namespace kiln::ckpt {
namespace {

using ::testing::ElementsAre;
using testing::Gate;
using ::testing::HasSubstr;
using testing::State;

constexpr int64_t kTestTimeoutMs = 30'000;  // generous: only a broken test waits this long
// How long the stall test keeps the writer held after save() is seen blocked: long enough to
// dwarf clock resolution and scheduling noise in the lower bound it checks.
constexpr int kHoldMs = 50;

// The value of the sample `name{...}` whose labels include every one of `labels`, or -1.
double sample(const obs::MetricsRegistry& registry, const std::string& name,
              const std::vector<std::string>& labels) {
  std::istringstream text(registry.expose_text());
  std::string line;
  while (std::getline(text, line)) {
    if (!line.starts_with(name + "{")) continue;
    bool all = true;
    for (const std::string& label : labels)
      all &= line.find(label) != std::string::npos;
    if (all) return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

AsyncCheckpointerOptions options_for(const std::string& dir, obs::MetricsRegistry* registry,
                                     Gate* gate = nullptr) {
  AsyncCheckpointerOptions o;
  o.dir = dir;
  o.metrics = registry;
  o.wait_timeout_ms = kTestTimeoutMs;
  if (gate != nullptr) o.before_write = [gate](int64_t) { gate->wait(); };
  return o;
}

SaveRequest request_for(int64_t step, const std::vector<TensorRef>& refs,
                        const std::string& metadata = "{}") {
  SaveRequest r;
  r.step = step;
  r.tensors = refs;
  r.manifest_metadata_json = metadata;
  return r;
}

TEST(AsyncCheckpointerTest, SaveReturnsAfterTheCopyWhileTheWriteIsStillPending) {
  const std::string dir = kiln::testing::unique_temp_dir("ckpt");
  obs::MetricsRegistry registry;
  Gate gate;
  auto ckpt = AsyncCheckpointer::create(options_for(dir, &registry, &gate));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();

  State state(3);
  const std::vector<TensorRef> refs = state.refs();
  Result<SaveTicket> ticket = (*ckpt)->save(request_for(10, refs, R"({"loader":[1,2]})"));
  ASSERT_TRUE(ticket.ok()) << ticket.status().to_string();
  EXPECT_EQ(ticket->outcome, SaveOutcome::kStarted);
  // Nothing was in flight, so nothing was waited for: the stall is the copy alone.
  EXPECT_EQ(ticket->wait_seconds, 0);

  // save() has returned, and the writer has not written a byte: it is held at the gate.
  ASSERT_TRUE(gate.wait_arrived(1));
  EXPECT_TRUE((*ckpt)->in_flight());
  EXPECT_FALSE(std::filesystem::exists(dir + "/step_000000010"));
  EXPECT_EQ(sample(registry, "kiln_ckpt_in_flight", {}), 1);
  EXPECT_EQ(sample(registry, "kiln_ckpt_stall_seconds_count", {}), 1);
  EXPECT_EQ(sample(registry, "kiln_ckpt_write_seconds_count", {}), 0);

  // Training goes on and changes the state; the checkpoint must hold the state as it was.
  const State original(3);
  state.weights[0] = -1.0f;
  state.counter[1] = 12345;

  gate.open();
  ASSERT_TRUE((*ckpt)->wait_idle(Deadline::after_ms(kTestTimeoutMs)).ok());
  std::vector<CompletedSave> done = (*ckpt)->take_completed();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].status.ok()) << done[0].status.to_string();
  EXPECT_TRUE(done[0].committed);
  EXPECT_EQ(done[0].step, 10);
  EXPECT_TRUE((*ckpt)->take_completed().empty());

  Result<Manifest> manifest = read_manifest(dir + "/step_000000010");
  ASSERT_TRUE(manifest.ok()) << manifest.status().to_string();
  EXPECT_EQ(manifest->metadata_json, R"({"loader":[1,2]})");
  EXPECT_EQ(manifest->files[0], done[0].record);
  Result<SafetensorsFile> shard = load_shard(dir + "/step_000000010", *manifest, 0);
  ASSERT_TRUE(shard.ok()) << shard.status().to_string();
  float w0;
  std::memcpy(&w0, shard->get("weights")->bytes.data(), sizeof(w0));
  EXPECT_EQ(w0, original.weights[0]);
  int64_t counter[2];
  std::memcpy(counter, shard->get("counter")->bytes.data(), sizeof(counter));
  EXPECT_EQ(counter[1], original.counter[1]);

  EXPECT_EQ(sample(registry, "kiln_ckpt_save_requests_total", {"outcome=\"started\""}), 1);
  EXPECT_EQ(sample(registry, "kiln_ckpt_bytes_written_total", {}),
            static_cast<double>(done[0].record.size_bytes));
  EXPECT_EQ(sample(registry, "kiln_ckpt_last_durable_step", {}), 10);
  EXPECT_EQ(sample(registry, "kiln_ckpt_in_flight", {}), 0);
}

TEST(AsyncCheckpointerTest, SkipPolicyDropsARequestWhileOneIsInFlightAndCountsIt) {
  const std::string dir = kiln::testing::unique_temp_dir("ckpt");
  obs::MetricsRegistry registry;
  Gate gate;
  AsyncCheckpointerOptions o = options_for(dir, &registry, &gate);
  o.policy = OverlapPolicy::kSkip;
  auto ckpt = AsyncCheckpointer::create(o);
  ASSERT_TRUE(ckpt.ok());
  const State state(1);
  const std::vector<TensorRef> refs = state.refs();

  ASSERT_EQ((*ckpt)->save(request_for(1, refs))->outcome, SaveOutcome::kStarted);
  ASSERT_TRUE(gate.wait_arrived(1));
  Result<SaveTicket> second = (*ckpt)->save(request_for(2, refs));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->outcome, SaveOutcome::kSkipped);
  EXPECT_EQ(second->copy_seconds, 0);
  EXPECT_EQ(sample(registry, "kiln_ckpt_save_requests_total", {"outcome=\"skipped\""}), 1);
  EXPECT_EQ(sample(registry, "kiln_ckpt_save_requests_total", {"outcome=\"started\""}), 1);

  gate.open();
  ASSERT_TRUE((*ckpt)->wait_idle(Deadline::after_ms(kTestTimeoutMs)).ok());
  Result<std::vector<CheckpointInfo>> listed = list_checkpoints(dir);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].step, 1);
  // Once idle, the next request is taken again.
  EXPECT_EQ((*ckpt)->save(request_for(3, refs))->outcome, SaveOutcome::kStarted);
}

TEST(AsyncCheckpointerTest, WaitPolicyBlocksUntilTheWriteIsDoneAndCountsIt) {
  const std::string dir = kiln::testing::unique_temp_dir("ckpt");
  obs::MetricsRegistry registry;
  Gate gate;
  auto ckpt = AsyncCheckpointer::create(options_for(dir, &registry, &gate));
  ASSERT_TRUE(ckpt.ok());
  const State state(1);
  const std::vector<TensorRef> refs = state.refs();

  Result<SaveTicket> first = (*ckpt)->save(request_for(1, refs));
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  ASSERT_EQ(first->outcome, SaveOutcome::kStarted);
  ASSERT_TRUE(gate.wait_arrived(1));
  Result<SaveTicket> second = Status::aborted("not run");
  double second_call_seconds = 0;  // the whole save() call, timed from outside
  std::thread trainer([&] {
    const Stopwatch call;
    second = (*ckpt)->save(request_for(2, refs));
    second_call_seconds = call.elapsed_seconds();
  });
  // The second save() is blocked on the writer, which is blocked on the gate.
  for (int i = 0; i < 3000 && (*ckpt)->waiters() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ((*ckpt)->waiters(), 1);
  EXPECT_FALSE(std::filesystem::exists(dir + "/step_000000001/manifest.json"));
  // Hold the writer a known while longer: the stall save() reports must include it. This is a
  // lower bound that sleeping guarantees, not a timing expectation.
  const Stopwatch held;
  std::this_thread::sleep_for(std::chrono::milliseconds(kHoldMs));
  const double held_seconds = held.elapsed_seconds();
  gate.open();
  trainer.join();
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_EQ(second->outcome, SaveOutcome::kWaited);
  EXPECT_GE(second->wait_seconds, held_seconds);
  EXPECT_GE(second->stall_seconds(), second->wait_seconds + second->copy_seconds);
  EXPECT_LE(second->stall_seconds(), second_call_seconds);
  // The histogram holds what the two calls reported: the measured wait, not a constant.
  const double stall_sum = sample(registry, "kiln_ckpt_stall_seconds_sum", {});
  EXPECT_GE(stall_sum, held_seconds);
  const double reported = first->stall_seconds() + second->stall_seconds();
  EXPECT_NEAR(stall_sum, reported, 1e-6 * reported);  // the exposition prints a rounded double
  ASSERT_TRUE((*ckpt)->wait_idle(Deadline::after_ms(kTestTimeoutMs)).ok());

  std::vector<CompletedSave> done = (*ckpt)->take_completed();
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].step, 1);
  EXPECT_EQ(done[1].step, 2);
  EXPECT_EQ(sample(registry, "kiln_ckpt_save_requests_total", {"outcome=\"waited\""}), 1);
  EXPECT_EQ(sample(registry, "kiln_ckpt_save_requests_total", {"outcome=\"started\""}), 1);
  EXPECT_EQ(sample(registry, "kiln_ckpt_stall_seconds_count", {}), 2);
}

TEST(AsyncCheckpointerTest, WaitPolicyGivesUpAfterItsTimeout) {
  const std::string dir = kiln::testing::unique_temp_dir("ckpt");
  obs::MetricsRegistry registry;
  Gate gate;
  AsyncCheckpointerOptions o = options_for(dir, &registry, &gate);
  o.wait_timeout_ms = 20;
  auto ckpt = AsyncCheckpointer::create(o);
  ASSERT_TRUE(ckpt.ok());
  const State state(1);
  const std::vector<TensorRef> refs = state.refs();
  ASSERT_TRUE((*ckpt)->save(request_for(1, refs)).ok());
  ASSERT_TRUE(gate.wait_arrived(1));
  Result<SaveTicket> second = (*ckpt)->save(request_for(2, refs));
  EXPECT_TRUE(second.status().is_timeout()) << second.status().to_string();
  EXPECT_THAT(second.status().message(), HasSubstr("step 1"));
  EXPECT_EQ(sample(registry, "kiln_ckpt_save_requests_total", {"outcome=\"timed_out\""}), 1);
  EXPECT_TRUE((*ckpt)->wait_idle(Deadline::after_ms(1)).is_timeout());
  gate.open();
  ASSERT_TRUE((*ckpt)->wait_idle(Deadline::after_ms(kTestTimeoutMs)).ok());
}

TEST(AsyncCheckpointerTest, AFailedWriteIsReportedCountedAndLeavesNoCheckpoint) {
  const std::string base = kiln::testing::unique_temp_dir("ckpt");
  testing::write_file(base + "/not-a-dir", "x");
  obs::MetricsRegistry registry;
  auto ckpt = AsyncCheckpointer::create(options_for(base + "/not-a-dir/run", &registry));
  ASSERT_TRUE(ckpt.ok());
  const State state(1);
  const std::vector<TensorRef> refs = state.refs();
  ASSERT_TRUE((*ckpt)->save(request_for(4, refs)).ok());
  ASSERT_TRUE((*ckpt)->wait_idle(Deadline::after_ms(kTestTimeoutMs)).ok());
  std::vector<CompletedSave> done = (*ckpt)->take_completed();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_FALSE(done[0].status.ok());
  EXPECT_THAT(done[0].status.message(), HasSubstr("checkpoint step=4"));
  EXPECT_THAT(done[0].status.message(), HasSubstr("not-a-dir"));
  EXPECT_FALSE(done[0].committed);
  EXPECT_EQ(sample(registry, "kiln_ckpt_write_failures_total", {}), 1);
  EXPECT_EQ(sample(registry, "kiln_ckpt_last_durable_step", {}), -1);
}

TEST(AsyncCheckpointerTest, RetentionKeepsTheNewestCheckpoints) {
  const std::string dir = kiln::testing::unique_temp_dir("ckpt");
  AsyncCheckpointerOptions o = options_for(dir, nullptr);
  o.keep_last = 2;
  auto ckpt = AsyncCheckpointer::create(o);
  ASSERT_TRUE(ckpt.ok());
  for (int64_t step = 1; step <= 5; ++step) {
    const State state(static_cast<int>(step));
    const std::vector<TensorRef> refs = state.refs();
    ASSERT_TRUE((*ckpt)->save(request_for(step * 10, refs)).ok());
  }
  ASSERT_TRUE((*ckpt)->wait_idle(Deadline::after_ms(kTestTimeoutMs)).ok());
  Result<std::vector<CheckpointInfo>> listed = list_checkpoints(dir);
  ASSERT_TRUE(listed.ok());
  std::vector<int64_t> steps;
  for (const CheckpointInfo& info : *listed)
    steps.push_back(info.step);
  EXPECT_THAT(steps, ElementsAre(40, 50));
}

// Two ranks in one process; gather() goes through a mailbox, as a trainer's would go through the
// rendezvous store.
TEST(AsyncCheckpointerTest, TwoRanksCommitOneManifestAfterBothShardsAreDurable) {
  const std::string dir = kiln::testing::unique_temp_dir("ckpt");
  std::mutex mu;
  std::condition_variable cv;
  std::map<int64_t, FileRecord> from_rank1;
  auto make = [&](int rank) {
    AsyncCheckpointerOptions o = options_for(dir, nullptr);
    o.rank = rank;
    o.world = 2;
    o.gather = [&, rank](int64_t step, const FileRecord& mine) -> Result<std::vector<FileRecord>> {
      std::unique_lock<std::mutex> lock(mu);
      if (rank == 1) {
        from_rank1[step] = mine;
        cv.notify_all();
        return std::vector<FileRecord>{};
      }
      if (!cv.wait_for(lock, std::chrono::milliseconds(kTestTimeoutMs),
                       [&] { return from_rank1.count(step) > 0; })) {
        return Status::timeout("rank 1's record never came");
      }
      return std::vector<FileRecord>{mine, from_rank1[step]};
    };
    return AsyncCheckpointer::create(o);
  };
  auto rank0 = make(0);
  auto rank1 = make(1);
  ASSERT_TRUE(rank0.ok() && rank1.ok());
  const State s0(0), s1(1);
  const std::vector<TensorRef> refs0 = s0.refs(), refs1 = s1.refs();
  ASSERT_TRUE((*rank0)->save(request_for(20, refs0, R"({"world_size":2})")).ok());
  ASSERT_TRUE((*rank1)->save(request_for(20, refs1)).ok());
  ASSERT_TRUE((*rank0)->wait_idle(Deadline::after_ms(kTestTimeoutMs)).ok());
  ASSERT_TRUE((*rank1)->wait_idle(Deadline::after_ms(kTestTimeoutMs)).ok());
  EXPECT_TRUE((*rank0)->take_completed()[0].committed);
  EXPECT_FALSE((*rank1)->take_completed()[0].committed);
  Result<Manifest> manifest = read_manifest(dir + "/step_000000020");
  ASSERT_TRUE(manifest.ok()) << manifest.status().to_string();
  EXPECT_EQ(manifest->world, 2);
  EXPECT_EQ(manifest->metadata_json, R"({"world_size":2})");
  EXPECT_TRUE(verify_checkpoint(dir + "/step_000000020").ok());
}

TEST(AsyncCheckpointerTest, CreateRefusesInconsistentOptions) {
  AsyncCheckpointerOptions o;
  o.dir = "/tmp/unused";
  o.world = 2;
  EXPECT_TRUE(AsyncCheckpointer::create(o).status().is_invalid_argument());  // no gather
  o.world = 1;
  o.rank = 1;
  EXPECT_TRUE(AsyncCheckpointer::create(o).status().is_invalid_argument());
  o.rank = 0;
  o.keep_last = -1;
  EXPECT_TRUE(AsyncCheckpointer::create(o).status().is_invalid_argument());
  o.keep_last = 1;
  o.write.chunk_bytes = 1;
  EXPECT_TRUE(AsyncCheckpointer::create(o).status().is_invalid_argument());
  o.write.chunk_bytes = kWriteChunkBytesDefault;
  o.dir = "";
  EXPECT_TRUE(AsyncCheckpointer::create(o).status().is_invalid_argument());
}

TEST(AsyncCheckpointerTest, StagingIsAllocatedUpFrontWhenTheSizeIsKnown) {
  const std::string dir = kiln::testing::unique_temp_dir("ckpt");
  AsyncCheckpointerOptions o = options_for(dir, nullptr);
  o.staging_bytes = 1 << 20;
  auto ckpt = AsyncCheckpointer::create(o);
  ASSERT_TRUE(ckpt.ok());
  EXPECT_GE((*ckpt)->staging_bytes(), size_t{1} << 20);
  const State state(1);
  const std::vector<TensorRef> refs = state.refs();
  ASSERT_TRUE((*ckpt)->save(request_for(1, refs)).ok());
  EXPECT_GE((*ckpt)->staging_bytes(), size_t{1} << 20);  // big enough: not reallocated smaller
  EXPECT_TRUE((*ckpt)->save(request_for(2, {}, "not json")).status().is_invalid_argument());
}

}  // namespace
}  // namespace kiln::ckpt
