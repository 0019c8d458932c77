#include <kiln/launch/rank_env.h>

#include <gtest/gtest.h>

#include <map>

namespace kiln::launch {
namespace {

comm::EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

const std::map<std::string, std::string> kGood = {{"KILN_RANK", "1"},
                                                  {"KILN_WORLD_SIZE", "4"},
                                                  {"KILN_STORE_ADDR", "head:29400"},
                                                  {"KILN_JOB_TOKEN", "t0k"}};

Status parse_with(const std::string& name, const std::string& value) {
  std::map<std::string, std::string> vars = kGood;
  vars[name] = value;
  return rank_env(env_of(vars)).status();
}

TEST(RankEnvTest, WritingAndParsingAgree) {
  RankEnv e;
  e.identity.rank = 3;
  e.identity.world_size = 8;
  e.identity.local_rank = 1;
  e.identity.node_id = 2;
  e.identity.store_address = "head:29400";
  e.identity.job_token = "secret";
  e.identity.host = "n7";
  e.identity.topology = {{"rack", "r1"}, {"switch", "s3"}};
  e.job.id = "job-42.a_b";
  e.job.attempt = 5;
  Result<RankEnv> back = rank_env(env_of(rank_env_vars(e)));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->identity.rank, 3);
  EXPECT_EQ(back->identity.world_size, 8);
  EXPECT_EQ(back->identity.local_rank, 1);
  EXPECT_EQ(back->identity.node_id, 2);
  EXPECT_EQ(back->identity.store_address, "head:29400");
  EXPECT_EQ(back->identity.job_token, "secret");
  EXPECT_EQ(back->identity.host, "n7");
  EXPECT_EQ(back->identity.topology, e.identity.topology);
  EXPECT_EQ(back->identity.source, "kiln");
  EXPECT_EQ(back->job.id, "job-42.a_b");
  EXPECT_EQ(back->job.attempt, 5);
}

TEST(RankEnvTest, OptionalVariablesAreWrittenOnlyWhenSet) {
  RankEnv e;
  e.identity.store_address = "h:1";
  e.identity.job_token = "t";
  const std::map<std::string, std::string> vars = rank_env_vars(e);
  for (const char* name : {"KILN_LOCAL_RANK", "KILN_NODE_ID", "KILN_HOST", "KILN_TOPOLOGY"}) {
    EXPECT_EQ(vars.count(name), 0u) << name;
  }
  Result<RankEnv> back = rank_env(env_of(vars));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->identity.local_rank, -1);
  EXPECT_TRUE(back->identity.host.empty());
}

TEST(RankEnvTest, WithoutAJobARankIsInTheDefaultJobAttemptZero) {
  Result<RankEnv> e = rank_env(env_of(kGood));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e->job.id, "default");
  EXPECT_EQ(e->job.attempt, 0);
  EXPECT_EQ(e->job.store_prefix(), "kiln/job/default/attempt/0");
}

TEST(RankEnvTest, SlurmGivesTheJobAndAttemptWhenKilnDoesNot) {
  std::map<std::string, std::string> vars = kGood;
  vars["SLURM_JOB_ID"] = "123456";
  vars["SLURM_RESTART_COUNT"] = "2";
  Result<RankEnv> e = rank_env(env_of(vars));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e->job.id, "123456");
  EXPECT_EQ(e->job.attempt, 2);
  vars["KILN_JOB_ID"] = "mine";
  vars["KILN_ATTEMPT"] = "0";
  e = rank_env(env_of(vars));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e->job.id, "mine");
  EXPECT_EQ(e->job.attempt, 0);
}

TEST(RankEnvTest, AttemptsOfOneJobHaveDisjointPrefixes) {
  const JobAttempt a0{"j", 0}, a1{"j", 1}, a10{"j", 10}, other{"j2", 0};
  EXPECT_EQ(a0.store_prefix(), "kiln/job/j/attempt/0");
  for (const JobAttempt* x : {&a1, &a10, &other}) {
    // Neither prefix is a prefix of the other once the '/' that follows it in a key is added.
    EXPECT_NE((x->store_prefix() + "/").rfind(a0.store_prefix() + "/", 0), 0u);
    EXPECT_NE((a0.store_prefix() + "/").rfind(x->store_prefix() + "/", 0), 0u);
  }
}

TEST(RankEnvTest, BadJobIdsAndAttemptsNameTheVariable) {
  auto message = [](const Status& s) {
    EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
    return s.message();
  };
  EXPECT_NE(message(parse_with("KILN_JOB_ID", "a/b")).find("KILN_JOB_ID='a/b'"), std::string::npos);
  EXPECT_NE(message(parse_with("KILN_JOB_ID", "")).find("KILN_JOB_ID is empty"), std::string::npos);
  EXPECT_NE(message(parse_with("KILN_JOB_ID", std::string(kJobIdBytesMax + 1, 'x')))
                .find("KILN_JOB_ID is 129 bytes long"),
            std::string::npos);
  EXPECT_TRUE(parse_with("KILN_JOB_ID", std::string(kJobIdBytesMax, 'x')).ok());
  EXPECT_NE(message(parse_with("KILN_ATTEMPT", "one")).find("KILN_ATTEMPT='one' is not an integer"),
            std::string::npos);
  EXPECT_NE(message(parse_with("KILN_ATTEMPT", "2x")).find("KILN_ATTEMPT='2x' is not an integer"),
            std::string::npos);
  EXPECT_NE(message(parse_with("KILN_ATTEMPT", "")).find("KILN_ATTEMPT='' is not an integer"),
            std::string::npos);
  EXPECT_NE(message(parse_with("KILN_ATTEMPT", "-1")).find("KILN_ATTEMPT=-1 is out of range"),
            std::string::npos);
  EXPECT_NE(message(parse_with("KILN_ATTEMPT", "99999999999999999999999"))
                .find("KILN_ATTEMPT=99999999999999999999999 is out of range"),
            std::string::npos);
  EXPECT_NE(message(parse_with("SLURM_RESTART_COUNT", "x")).find("SLURM_RESTART_COUNT"),
            std::string::npos);
  // The identity part is kiln_comm's parse, with its own messages.
  EXPECT_NE(message(parse_with("KILN_RANK", "9")).find("KILN_RANK=9 is out of range"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln::launch
