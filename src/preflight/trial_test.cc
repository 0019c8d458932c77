// The trial run's command, output and judgement (kiln/preflight/trial.h).
#include <kiln/preflight/trial.h>

#include <gtest/gtest.h>

#include <cmath>

namespace kiln::preflight {
namespace {

TEST(TrialCommandTest, KeepsWhatShapesTheComputationAndDropsWhatSteersTheRun) {
  Result<TrialSpec> t = trial_from_command(
      {"kiln", "train", "configs/tiny.yaml", "--threads", "1", "--batch=4", "--seq", "128",
       "--max-steps", "40", "--val-every", "20", "--json", "--ckpt-dir", "ck", "--seed", "7"},
      5);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->config, "configs/tiny.yaml");
  EXPECT_EQ(t->overrides, (std::vector<std::string>{"--threads", "1", "--batch", "4", "--seq",
                                                    "128", "--seed", "7"}));
  EXPECT_EQ(trial_args(*t),
            (std::vector<std::string>{"train", "configs/tiny.yaml", "--max-steps", "5",
                                      "--val-every", "0", "--json", "--threads", "1", "--batch",
                                      "4", "--seq", "128", "--seed", "7"}));
  // The signature names the steps, the shape and the config text.
  EXPECT_EQ(trial_signature(*t, "ab12"),
            "steps 5; --threads 1 --batch 4 --seq 128 --seed 7; config sha256 ab12");
  // A path to a kiln binary is kiln too.
  EXPECT_TRUE(trial_from_command({"/opt/kiln/bin/kiln", "train", "c.yaml"}, 3).ok());
}

TEST(TrialCommandTest, RefusesWhatWouldNotBeTheJobsComputation) {
  struct Case {
    std::vector<std::string> argv;
    int steps;
    const char* names;
  };
  const Case cases[] = {
      {{"python3", "train.py"}, 5, "python3 train.py"},
      {{"kiln", "comm-bench", "--world", "2"}, 5, "kiln comm-bench"},
      {{"kiln", "train", "c.yaml", "--nproc", "2"}, 5, "--nproc"},
      {{"kiln", "train", "c.yaml", "--batch"}, 5, "without its value"},
      {{"kiln", "train", "--json"}, 5, "no training config"},
      {{"kiln", "train", "a.yaml", "b.yaml"}, 5, "second config 'b.yaml'"},
      {{"kiln", "train", "c.yaml"}, 0, "0 steps"},
      {{"kiln", "train", "c.yaml"}, kTrialStepsMax + 1, "steps is outside"},
  };
  for (const Case& c : cases) {
    Result<TrialSpec> t = trial_from_command(c.argv, c.steps);
    ASSERT_FALSE(t.ok()) << c.names;
    EXPECT_NE(t.status().message().find(c.names), std::string::npos) << t.status().to_string();
  }
}

TEST(TrialOutputTest, ReadsTheFinalLineOrSaysWhyThereIsNone) {
  const std::string out =
      "{\"step\":1,\"loss\":10.9}\n"
      "{\"event\":\"done\",\"steps\":5,\"train_loss\":10.25,\"val_loss\":null,"
      "\"tokens_per_s\":1500.5,\"config_sha256\":\"ab12\"}\n";
  TrialResult r = parse_trial_output("n1", 0, out, "");
  ASSERT_TRUE(r.ran) << r.error;
  EXPECT_EQ(r.node, "n1");
  EXPECT_EQ(r.steps, 5);
  EXPECT_EQ(r.loss, 10.25);
  EXPECT_EQ(r.tokens_per_s, 1500.5);
  EXPECT_EQ(r.config_sha256, "ab12");
  // A diverged loss is written as null: not finite.
  r = parse_trial_output("n1", 0, "{\"event\":\"done\",\"train_loss\":null}\n", "");
  ASSERT_TRUE(r.ran);
  EXPECT_TRUE(std::isnan(r.loss));
  r = parse_trial_output("n1", 1, "", "log line\nkiln train: configs/x.yaml: cannot be opened\n");
  EXPECT_FALSE(r.ran);
  EXPECT_EQ(r.error, "exit 1: kiln train: configs/x.yaml: cannot be opened");
  r = parse_trial_output("n1", 0, "{\"step\":1}\n", "");
  EXPECT_FALSE(r.ran);
  EXPECT_NE(r.error.find("no final line"), std::string::npos);
}

TrialResult ran(const std::string& node, double loss, double tps, const std::string& sha = "s") {
  TrialResult r;
  r.node = node;
  r.ran = true;
  r.steps = 5;
  r.loss = loss;
  r.tokens_per_s = tps;
  r.config_sha256 = sha;
  return r;
}

const TrialSpec kSpec{"c.yaml", {"--threads", "1"}, 5};
const std::string kSig = trial_signature(kSpec, "s");

TrialExpectation lock_of(const std::string& signature, double loss, double tps) {
  TrialExpectation e;
  e.signature = signature;
  e.loss = loss;
  e.tokens_per_s = tps;
  return e;
}

TEST(TrialJudgementTest, NodesThatAgreeWithTheLockPass) {
  const TrialExpectation e = lock_of(kSig, 10.0, 1000);
  TrialJudgement j = judge_trials({ran("n1", 10.0, 1000), ran("n2", 10.0005, 700)}, kSpec, &e);
  EXPECT_TRUE(j.nodes.empty());
  EXPECT_TRUE(j.job.empty());
  EXPECT_EQ(j.reference, "lock");
  EXPECT_EQ(j.signature, "steps 5; --threads 1; config sha256 s");
}

TEST(TrialJudgementTest, NamesTheNodeOffTheLocksLossOrBelowItsThroughput) {
  const TrialExpectation e = lock_of(kSig, 10.0, 1000);
  TrialJudgement j =
      judge_trials({ran("n1", 10.0, 1000), ran("n2", 10.5, 1000), ran("n3", 10.0, 400)}, kSpec, &e);
  ASSERT_EQ(j.nodes.size(), 2u);
  EXPECT_EQ(j.nodes[0].node, "n2");
  EXPECT_EQ(j.nodes[0].path, "trial.loss");
  EXPECT_EQ(j.nodes[0].expected, "10 within 0.01%");
  EXPECT_EQ(j.nodes[0].found, "10.5");
  EXPECT_EQ(j.nodes[0].against, "lock");
  EXPECT_EQ(j.nodes[1].node, "n3");
  EXPECT_EQ(j.nodes[1].path, "trial.tokens_per_s");
  EXPECT_EQ(j.nodes[1].expected, ">= 0.5 x 1000");
  EXPECT_EQ(j.nodes[1].check, "trial");
  EXPECT_TRUE(j.job.empty());
}

TEST(TrialJudgementTest, EveryNodeOffTheLockIsTheJobsFindingNotTheNodes) {
  const TrialExpectation e = lock_of(kSig, 9.0, 1000);
  TrialJudgement j = judge_trials({ran("n1", 10.0, 1000), ran("n2", 10.0, 1000)}, kSpec, &e);
  EXPECT_TRUE(j.nodes.empty());
  ASSERT_EQ(j.job.size(), 1u);
  EXPECT_EQ(j.job[0].node, "");
  EXPECT_EQ(j.job[0].path, "trial.loss");
  EXPECT_EQ(j.job[0].found, "every trial node: n1 10, n2 10");
  // One node alone cannot tell itself from the lock: the job's finding too.
  j = judge_trials({ran("n1", 10.0, 1000)}, kSpec, &e);
  EXPECT_TRUE(j.nodes.empty());
  ASSERT_EQ(j.job.size(), 1u);
  EXPECT_EQ(j.job[0].found, "every trial node: n1 10");
  // The same for a lock whose throughput no node reaches.
  const TrialExpectation fast = lock_of(kSig, 10.0, 1e6);
  j = judge_trials({ran("n1", 10.0, 1000), ran("n2", 10.0, 1000)}, kSpec, &fast);
  ASSERT_EQ(j.job.size(), 1u);
  EXPECT_EQ(j.job[0].path, "trial.tokens_per_s");
  EXPECT_TRUE(j.nodes.empty());
}

TEST(TrialJudgementTest, WithoutTheLocksTrialTheMajorityDecides) {
  // Another signature: the lock's figures are for another computation.
  const TrialExpectation e = lock_of("other", 1.0, 1e9);
  TrialJudgement j = judge_trials(
      {ran("n1", 10.0, 1000), ran("n2", 10.00001, 900), ran("n3", 11.0, 300)}, kSpec, &e);
  EXPECT_NE(j.reference.find("another computation (other)"), std::string::npos) << j.reference;
  ASSERT_EQ(j.nodes.size(), 2u);
  EXPECT_EQ(j.nodes[0].node, "n3");
  EXPECT_EQ(j.nodes[0].path, "trial.loss");
  EXPECT_EQ(j.nodes[0].against, "trial majority");
  EXPECT_EQ(j.nodes[1].node, "n3");
  EXPECT_EQ(j.nodes[1].path, "trial.tokens_per_s");
  EXPECT_EQ(j.nodes[1].expected, ">= 0.5 x 1000 (n1)");
  // The lock's tolerances still hold: an operator who widened the throughput floor for a
  // shared host widened it for every computation.
  TrialExpectation wide = e;
  wide.tokens_per_s_fraction = 0.1;
  j = judge_trials({ran("n1", 10.0, 1000), ran("n2", 10.00001, 900), ran("n3", 10.0, 300)}, kSpec,
                   &wide);
  EXPECT_TRUE(j.nodes.empty()) << j.nodes.size();
  // Two that disagree: no majority, the job's finding.
  j = judge_trials({ran("n1", 10.0, 1000), ran("n2", 11.0, 1000)}, kSpec, nullptr);
  EXPECT_TRUE(j.nodes.empty());
  ASSERT_EQ(j.job.size(), 1u);
  EXPECT_EQ(j.job[0].found, "no majority: n1 10, n2 11");
  EXPECT_EQ(j.reference, "trial nodes: the lock records no trial");
}

TEST(TrialJudgementTest, AFailedOrDivergedRunIsItsNodesUnlessItIsEveryNodes) {
  TrialResult failed;
  failed.node = "n2";
  failed.error = "exit 1: out of memory";
  TrialResult nan_loss = ran("n3", std::nan(""), 1000);
  TrialJudgement j = judge_trials({ran("n1", 10.0, 1000), failed, nan_loss}, kSpec, nullptr);
  ASSERT_EQ(j.nodes.size(), 2u);
  EXPECT_EQ(j.nodes[0].node, "n2");
  EXPECT_EQ(j.nodes[0].path, "trial.run");
  EXPECT_EQ(j.nodes[0].found, "exit 1: out of memory");
  EXPECT_EQ(j.nodes[1].node, "n3");
  EXPECT_EQ(j.nodes[1].found, "not finite");
  TrialResult failed1 = failed;
  failed1.node = "n1";
  j = judge_trials({failed1, failed}, kSpec, nullptr);
  EXPECT_TRUE(j.nodes.empty());
  ASSERT_EQ(j.job.size(), 1u);
  EXPECT_EQ(j.job[0].path, "trial.run");
  EXPECT_NE(j.job[0].found.find("n1: exit 1: out of memory"), std::string::npos);
}

TEST(TrialJudgementTest, ANodeThatReadAnotherConfigIsNamed) {
  TrialJudgement j = judge_trials(
      {ran("n1", 10.0, 1000, "aa"), ran("n2", 10.0, 1000, "aa"), ran("n3", 12.0, 1000, "bb")},
      kSpec, nullptr);
  ASSERT_EQ(j.nodes.size(), 1u);
  EXPECT_EQ(j.nodes[0].node, "n3");
  EXPECT_EQ(j.nodes[0].path, "trial.config");
  EXPECT_EQ(j.nodes[0].expected, "config sha256 aa");
  EXPECT_TRUE(j.job.empty());
}

}  // namespace
}  // namespace kiln::preflight
