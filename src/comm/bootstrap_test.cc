#include <kiln/comm/bootstrap.h>

#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "base/testing/temp_path.h"

namespace kiln::comm {
namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(BootstrapTest, ReadsKilnVariables) {
  Result<RankEnvironment> e = rank_environment(env_of({{"KILN_RANK", "3"},
                                                       {"KILN_WORLD_SIZE", "8"},
                                                       {"KILN_LOCAL_RANK", "1"},
                                                       {"KILN_STORE_ADDR", "head:29400"},
                                                       {"KILN_JOB_TOKEN", "t0k"},
                                                       {"KILN_HOST", "n7"},
                                                       {"KILN_TOPOLOGY", "rack=r1,switch=s3"}}));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e->rank, 3);
  EXPECT_EQ(e->world_size, 8);
  EXPECT_EQ(e->local_rank, 1);
  EXPECT_EQ(e->node_id, -1);
  EXPECT_EQ(e->store_address, "head:29400");
  EXPECT_EQ(e->job_token, "t0k");
  EXPECT_EQ(e->host, "n7");
  EXPECT_EQ(e->topology.size(), 2u);
  EXPECT_EQ(e->source, "kiln");
}

TEST(BootstrapTest, FallsBackToSlurm) {
  Result<RankEnvironment> e = rank_environment(env_of({{"SLURM_PROCID", "5"},
                                                       {"SLURM_NTASKS", "8"},
                                                       {"SLURM_LOCALID", "1"},
                                                       {"SLURM_NODEID", "2"},
                                                       {"KILN_STORE_ADDR", "head:29400"},
                                                       {"KILN_JOB_TOKEN", "t"}}));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e->rank, 5);
  EXPECT_EQ(e->world_size, 8);
  EXPECT_EQ(e->local_rank, 1);
  EXPECT_EQ(e->node_id, 2);
  EXPECT_EQ(e->source, "slurm");
  EXPECT_EQ(e->host, "");  // no node name: the host name decides
}

// Ranks group by Slurm's node name (several slurmd on one machine are several nodes), unless
// KILN_HOST says otherwise; outside Slurm the name means nothing.
TEST(BootstrapTest, UnderSlurmTheHostIsTheSlurmNode) {
  std::map<std::string, std::string> env = {{"SLURM_PROCID", "0"},
                                            {"SLURM_NTASKS", "2"},
                                            {"SLURMD_NODENAME", "n2"},
                                            {"KILN_STORE_ADDR", "head:29400"},
                                            {"KILN_JOB_TOKEN", "t"}};
  EXPECT_EQ(rank_environment(env_of(env))->host, "n2");
  env["KILN_HOST"] = "mine";
  EXPECT_EQ(rank_environment(env_of(env))->host, "mine");
  env.erase("KILN_HOST");
  env.erase("SLURM_PROCID");
  env["KILN_RANK"] = "0";
  env["KILN_WORLD_SIZE"] = "2";
  EXPECT_EQ(rank_environment(env_of(env))->host, "");
}

TEST(BootstrapTest, ErrorsNameTheVariableAndValue) {
  std::map<std::string, std::string> good = {{"KILN_RANK", "0"},
                                             {"KILN_WORLD_SIZE", "2"},
                                             {"KILN_STORE_ADDR", "h:1"},
                                             {"KILN_JOB_TOKEN", "t"}};
  auto with = [&](const std::string& k, const std::string& v) {
    auto m = good;
    m[k] = v;
    return rank_environment(env_of(m)).status();
  };
  auto without = [&](const std::string& k) {
    auto m = good;
    m.erase(k);
    return rank_environment(env_of(m)).status();
  };
  EXPECT_NE(with("KILN_RANK", "two").message().find("KILN_RANK='two' is not an integer"),
            std::string::npos);
  EXPECT_NE(with("KILN_RANK", "2").message().find("KILN_RANK=2 is out of range [0, 1]"),
            std::string::npos);
  EXPECT_NE(with("KILN_TOPOLOGY", "rack").message().find("KILN_TOPOLOGY"), std::string::npos);
  EXPECT_NE(without("KILN_STORE_ADDR").message().find("KILN_STORE_ADDR is not set"),
            std::string::npos);
  EXPECT_NE(without("KILN_JOB_TOKEN").message().find("KILN_JOB_TOKEN"), std::string::npos);
  EXPECT_TRUE(rank_environment(env_of({})).status().is_not_found());
}

TEST(BootstrapTest, ReadsTheTokenFromAFile) {
  const std::string path = kiln::testing::unique_temp_path("token");
  std::ofstream(path) << "from-file\n";
  Result<RankEnvironment> e = rank_environment(env_of({{"KILN_RANK", "0"},
                                                       {"KILN_WORLD_SIZE", "1"},
                                                       {"KILN_STORE_ADDR", "h:1"},
                                                       {"KILN_JOB_TOKEN_FILE", path}}));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e->job_token, "from-file");
}

}  // namespace
}  // namespace kiln::comm
