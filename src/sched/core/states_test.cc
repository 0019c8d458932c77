#include <kiln/sched/states.h>

#include <gtest/gtest.h>

namespace kiln::sched {
namespace {

TEST(StatesTest, NamesRoundTripAndAreTheScriptedOnes) {
  for (const char* name : {"queued", "admitted", "placed", "running", "stopping", "restarting",
                           "succeeded", "failed", "cancelled"}) {
    std::optional<JobState> s = parse_job_state(name);
    ASSERT_TRUE(s.has_value()) << name;
    EXPECT_EQ(job_state_name(*s), name);
  }
  for (const char* name : {"ready", "suspect", "cordoned", "down"}) {
    std::optional<NodeState> s = parse_node_state(name);
    ASSERT_TRUE(s.has_value()) << name;
    EXPECT_EQ(node_state_name(*s), name);
  }
  EXPECT_FALSE(parse_job_state("Running").has_value());
}

TEST(StatesTest, TheJobTableAllowsTheLifecycleAndRefusesTheRest) {
  using J = JobState;
  for (auto [a, b] : std::vector<std::pair<J, J>>{{J::kQueued, J::kAdmitted},
                                                  {J::kAdmitted, J::kPlaced},
                                                  {J::kPlaced, J::kRunning},
                                                  {J::kRunning, J::kStopping},
                                                  {J::kStopping, J::kRestarting},
                                                  {J::kRestarting, J::kPlaced},
                                                  {J::kRunning, J::kSucceeded},
                                                  {J::kStopping, J::kFailed},
                                                  {J::kStopping, J::kCancelled}}) {
    EXPECT_TRUE(check_job_transition(a, b).ok())
        << job_state_name(a) << " -> " << job_state_name(b);
  }
  Status s = check_job_transition(J::kSucceeded, J::kRunning);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("succeeded -> running"), std::string::npos);
  EXPECT_FALSE(check_job_transition(J::kQueued, J::kRunning).ok());
  EXPECT_FALSE(check_job_transition(J::kRunning, J::kCancelled).ok());  // stop first
  EXPECT_FALSE(check_job_transition(J::kFailed, J::kRestarting).ok());
}

TEST(StatesTest, TheNodeTable) {
  using N = NodeState;
  EXPECT_TRUE(check_node_transition(N::kReady, N::kSuspect).ok());
  EXPECT_TRUE(check_node_transition(N::kSuspect, N::kCordoned).ok());
  EXPECT_TRUE(check_node_transition(N::kCordoned, N::kReady).ok());
  EXPECT_TRUE(check_node_transition(N::kReady, N::kDown).ok());
  EXPECT_TRUE(check_node_transition(N::kDown, N::kReady).ok());
  EXPECT_FALSE(check_node_transition(N::kDown, N::kCordoned).ok());
  EXPECT_FALSE(check_node_transition(N::kCordoned, N::kSuspect).ok());
}

TEST(StatesTest, TerminalAndProcessStates) {
  EXPECT_TRUE(is_terminal(JobState::kCancelled));
  EXPECT_FALSE(is_terminal(JobState::kRestarting));
  EXPECT_TRUE(has_processes(JobState::kStopping));
  EXPECT_FALSE(has_processes(JobState::kQueued));
}

}  // namespace
}  // namespace kiln::sched
