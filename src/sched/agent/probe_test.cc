// Probe requests: what an agent accepts (only Kiln's own checks, every field bounded) and the
// command it runs for each.
#include "sched/agent/probe.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace kiln::sched {
namespace {

ProbeRequest links_request() {
  ProbeRequest r;
  r.check = "links";
  r.timeout_ms = 30'000;
  r.rank = 2;
  r.world = 4;
  r.store_address = "10.0.0.254:29500";
  r.store_token = "secret";
  r.run_id = "preflight-links-1";
  r.random_rounds = 1;
  r.seed = 7;
  r.bytes = "4M";
  r.iters = 3;
  return r;
}

TEST(ProbeTest, ALinksRequestRoundTripsAndRunsTheNodesOwnKilnWithTheRankEnvironment) {
  Result<ProbeRequest> back = probe_request_from_json(to_json(links_request()));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  const slurm::CommandSpec spec = probe_command(*back, "/opt/kiln/bin/kiln", "h3", "veth0");
  ASSERT_GE(spec.argv.size(), 2u);
  EXPECT_EQ(spec.argv[0], "/opt/kiln/bin/kiln");
  EXPECT_EQ(spec.argv[1], "link-check");
  // The check's own deadline comes before the agent's kill.
  auto t = std::find(spec.argv.begin(), spec.argv.end(), "--timeout-ms");
  ASSERT_NE(t, spec.argv.end());
  EXPECT_EQ(*(t + 1), "20000");
  auto env = [&](const std::string& name) {
    for (const auto& [k, v] : spec.env)
      if (k == name) return v;
    return std::string("(unset)");
  };
  EXPECT_EQ(env("KILN_RANK"), "2");
  EXPECT_EQ(env("KILN_WORLD_SIZE"), "4");
  EXPECT_EQ(env("KILN_HOST"), "h3");
  EXPECT_EQ(env("KILN_COMM_ADDR"), "veth0");
  EXPECT_EQ(env("KILN_JOB_ID"), "preflight-links-1");
  EXPECT_EQ(spec.timeout_ms, 30'000);
}

TEST(ProbeTest, AnOpsRequestRunsOpsCheckAtTheExpectedIsa) {
  ProbeRequest r;
  r.check = "ops";
  r.timeout_ms = 60'000;
  r.isa = "avx512";
  Result<ProbeRequest> back = probe_request_from_json(to_json(r));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(probe_command(*back, "kiln", "h1", "").argv,
            (std::vector<std::string>{"kiln", "ops-check", "--json", "--isa", "avx512"}));
}

ProbeRequest trial_request() {
  ProbeRequest r;
  r.check = "trial";
  r.timeout_ms = 300'000;
  r.config = "configs/tiny.yaml";
  r.overrides = {"--threads", "1", "--batch", "4"};
  r.steps = 5;
  r.workdir = "/home/alice/run";
  r.user = "alice";
  return r;
}

TEST(ProbeTest, ATrialRunsTheTrainerInTheJobsDirectoryAsItsUser) {
  Result<ProbeRequest> back = probe_request_from_json(to_json(trial_request()));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  const ProbeUser alice{1001, 1002};
  const slurm::CommandSpec spec = probe_command(*back, "/opt/kiln/bin/kiln", "h1", "", &alice);
  EXPECT_EQ(spec.argv, (std::vector<std::string>{"setpriv",
                                                 "--reuid=1001",
                                                 "--regid=1002",
                                                 "--groups=1002",
                                                 "--no-new-privs",
                                                 "--",
                                                 "env",
                                                 "-C",
                                                 "/home/alice/run",
                                                 "--",
                                                 "/opt/kiln/bin/kiln",
                                                 "train",
                                                 "configs/tiny.yaml",
                                                 "--max-steps",
                                                 "5",
                                                 "--val-every",
                                                 "0",
                                                 "--json",
                                                 "--threads",
                                                 "1",
                                                 "--batch",
                                                 "4"}));
  // The directory is entered as the user, never as the agent.
  EXPECT_EQ(spec.cwd, "");
  EXPECT_EQ(spec.timeout_ms, 300'000);
  // Without a user, as the agent's own, in the job's directory.
  const slurm::CommandSpec own = probe_command(*back, "kiln", "h1", "");
  EXPECT_EQ(own.argv[0], "kiln");
  EXPECT_EQ(own.cwd, "/home/alice/run");
}

TEST(ProbeTest, ATrialRequestCarriesNoOtherFlagsOrCommands) {
  auto refused = [](const ProbeRequest& r, const std::string& words) {
    Result<ProbeRequest> back = probe_request_from_json(to_json(r));
    ASSERT_FALSE(back.ok()) << to_json(r).dump();
    EXPECT_NE(back.status().message().find(words), std::string::npos) << back.status().message();
  };
  ProbeRequest r = trial_request();
  r.config = "--export=/etc/passwd";
  refused(r, "is not a config path");
  r = trial_request();
  r.overrides = {"--export", "/tmp/w"};
  refused(r, "does not shape the trial");
  r.overrides = {"--nproc", "8"};
  refused(r, "'--nproc'");
  r.overrides = {"--batch", "--export"};
  refused(r, "the value of --batch is not a plain value");
  r.overrides = {"--batch"};
  refused(r, "flag, value pairs");
  r = trial_request();
  r.workdir = "relative/dir";
  refused(r, "workdir 'relative/dir' is not an absolute directory");
  r = trial_request();
  r.user = "root; rm";
  refused(r, "user 'root; rm'");
  r = trial_request();
  r.steps = 0;
  refused(r, "0 steps is outside");
}

TEST(ProbeTest, BadRequestsAreRefusedNamingTheField) {
  auto refused = [](nlohmann::json j, const std::string& words) {
    Result<ProbeRequest> r = probe_request_from_json(j);
    ASSERT_FALSE(r.ok()) << j.dump();
    EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().message();
  };
  nlohmann::json good = to_json(links_request());
  refused(nlohmann::json::array(), "not a JSON object");
  auto with = [&](const char* key, nlohmann::json value) {
    nlohmann::json j = good;
    j[key] = std::move(value);
    return j;
  };
  refused(with("check", "rm -rf /"), "check 'rm -rf /': links, ops or trial");
  refused(with("timeout_ms", 10'000'000), "timeout_ms 10000000 is outside");
  refused(with("rank", 4), "rank 4 of world 4");
  refused(with("world", 1), "rank 2 of world 1");
  refused(with("run_id", "../other-job"), "run_id");
  refused(with("iters", 0), "probe: iters 0 is outside 1..100");
  refused(with("rank", "two"), "field 'rank' has the wrong type");
  nlohmann::json missing = good;
  missing.erase("store_address");
  refused(missing, "field 'store_address' is missing");
  refused(nlohmann::json{{"check", "ops"}, {"timeout_ms", 1000}, {"isa", "sse2"}},
          "isa 'sse2': scalar, avx2 or avx512");
}

}  // namespace
}  // namespace kiln::sched
