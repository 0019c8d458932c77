// One preflight over several nodes: verdicts, and a node without facts kept out of the majority.
#include <kiln/preflight/report.h>

#include <gtest/gtest.h>

namespace kiln::preflight {
namespace {

nlohmann::json facts(const std::string& build_id, int64_t nofile) {
  return {{"schema", "kiln.facts/1"},
          {"kiln", {{"build_id", build_id}}},
          {"memory", {{"available_bytes", int64_t{4} << 30}}},
          {"kernel_params", {{"shm_free_bytes", int64_t{1} << 30}, {"open_files_soft", nofile}}},
          {"load", {{"cpus_online", 8}, {"loadavg_1m", 0.1}}}};
}

NodeFacts node(const std::string& name, std::optional<nlohmann::json> f) {
  NodeFacts n;
  n.node = name;
  n.facts = std::move(f);
  if (!n.facts) n.error = "connection refused";
  return n;
}

TEST(ReportTest, ANodeMissingAGpuIsNamedAgainstTheOthers) {
  auto with_gpus = [](int n) {
    nlohmann::json f = facts("b1", 65536);
    f["gpu"]["devices"] = nlohmann::json::array();
    for (int i = 0; i < n; ++i)
      f["gpu"]["devices"].push_back({{"index", i}, {"memory_bytes", int64_t{80} << 30}});
    return f;
  };
  const PreflightReport r =
      check_nodes({node("n1", with_gpus(8)), node("n2", with_gpus(8)), node("n3", with_gpus(7))},
                  nullptr, HealthThresholds{});
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_EQ(r.findings[0].node, "n3");
  EXPECT_EQ(r.findings[0].path, "gpu.count");
  EXPECT_EQ(r.nodes[2].verdict, "fail");
  EXPECT_EQ(r.nodes[0].verdict, "pass");
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

// The coordinator checks a node that just joined alone: the stacks of the nodes it checked
// before still make the majority, and they get no verdict of their own.
TEST(ReportTest, ANodeCheckedAloneIsHeldAgainstItsPeersStacks) {
  std::map<std::string, Stack> peers = {{"n1", stack_of(facts("b1", 65536))},
                                        {"n2", stack_of(facts("b1", 65536))},
                                        {"n3", stack_of(facts("b2", 65536))}};
  const PreflightReport odd =
      check_nodes({node("n4", facts("b2", 65536))}, nullptr, HealthThresholds{}, &peers);
  ASSERT_EQ(odd.nodes.size(), 1u);
  // n3 and n4 (b2) against n1 and n2 (b1): no value has a strict majority of four.
  EXPECT_EQ(odd.nodes[0].verdict, "fail");
  for (const Finding& f : odd.findings)
    EXPECT_EQ(f.node, "n4") << "peers get no findings";
  peers["n3"] = stack_of(facts("b1", 65536));
  const PreflightReport checked =
      check_nodes({node("n4", facts("b2", 65536))}, nullptr, HealthThresholds{}, &peers);
  ASSERT_EQ(checked.findings.size(), 1u);
  EXPECT_EQ(checked.findings[0].expected, "b1");
  EXPECT_EQ(summarize(checked, "n4"), "stack kiln.build_id: expected b1, found b2 (majority)");
  // Alone without peers, a node is its own majority.
  EXPECT_EQ(
      check_nodes({node("n4", facts("b2", 65536))}, nullptr, HealthThresholds{}).nodes[0].verdict,
      "pass");
}

TEST(ReportTest, ASummaryIsBoundedAtAFinding) {
  PreflightReport r;
  for (int i = 0; i < 50; ++i)
    r.findings.push_back({"n1", "environment.OMP_" + std::to_string(i), "1", "2", "lock", "stack"});
  const std::string s = summarize(r, "n1", 200);
  EXPECT_LE(s.size(), 205u);
  EXPECT_EQ(s.substr(s.size() - 5), "; ...");
  EXPECT_EQ(s.find("stack environment.OMP_0: expected 1, found 2 (lock)"), 0u) << s;
  EXPECT_EQ(summarize(r, "n2"), "");
}

}  // namespace
}  // namespace kiln::preflight
