// Issue 11: comm's tuning comes from measurements of the machine, cached once per boot.
#include <kiln/comm/machine_profile.h>

#include <kiln/base/machine_cache.h>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "comm/transport/wait_policy.h"
#include "comm/tuning.h"

namespace kiln::comm {
namespace {

// Small enough to keep the test quick; still a real measurement.
MeasureOptions quick() {
  MeasureOptions m;
  m.handoff_round_trips = 2'000;
  m.wakeups = 40;  // at least kSamplesMin (10) of each, else the CPUs count as unmeasured
  m.bandwidth_bytes = 1 << 20;
  return m;
}

class ProfileCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kiln-profile-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/sub/machine-profile.json";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  ProfileCacheOptions options() const {
    ProfileCacheOptions o;
    o.path = path_;
    o.measure = quick();
    return o;
  }
  std::string dir_;
  std::string path_;
};

MachineProfile sample() {
  MachineProfile p;
  p.machine = "0b5e9c1e-5d8e-4a77-9a43-6f4f1f0e2c11";
  p.cpu_model = "GenuineIntel family 6 model 207: Intel(R) Xeon(R) Processor";
  p.l2_bytes = 2 << 20;
  p.llc_bytes = 260 << 20;
  p.cpus = {0, 1};
  p.cross_core = true;
  p.handoff_ns = {110.5, 130, 240};
  p.wakeup_ns = {21'000, 28'000, 45'000};
  p.copy_gbps = 11.25;
  p.reduce_gbps = 19.5;
  p.reduce_stream_gbps = 24.25;
  p.measure_ms = 120;
  p.measured_at = "2026-12-02T06:00:00Z";
  return p;
}

TEST(MachineProfileTest, RoundTripsThroughJsonAndNamesABadField) {
  const MachineProfile p = sample();
  Result<MachineProfile> back = machine_profile_from_json(machine_profile_to_json(p), "f.json");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(machine_profile_to_json(*back), machine_profile_to_json(p));
  EXPECT_EQ(back->wakeup_ns.p99, 45'000);
  EXPECT_EQ(back->cpus, (std::vector<int>{0, 1}));

  MachineProfile bad = p;
  bad.version = 7;
  EXPECT_EQ(machine_profile_from_json(machine_profile_to_json(bad), "f.json").status().message(),
            "f.json: field version: 7, this kiln reads 2");
  bad = p;
  bad.wakeup_ns.p90 = 50'000;  // above its p99
  EXPECT_EQ(machine_profile_from_json(machine_profile_to_json(bad), "f.json").status().message(),
            "f.json: field wakeup_ns: percentiles must rise and stay in [0, 1e9] ns");
  bad = p;
  bad.reduce_gbps = 0;
  EXPECT_EQ(machine_profile_from_json(machine_profile_to_json(bad), "f.json").status().message(),
            "f.json: field reduce_gbps: bandwidths must be in (0, 1e4) GB/s");
  const Status missing = machine_profile_from_json(R"({"version": 2})", "f.json").status();
  EXPECT_TRUE(missing.is_invalid_argument());
  EXPECT_NE(missing.message().find("f.json: field machine"), std::string::npos)
      << missing.message();
  EXPECT_TRUE(machine_profile_from_json("[", "f.json").status().is_invalid_argument());
}

TEST(MachineProfileTest, MeasuresThisMachine) {
  Result<MachineProfile> p = measure_machine_profile(quick());
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->machine, this_boot_id());
  EXPECT_FALSE(p->machine.empty());
  EXPECT_NE(p->cpu_model.find(" family "), std::string::npos) << p->cpu_model;
  EXPECT_GT(p->copy_gbps, 0);
  EXPECT_GT(p->reduce_gbps, 0);
  EXPECT_GT(p->reduce_stream_gbps, 0);
  if (std::thread::hardware_concurrency() >= 2) {
    ASSERT_TRUE(p->cross_core);
    EXPECT_EQ(p->cpus.size(), 2u);
    EXPECT_NE(p->cpus[0], p->cpus[1]);
    EXPECT_GT(p->handoff_ns.p50, 0);
    EXPECT_LE(p->handoff_ns.p50, p->handoff_ns.p90);
    EXPECT_LE(p->handoff_ns.p90, p->handoff_ns.p99);
    EXPECT_GT(p->wakeup_ns.p50, 0);
    EXPECT_LE(p->wakeup_ns.p90, p->wakeup_ns.p99);
  }
  // What it writes it reads back.
  EXPECT_TRUE(machine_profile_from_json(machine_profile_to_json(*p), "m").ok());
}

TEST_F(ProfileCacheTest, MeasuresOnceThenReadsTheCache) {
  Result<CachedProfile> first = load_or_measure_machine_profile(options());
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_TRUE(first->measured);
  Result<CachedProfile> second = load_or_measure_machine_profile(options());
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_FALSE(second->measured);
  EXPECT_EQ(machine_profile_to_json(second->profile), machine_profile_to_json(first->profile));
  ProfileCacheOptions again = options();
  again.remeasure = true;
  EXPECT_TRUE(load_or_measure_machine_profile(again)->measured);
}

TEST_F(ProfileCacheTest, AProfileOfAnotherBootOrACorruptFileIsMeasuredOver) {
  ASSERT_TRUE(load_or_measure_machine_profile(options()).ok());
  MachineProfile other = sample();  // another boot id
  std::ofstream(path_) << machine_profile_to_json(other);
  Result<CachedProfile> got = load_or_measure_machine_profile(options());
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_TRUE(got->measured);
  EXPECT_EQ(got->profile.machine, this_boot_id());
  std::ofstream(path_, std::ios::trunc) << "{\"version\": ";
  got = load_or_measure_machine_profile(options());
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_TRUE(got->measured);
}

TEST_F(ProfileCacheTest, ProcessesStartingTogetherMeasureOnce) {
  std::atomic<int> measured{0};
  std::atomic<int> failed{0};
  std::vector<std::thread> starters;
  for (int i = 0; i < 4; ++i) {
    starters.emplace_back([&] {
      Result<CachedProfile> got = load_or_measure_machine_profile(options());
      if (!got.ok()) failed.fetch_add(1);
      if (got.ok() && got->measured) measured.fetch_add(1);
    });
  }
  for (std::thread& t : starters)
    t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(measured.load(), 1);
}

TEST_F(ProfileCacheTest, ALockHeldTooLongIsATimeoutNamingTheLockFile) {
  std::filesystem::create_directories(dir_ + "/sub");
  const int fd = ::open((path_ + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  ProfileCacheOptions o = options();
  o.lock_timeout_ms = 50;
  const Status s = load_or_measure_machine_profile(o).status();
  ::close(fd);
  EXPECT_TRUE(s.is_timeout()) << s.to_string();
  EXPECT_EQ(s.message(), path_ + ".lock: another process held the lock for more than 50 ms");
}

TEST(ProfileTuningTest, TheSpinOutlastsTheMeasuredWakeUpWithinBounds) {
  MachineProfile p = sample();  // p99 wake-up 45 us
  EXPECT_EQ(spin_ns_alone(&p), 90'000);
  p.wakeup_ns = {1'000, 1'000, 1'000};
  EXPECT_EQ(spin_ns_alone(&p), kSpinNsMin);
  p.wakeup_ns = {1e6, 1e7, 1e8};
  EXPECT_EQ(spin_ns_alone(&p), kSpinNsMax);
  p.cross_core = false;  // nothing measured between two CPUs
  EXPECT_EQ(spin_ns_alone(&p), kSpinNsAlone);
  EXPECT_EQ(spin_ns_alone(nullptr), kSpinNsAlone);

  p = sample();
  WaitPolicy alone = choose_wait_policy(1, "3", &p, std::nullopt, std::nullopt);
  EXPECT_EQ(alone.spin_ns, 90'000);
  EXPECT_EQ(alone.why, "alone on CPUs 3; spin 90 us: 2.0 x this machine's p99 wake-up of 45.0 us");
  // Ops that overlap the caller's compute run beside its threads: they keep the short spin.
  EXPECT_EQ(alone.spin_ns_overlapped, kSpinNsAlone);
  p.wakeup_ns = {1e6, 1e7, 1e8};
  EXPECT_EQ(choose_wait_policy(1, "3", &p, std::nullopt, std::nullopt).why,
            "alone on CPUs 3; spin 1000 us: 2.0 x this machine's p99 wake-up of 100000.0 us, "
            "within [5 us, 1 ms]");
  p = sample();
  // Sharing a CPU never spins, whatever the machine; an override still wins.
  EXPECT_EQ(choose_wait_policy(2, "3", &p, std::nullopt, std::nullopt).spin_ns, 0);
  const WaitPolicy forced = choose_wait_policy(1, "3", &p, int64_t{7}, std::nullopt);
  EXPECT_EQ(forced.spin_ns, 7'000);
  EXPECT_EQ(forced.spin_ns_overlapped, 7'000);
}

TEST(ProfileTuningTest, OutputsStreamOnlyWhereStreamingMeasuredFasterAndOnlyLargeOnes) {
  EXPECT_EQ(stream_output_bytes_min(19.5, 24.25, 2 << 20), size_t{8} << 20);  // 4 x L2
  EXPECT_EQ(stream_output_bytes_min(19.5, 20.0, 2 << 20), SIZE_MAX);  // within the 5% margin
  EXPECT_EQ(stream_output_bytes_min(19.5, 24.25, 0), SIZE_MAX);       // no L2 size known
  EXPECT_EQ(stream_output_bytes_min(0, 0, 2 << 20), SIZE_MAX);        // nothing measured
  const MachineProfile p = sample();
  EXPECT_EQ(tuning_choices(&p).stream_out_bytes_min, uint64_t{8} << 20);
  EXPECT_EQ(tuning_choices(nullptr).stream_out_bytes_min, UINT64_MAX);
}

TEST(ProfileTuningTest, TheLinkCostComesFromTheSlowestMachineOfTheGroup) {
  const LinkCost fast = shm_link_cost_from(0.1, 20, 30);
  EXPECT_DOUBLE_EQ(fast.alpha_us, 0.1);
  EXPECT_DOUBLE_EQ(fast.beta_us_per_byte, 1.0 / 20'000);
  EXPECT_DOUBLE_EQ(fast.gamma_us_per_byte, 3.0 / 30'000);
  // Unmeasured figures fall back to the built-in ones.
  const LinkCost unmeasured = shm_link_cost_from(0, 0, 0);
  EXPECT_DOUBLE_EQ(unmeasured.alpha_us, shm_link_cost().alpha_us);
  EXPECT_DOUBLE_EQ(unmeasured.gamma_us_per_byte, shm_link_cost().gamma_us_per_byte);
  const LinkCost slow = shm_link_cost_from(0.5, 5, 40);
  const LinkCost both = slowest_link_cost({fast, slow});
  EXPECT_DOUBLE_EQ(both.alpha_us, 0.5);
  EXPECT_DOUBLE_EQ(both.beta_us_per_byte, 1.0 / 5'000);
  EXPECT_DOUBLE_EQ(both.gamma_us_per_byte, 3.0 / 30'000);
  EXPECT_EQ(slowest_link_cost({slow, fast}).alpha_us, both.alpha_us);  // order does not matter
  // A costlier hand-off keeps recursive doubling (fewer steps) up to larger sizes.
  EXPECT_GT(ring_crossover_bytes(2, shm_link_cost_from(2.0, 10, 30)),
            ring_crossover_bytes(2, shm_link_cost_from(0.1, 10, 30)));
  // n = 2: ring 2a + b(beta + gamma/2), recursive doubling a + b(beta + gamma): the ring wins
  // from b = 2a / gamma. With a = 0.1 us, gamma = 1e-4 us/B: 2000 B, so from 2048 on.
  EXPECT_EQ(ring_crossover_bytes(2, shm_link_cost_from(0.1, 10, 30)), 2048u);
}

}  // namespace
}  // namespace kiln::comm
