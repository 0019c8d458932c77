#include <kiln/sched/command.h>

#include <gtest/gtest.h>

namespace kiln::sched::slurm {
namespace {

TEST(RunCommand, ReturnsExitCodeAndBothStreams) {
  CommandSpec spec;
  spec.argv = {"sh", "-c", "echo out; echo err >&2; exit 3"};
  Result<CommandOutput> r = run_command(spec);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
}

TEST(RunCommand, PassesTheAddedEnvironment) {
  CommandSpec spec;
  spec.argv = {"sh", "-c", "printf %s \"$KILN_TEST_VALUE\""};
  spec.env = {{"KILN_TEST_VALUE", "a b,c"}};
  Result<CommandOutput> r = run_command(spec);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->out, "a b,c");
}

TEST(RunCommand, KillsACommandPastItsDeadline) {
  CommandSpec spec;
  spec.argv = {"sleep", "30"};
  spec.timeout_ms = 200;
  Result<CommandOutput> r = run_command(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kTimeout);
  EXPECT_NE(r.status().message().find("sleep 30"), std::string::npos);
}

TEST(RunCommand, BoundsTheOutput) {
  CommandSpec spec;
  spec.argv = {"yes"};
  spec.output_max = 4096;
  Result<CommandOutput> r = run_command(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("more than 4096 bytes"), std::string::npos);
}

TEST(RunCommand, NamesAProgramThatDoesNotExist) {
  CommandSpec spec;
  spec.argv = {"kiln-no-such-program"};
  Result<CommandOutput> r = run_command(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("kiln-no-such-program"), std::string::npos);
}

TEST(RunCommand, RunsInTheGivenDirectoryOrNamesIt) {
  CommandSpec spec;
  spec.argv = {"pwd"};
  spec.cwd = "/tmp";
  Result<CommandOutput> r = run_command(spec);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->out, "/tmp\n");
  spec.cwd = "/kiln-no-such-directory";
  r = run_command(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("in /kiln-no-such-directory"), std::string::npos)
      << r.status().to_string();
}

}  // namespace
}  // namespace kiln::sched::slurm
