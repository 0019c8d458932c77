// The agent protocol's JSON: what one side writes the other reads back, and what a hostile or
// broken peer sends is refused with the field named, within bounds.
#include <kiln/sched/api.h>

#include <gtest/gtest.h>

namespace kiln::sched {
namespace {

TEST(ApiJsonTest, AReportRoundTrips) {
  AgentReport r;
  r.node = "local-1";
  r.labels = {{"rack", "r0"}};
  r.slots = 2;
  r.cpus = 8;
  RankReport rank;
  rank.job_id = "j-000001";
  rank.attempt = 3;
  rank.rank = 1;
  rank.pid = 42;
  rank.running = false;
  rank.exited = false;
  rank.code = 9;
  rank.culprit_rank = 0;
  rank.proc_state = 'T';
  rank.describe = "rank 1 (pid 42) was killed by signal 9 (SIGKILL)";
  r.ranks.push_back(rank);
  Result<AgentReport> back = agent_report_from_json(to_json(r));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->node, "local-1");
  EXPECT_EQ(back->labels, r.labels);
  ASSERT_EQ(back->ranks.size(), 1u);
  EXPECT_EQ(back->ranks[0].attempt, 3);
  EXPECT_EQ(back->ranks[0].code, 9);
  EXPECT_EQ(back->ranks[0].proc_state, 'T');
  EXPECT_EQ(back->ranks[0].culprit_rank, 0);
  EXPECT_EQ(back->ranks[0].describe, rank.describe);
}

TEST(ApiJsonTest, AnAnswerRoundTrips) {
  AgentAnswer a;
  a.heartbeat_interval_ms = 250;
  RankAssignment r;
  r.job_id = "j-000002";
  r.rank = 1;
  r.argv = {"/opt/kiln", "train", "c.yaml"};
  r.env = {{"KILN_RANK", "1"}};
  r.stop = true;
  r.grace_ms = 2000;
  r.user = "alice";
  r.checkpoint_dir = "/ckpt";
  a.ranks.push_back(r);
  Result<AgentAnswer> back = agent_answer_from_json(to_json(a));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->heartbeat_interval_ms, 250);
  ASSERT_EQ(back->ranks.size(), 1u);
  EXPECT_EQ(back->ranks[0].argv, r.argv);
  EXPECT_EQ(back->ranks[0].env, r.env);
  EXPECT_TRUE(back->ranks[0].stop);
  EXPECT_EQ(back->ranks[0].user, "alice");
  EXPECT_EQ(back->ranks[0].checkpoint_dir, "/ckpt");
}

TEST(ApiJsonTest, BrokenReportsAreRefusedNamingTheField) {
  using json = nlohmann::json;
  Result<AgentReport> r = agent_report_from_json(json{{"slots", 1}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'node'"), std::string::npos);
  r = agent_report_from_json(json{{"node", 7}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("wrong type"), std::string::npos);
  r = agent_report_from_json(json{{"node", std::string(200, 'n')}});
  EXPECT_FALSE(r.ok());
  r = agent_report_from_json(json{{"node", "n"}, {"ranks", "x"}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'ranks'"), std::string::npos);
  r = agent_report_from_json(json{{"node", "n"}, {"ranks", json::array({json{{"job", "j"}}})}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'attempt'"), std::string::npos);
  // More ranks than a node runs is refused, not held.
  json many = json::array();
  for (int i = 0; i < 4097; ++i)
    many.push_back(json{{"job", "j"}, {"attempt", 0}, {"rank", i}});
  r = agent_report_from_json(json{{"node", "n"}, {"ranks", many}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("more than 4096"), std::string::npos);
  // Free text is cut, not kept whole.
  r = agent_report_from_json(json{
      {"node", "n"},
      {"ranks",
       json::array({json{
           {"job", "j"}, {"attempt", 0}, {"rank", 0}, {"describe", std::string(100000, 'x')}}})}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->ranks[0].describe.size(), 4096u);
}

TEST(ApiJsonTest, AFaultEventShowsCauseRankAndNodeBesideItsType) {
  EventRecord e;
  e.seq = 5;
  e.ts_ns = 1'700'000'000'000'000'000;
  e.job_id = "j-000001";
  e.type = "fault";
  e.attempt = 2;
  e.detail = {{"cause", "rank_exit"}, {"rank", 1}, {"node", "local-1"}, {"type", "shadowed"}};
  nlohmann::json j = event_json(e);
  EXPECT_EQ(j["type"], "fault");  // a detail never overrides the event's own fields
  EXPECT_EQ(j["cause"], "rank_exit");
  EXPECT_EQ(j["rank"], 1);
  EXPECT_EQ(j["node"], "local-1");
  EXPECT_EQ(j["attempt"], 2);
  EXPECT_EQ(j["ts"], "2023-11-14T22:13:20.000000Z");
}

}  // namespace
}  // namespace kiln::sched
