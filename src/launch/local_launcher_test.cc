// LocalJob with /bin/sh as the ranks: the environment each gets, how exits are classified, and
// signals forwarded while waiting.
#include <kiln/launch/local_launcher.h>

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>

#include <fstream>
#include <sstream>

#include "base/testing/temp_path.h"

namespace kiln::launch {
namespace {

constexpr int64_t kWaitMs = 30'000;  // every job here ends in well under a second

LaunchOptions shell_job(int world, const std::string& script) {
  LaunchOptions o;
  o.world_size = world;
  o.argv = {"/bin/sh", "-c", script};
  o.grace_ms = 2'000;
  return o;
}

Logger quiet_log() {
  return Logger();
}  // drops everything

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(LocalJobTest, EachRankGetsTheContract) {
  const std::string dir = kiln::testing::unique_temp_dir("env");
  LaunchOptions o =
      shell_job(2,
                "echo \"$KILN_RANK $KILN_WORLD_SIZE $KILN_LOCAL_RANK $KILN_JOB_ID $KILN_ATTEMPT "
                "$KILN_STORE_ADDR\" > " +
                    dir + "/$KILN_RANK");
  o.job_id = "job-7";
  o.attempt = 3;
  Result<std::unique_ptr<LocalJob>> job = LocalJob::start(o, quiet_log());
  ASSERT_TRUE(job.ok()) << job.status().to_string();
  Result<JobResult> result = (*job)->wait(kWaitMs);
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  EXPECT_TRUE(result->ok());
  EXPECT_FALSE(result->stopped());
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(read_file(dir + "/" + std::to_string(r)), std::to_string(r) + " 2 " +
                                                            std::to_string(r) + " job-7 3 " +
                                                            (*job)->store_address() + "\n");
  }
}

TEST(LocalJobTest, MakesUpAJobIdAndChecksTheOneGiven) {
  Result<std::unique_ptr<LocalJob>> job = LocalJob::start(shell_job(1, "exit 0"), quiet_log());
  ASSERT_TRUE(job.ok()) << job.status().to_string();
  EXPECT_EQ((*job)->job().id.rfind("local-" + std::to_string(getpid()) + "-", 0), 0u)
      << (*job)->job().id;
  EXPECT_EQ((*job)->job().attempt, 0);
  ASSERT_TRUE((*job)->wait(kWaitMs).ok());

  LaunchOptions bad = shell_job(1, "exit 0");
  bad.job_id = "a/b";
  EXPECT_TRUE(LocalJob::start(bad, quiet_log()).status().is_invalid_argument());
  bad.job_id = "";
  bad.attempt = -1;
  EXPECT_TRUE(LocalJob::start(bad, quiet_log()).status().is_invalid_argument());
}

TEST(LocalJobTest, RanksThatAllStopMakeAStoppedJob) {
  Result<std::unique_ptr<LocalJob>> job =
      LocalJob::start(shell_job(2, "exit " + std::to_string(kExitStoppedResumable)), quiet_log());
  ASSERT_TRUE(job.ok()) << job.status().to_string();
  Result<JobResult> result = (*job)->wait(kWaitMs);
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  EXPECT_TRUE(result->ok());
  EXPECT_TRUE(result->stopped());
  for (const RankExit& e : result->ranks) {
    EXPECT_TRUE(e.stopped()) << e.describe();
    EXPECT_FALSE(e.killed_by_launcher);
  }
}

TEST(LocalJobTest, AnExitOtherThanStoppedIsAFailure) {
  Result<std::unique_ptr<LocalJob>> job =
      LocalJob::start(shell_job(2, "exit $((KILN_RANK + 3))"), quiet_log());
  ASSERT_TRUE(job.ok()) << job.status().to_string();
  Result<JobResult> result = (*job)->wait(kWaitMs);
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  EXPECT_FALSE(result->ok());
  EXPECT_FALSE(result->stopped());
}

TEST(LocalJobTest, ForwardsSignalsToRanksThatStartUnblocked) {
  // The launcher's thread blocks SIGTERM, as kiln's CLI does; the ranks must still receive it.
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &term, &old);
  const std::string dir = kiln::testing::unique_temp_dir("signal");
  // Each rank says it is ready, then waits for SIGTERM and exits "stopped".
  LaunchOptions o =
      shell_job(2, "trap 'exit " + std::to_string(kExitStoppedResumable) + "' TERM; touch " + dir +
                       "/$KILN_RANK; while :; do sleep 0.05; done");
  Result<std::unique_ptr<LocalJob>> job = LocalJob::start(o, quiet_log());
  ASSERT_TRUE(job.ok()) << job.status().to_string();
  int forwarded = 0;
  Result<JobResult> result = (*job)->wait(kWaitMs, [&] {
    const bool ready = std::ifstream(dir + "/0").good() && std::ifstream(dir + "/1").good();
    if (!ready || forwarded > 0) return 0;
    ++forwarded;
    return SIGTERM;
  });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  EXPECT_EQ(forwarded, 1);
  EXPECT_TRUE(result->stopped()) << result->ranks[0].describe() << "; "
                                 << result->ranks[1].describe();
}

TEST(LocalJobTest, ARankThatDoesNotStopWithTheOthersFails) {
  LaunchOptions o = shell_job(2, "if [ $KILN_RANK = 0 ]; then exit " +
                                     std::to_string(kExitStoppedResumable) + "; fi; exec sleep 30");
  o.grace_ms = 200;
  Result<std::unique_ptr<LocalJob>> job = LocalJob::start(o, quiet_log());
  ASSERT_TRUE(job.ok()) << job.status().to_string();
  Result<JobResult> result = (*job)->wait(kWaitMs);
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  EXPECT_FALSE(result->ok());
  EXPECT_FALSE(result->stopped());
  EXPECT_EQ(result->first_failed, 1);
  EXPECT_TRUE(result->ranks[1].killed_by_launcher) << result->ranks[1].describe();
  EXPECT_TRUE(result->ranks[0].stopped());
}

}  // namespace
}  // namespace kiln::launch

namespace kiln::launch {
namespace {

// What the kernel says a rank may run on, from its first instruction (the shell's own status).
TEST(LocalJobPlacementTest, EachRankRunsOnThePlannedCpusFromTheStart) {
  Result<CpuSet> mine = CpuSet::of_this_thread();
  ASSERT_TRUE(mine.ok());
  Result<CpuTopology> topology = this_machine_topology();
  ASSERT_TRUE(topology.ok());
  const std::string dir = kiln::testing::unique_temp_dir("bind");
  // One more rank than cores: two share a core, and each has one whole core.
  const int world = static_cast<int>(topology->cores.size()) + 1;
  LaunchOptions o = shell_job(world,
                              "echo \"$(grep Cpus_allowed_list /proc/self/status | cut -f2) "
                              "$KILN_CPUS\" > " +
                                  dir + "/$KILN_RANK");
  Result<std::unique_ptr<LocalJob>> job = LocalJob::start(o, quiet_log());
  ASSERT_TRUE(job.ok()) << job.status().to_string();
  Result<JobResult> result = (*job)->wait(kWaitMs);
  ASSERT_TRUE(result.ok() && result->ok());
  const Placement& placement = (*job)->placement();
  ASSERT_EQ(placement.rank_cpus.size(), static_cast<size_t>(world));
  EXPECT_EQ(placement.ranks_per_cpu_max, 2);
  for (int r = 0; r < world; ++r) {
    const std::string cpus = placement.rank_cpus[static_cast<size_t>(r)].to_string();
    EXPECT_EQ(
        placement.rank_cpus[static_cast<size_t>(r)].size(),
        topology
            ->cores[static_cast<size_t>(r) * topology->cores.size() / static_cast<size_t>(world)]
            .cpus.size())
        << r;
    EXPECT_EQ(read_file(dir + "/" + std::to_string(r)), cpus + " " + cpus + "\n") << "rank " << r;
  }
  Result<CpuSet> after = CpuSet::of_this_thread();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, *mine) << "the launcher's own binding was not restored";
}

TEST(LocalJobPlacementTest, NoneLeavesRanksOnEveryCpuTheLauncherHas) {
  Result<CpuSet> mine = CpuSet::of_this_thread();
  ASSERT_TRUE(mine.ok());
  const std::string dir = kiln::testing::unique_temp_dir("nobind");
  LaunchOptions o = shell_job(2,
                              "echo \"$(grep Cpus_allowed_list /proc/self/status | cut -f2) "
                              "${KILN_CPUS:-unset}\" > " +
                                  dir + "/$KILN_RANK");
  o.cpu_bind.mode = CpuBind::Mode::kNone;
  Result<std::unique_ptr<LocalJob>> job = LocalJob::start(o, quiet_log());
  ASSERT_TRUE(job.ok()) << job.status().to_string();
  Result<JobResult> result = (*job)->wait(kWaitMs);
  ASSERT_TRUE(result.ok() && result->ok());
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(read_file(dir + "/" + std::to_string(r)), mine->to_string() + " unset\n");
  }
}

TEST(LocalJobPlacementTest, AListNamingAnUnusableCpuFailsBeforeAnyRankStarts) {
  LaunchOptions o = shell_job(1, "exit 0");
  Result<CpuBind> bind = CpuBind::parse("list:8191");
  ASSERT_TRUE(bind.ok());
  o.cpu_bind = *bind;
  Result<std::unique_ptr<LocalJob>> job = LocalJob::start(o, quiet_log());
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("CPU 8191 (list 0) is not one this process may use"),
            std::string::npos)
      << job.status().message();
}

}  // namespace
}  // namespace kiln::launch
