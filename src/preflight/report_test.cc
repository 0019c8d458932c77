// One preflight over several nodes: verdicts, and a node without facts kept out of the majority.
#include <kiln/preflight/report.h>

#include <gtest/gtest.h>

namespace kiln::preflight {
namespace {

nlohmann::json facts(const std::string& build_id, int64_t nofile) {
  return {{"schema", "kiln.facts/1"},
          {"kiln", {{"build_id", build_id}}},
          {"memory", {{"available_bytes", int64_t{4} << 30}}},
          {"kernel_params", {{"shm_free_bytes", int64_t{1} << 30}, {"open_files_soft", nofile}}}};
}

NodeFacts node(const std::string& name, std::optional<nlohmann::json> f) {
  NodeFacts n;
  n.node = name;
  n.facts = std::move(f);
  if (!n.facts) n.error = "connection refused";
  return n;
}

TEST(ReportTest, EachNodeGetsAVerdictAndTheUnreachableTakeNoPartInTheMajority) {
  // Without n4 (unreachable) the majority is b1 (n1, n2 against n3); had n4's absence counted,
  // no value would hold a strict majority of four.
  const PreflightReport r =
      check_nodes({node("n1", facts("b1", 65536)), node("n2", facts("b1", 1024)),
                   node("n3", facts("b2", 65536)), node("n4", std::nullopt)},
                  nullptr, HealthThresholds{});
  ASSERT_EQ(r.nodes.size(), 4u);
  EXPECT_EQ(r.nodes[0].verdict, "pass");
  EXPECT_EQ(r.nodes[1].verdict, "fail");  // health: open files
  EXPECT_EQ(r.nodes[2].verdict, "fail");  // stack: build id
  EXPECT_EQ(r.nodes[3].verdict, "unreachable");
  EXPECT_EQ(r.nodes[3].error, "connection refused");
  ASSERT_EQ(r.findings.size(), 2u);
  EXPECT_EQ(r.findings[0].node, "n3");
  EXPECT_EQ(r.findings[0].against, "majority");
  EXPECT_EQ(r.findings[1].node, "n2");
  EXPECT_EQ(r.findings[1].check, "health");

  const nlohmann::json j = report_json(r);
  EXPECT_EQ(j["findings"][0]["path"], "kiln.build_id");
  EXPECT_EQ(j["nodes"][3]["verdict"], "unreachable");
  EXPECT_EQ(j["nodes"][3]["error"], "connection refused");
  EXPECT_FALSE(j["nodes"][0].contains("error"));
}

}  // namespace
}  // namespace kiln::preflight
