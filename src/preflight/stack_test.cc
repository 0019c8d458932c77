// The stack check: what is in a stack, the odd one out across nodes, the lock, and the lock file.
#include <kiln/preflight/stack.h>

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <kiln/preflight/facts.h>

#include "preflight/fact_sections.h"

namespace kiln::preflight {
namespace {

nlohmann::json facts(const std::string& build_id, const std::string& omp_threads, int open_files) {
  nlohmann::json f = {
      {"schema", "kiln.facts/1"},
      {"host", {{"hostname", "h"}, {"uptime_s", 12.5}}},
      {"kiln", {{"version", "0.1.0"}, {"build_id", build_id}, {"git_dirty", false}}},
      {"kernel", {{"release", "6.1.0"}, {"machine", "x86_64"}}},
      {"kernel_params", {{"open_files_soft", open_files}, {"somaxconn", 4096}}},
      {"libraries", {{"openssl", "OpenSSL 3.0.19"}}},
      {"gpu", {{"driver_version", nullptr}}},
      {"environment", {{"KILN_HOST", "differs-by-node"}, {"KILN_NODE_TOKEN", "(redacted)"}}}};
  if (!omp_threads.empty()) f["environment"]["OMP_NUM_THREADS"] = omp_threads;
  return f;
}

TEST(StackTest, HoldsWhatMustBeEqualAndNotWhatDiffersByNature) {
  const Stack s = stack_of(facts("b1", "2", 1024));
  EXPECT_EQ(s.at("kiln.build_id"), "b1");
  EXPECT_EQ(s.at("kiln.git_dirty"), "false");
  EXPECT_EQ(s.at("kernel.release"), "6.1.0");
  EXPECT_EQ(s.at("kernel_params.somaxconn"), "4096");
  EXPECT_EQ(s.at("libraries.openssl"), "OpenSSL 3.0.19");
  EXPECT_EQ(s.at("gpu.driver_version"), "null");
  EXPECT_EQ(s.at("environment.OMP_NUM_THREADS"), "2");
  // A node's own name, address, tokens, uptime and limits that only need to be large enough are
  // not the stack.
  EXPECT_EQ(s.count("environment.KILN_HOST"), 0u);
  EXPECT_EQ(s.count("environment.KILN_NODE_TOKEN"), 0u);
  EXPECT_EQ(s.count("host.uptime_s"), 0u);
  EXPECT_EQ(s.count("kernel_params.open_files_soft"), 0u);
  EXPECT_TRUE(stack_of(nlohmann::json::array()).empty());
}

TEST(StackTest, TheOddNodeOutIsNamedWithTheOthersValue) {
  std::map<std::string, Stack> nodes = {{"n1", stack_of(facts("b1", "1", 0))},
                                        {"n2", stack_of(facts("b1", "1", 0))},
                                        {"n3", stack_of(facts("b2", "1", 0))},
                                        {"n4", stack_of(facts("b1", "", 0))}};
  const std::vector<Finding> f = check_stacks(nodes, nullptr);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].node, "n3");
  EXPECT_EQ(f[0].path, "kiln.build_id");
  EXPECT_EQ(f[0].expected, "b1");
  EXPECT_EQ(f[0].found, "b2");
  EXPECT_EQ(f[0].against, "majority");
  EXPECT_EQ(f[1].node, "n4");
  EXPECT_EQ(f[1].path, "environment.OMP_NUM_THREADS");
  EXPECT_EQ(f[1].expected, "1");
  EXPECT_EQ(f[1].found, "(unset)");
}

TEST(StackTest, WithoutAMajorityEveryNodeIsNamedWithEveryValue) {
  std::map<std::string, Stack> nodes = {{"n1", stack_of(facts("b1", "", 0))},
                                        {"n2", stack_of(facts("b2", "", 0))}};
  const std::vector<Finding> f = check_stacks(nodes, nullptr);
  ASSERT_EQ(f.size(), 2u);
  for (const Finding& x : f) {
    EXPECT_EQ(x.path, "kiln.build_id");
    EXPECT_EQ(x.expected, "b1 | b2");
    EXPECT_EQ(x.against, "no majority");
  }
  EXPECT_TRUE(check_stacks({{"n1", stack_of(facts("b1", "", 0))}}, nullptr).empty());
}

TEST(StackTest, TheLockDecidesThePathsItNames) {
  Stack lock = stack_of(facts("b2", "1", 0));
  lock.erase("libraries.openssl");  // an operator deleted the line: still compared across nodes
  std::map<std::string, Stack> nodes = {{"n1", stack_of(facts("b1", "1", 0))},
                                        {"n2", stack_of(facts("b1", "1", 0))},
                                        {"n3", stack_of(facts("b2", "1", 0))}};
  nodes["n2"]["libraries.openssl"] = "OpenSSL 3.0.2";
  const std::vector<Finding> f = check_stacks(nodes, &lock);
  // n1 and n2 against the lock's build id (n3 is the lock's, though the odd one out of the
  // nodes: not named); n2's openssl against the other nodes.
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0].node, "n1");
  EXPECT_EQ(f[0].against, "lock");
  EXPECT_EQ(f[0].expected, "b2");
  EXPECT_EQ(f[1].node, "n2");
  EXPECT_EQ(f[1].path, "kiln.build_id");
  EXPECT_EQ(f[1].against, "lock");
  EXPECT_EQ(f[2].node, "n2");
  EXPECT_EQ(f[2].path, "libraries.openssl");
  EXPECT_EQ(f[2].against, "majority");
  EXPECT_EQ(f[2].found, "OpenSSL 3.0.2");
}

TEST(StackTest, TheLocksEnvironmentIsAllThereMayBe) {
  const Stack lock = stack_of(facts("b1", "", 0));
  // Every node agrees on OMP_NUM_THREADS=8, which the lock never vouched for.
  const std::vector<Finding> f = check_stacks(
      {{"n1", stack_of(facts("b1", "8", 0))}, {"n2", stack_of(facts("b1", "8", 0))}}, &lock);
  ASSERT_EQ(f.size(), 2u);
  for (const Finding& x : f) {
    EXPECT_EQ(x.path, "environment.OMP_NUM_THREADS");
    EXPECT_EQ(x.expected, "(unset)");
    EXPECT_EQ(x.found, "8");
    EXPECT_EQ(x.against, "lock");
  }
}

class LockFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = std::filesystem::temp_directory_path() /
            ("kiln-lock-test-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".lock");
  }
  void TearDown() override { std::filesystem::remove(path_); }
  void write(const std::string& text) { std::ofstream(path_) << text; }
  std::filesystem::path path_;
};

TEST_F(LockFileTest, ARenderedLockReadsBackExactly) {
  // This node's real stack, plus values YAML would otherwise take for numbers, booleans, nulls
  // or syntax.
  Stack stack = stack_of(collect_node_facts());
  ASSERT_FALSE(stack.empty());
  stack["environment.OMP_NUM_THREADS"] = "1";
  stack["environment.ODD"] = "a: \"b\" # c\\d\t";
  stack["gpu.driver_version"] = "null";
  stack["kiln.git_dirty"] = "false";
  write(render_lock(Lock{stack, std::nullopt}, "n1", "2026-12-03T06:00:00Z"));
  Result<Lock> back = load_lock(path_.string());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->stack, stack);
  EXPECT_FALSE(back->trial.has_value());
}

TEST_F(LockFileTest, ATrialExpectationReadsBackToTheLastBit) {
  TrialExpectation t;
  t.job = "jobs/a \"b\".yaml";
  t.signature = "steps 5; --batch 4; config sha256 00ff";
  t.loss = 10.446307182312012;  // a float's value as a double: every digit matters
  t.tokens_per_s = 1502.3648324661824;
  t.loss_rtol = 0.002;
  t.tokens_per_s_fraction = 0.25;
  write(render_lock(Lock{{{"kiln.build_id", "b1"}}, t}, "n1", "2026-12-03T06:00:00Z"));
  Result<Lock> back = load_lock(path_.string());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  ASSERT_TRUE(back->trial.has_value());
  EXPECT_EQ(back->trial->job, t.job);
  EXPECT_EQ(back->trial->signature, t.signature);
  EXPECT_EQ(back->trial->loss, t.loss);
  EXPECT_EQ(back->trial->tokens_per_s, t.tokens_per_s);
  EXPECT_EQ(back->trial->loss_rtol, t.loss_rtol);
  EXPECT_EQ(back->trial->tokens_per_s_fraction, t.tokens_per_s_fraction);
  // A trial without its loss is refused, naming the key.
  write("schema: kiln.lock/1\nstack: {}\ntrial:\n  signature: s\n  tokens_per_s: 1\n");
  Result<Lock> bad = load_lock(path_.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("trial.loss"), std::string::npos)
      << bad.status().to_string();
}

TEST_F(LockFileTest, ABadLockNamesFileLineAndKey) {
  write("schema: kiln.lock/1\nstack:\n  kiln.build_id: b1\nextra: 1\n");
  Result<Lock> r = load_lock(path_.string());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(path_.string() + ":4"), std::string::npos)
      << r.status().to_string();
  EXPECT_NE(r.status().message().find("extra"), std::string::npos) << r.status().to_string();
  write("schema: kiln.lock/2\nstack: {}\n");
  r = load_lock(path_.string());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("schema"), std::string::npos) << r.status().to_string();
  EXPECT_FALSE(load_lock(path_.string() + ".missing").ok());
}

TEST(EnvironmentFactsTest, KeepsWhatChangesBehaviourAndRedactsCredentials) {
  std::string a = "OMP_NUM_THREADS=4", b = "KILN_JOB_TOKEN=s3cret", c = "HOME=/root",
              d = "OPENBLAS_CORETYPE=Haswell", e = "KILN_API_KEY=k", f = "NOEQUALS";
  char* env[] = {a.data(), b.data(), c.data(), d.data(), e.data(), f.data(), nullptr};
  const nlohmann::ordered_json j = environment_facts(env);
  EXPECT_EQ(j.size(), 4u) << j.dump();
  EXPECT_EQ(j.at("OMP_NUM_THREADS"), "4");
  EXPECT_EQ(j.at("OPENBLAS_CORETYPE"), "Haswell");
  EXPECT_EQ(j.at("KILN_JOB_TOKEN"), "(redacted)");
  EXPECT_EQ(j.at("KILN_API_KEY"), "(redacted)");
  EXPECT_EQ(j.dump().find("s3cret"), std::string::npos);
  EXPECT_TRUE(environment_facts(nullptr).empty());
}

}  // namespace
}  // namespace kiln::preflight
