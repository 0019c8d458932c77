#include <kiln/sched/states.h>

#include <array>
#include <utility>

namespace kiln::sched {
namespace {

constexpr std::array<std::pair<JobState, std::string_view>, 9> kJobNames{{
    {JobState::kQueued, "queued"},
    {JobState::kAdmitted, "admitted"},
    {JobState::kPlaced, "placed"},
    {JobState::kRunning, "running"},
    {JobState::kStopping, "stopping"},
    {JobState::kRestarting, "restarting"},
    {JobState::kSucceeded, "succeeded"},
    {JobState::kFailed, "failed"},
    {JobState::kCancelled, "cancelled"},
}};

constexpr std::array<std::pair<NodeState, std::string_view>, 4> kNodeNames{{
    {NodeState::kReady, "ready"},
    {NodeState::kSuspect, "suspect"},
    {NodeState::kCordoned, "cordoned"},
    {NodeState::kDown, "down"},
}};

using J = JobState;
// The job table: every allowed (from, to). Anything else is refused.
constexpr std::array<std::pair<JobState, JobState>, 19> kJobEdges{{
    {J::kQueued, J::kAdmitted},
    {J::kQueued, J::kCancelled},
    {J::kAdmitted, J::kPlaced},
    {J::kAdmitted, J::kQueued},  // the plan that admitted it was rejected
    {J::kAdmitted, J::kCancelled},
    {J::kPlaced, J::kRunning},
    {J::kPlaced, J::kStopping},
    {J::kPlaced, J::kSucceeded},  // ranks finished before their first step was seen
    {J::kRunning, J::kStopping},
    {J::kRunning, J::kSucceeded},
    {J::kStopping, J::kRestarting},
    {J::kStopping, J::kFailed},
    {J::kStopping, J::kCancelled},
    {J::kStopping, J::kSucceeded},  // every rank finished while being stopped
    {J::kStopping, J::kQueued},     // preempted: requeued, resumes from its checkpoint
    {J::kRestarting, J::kPlaced},
    {J::kRestarting, J::kCancelled},
    {J::kRestarting, J::kFailed},  // no placement possible within the job's limits
    {J::kRestarting, J::kQueued},
}};

using N = NodeState;
constexpr std::array<std::pair<NodeState, NodeState>, 9> kNodeEdges{{
    {N::kReady, N::kSuspect},
    {N::kSuspect, N::kReady},
    {N::kReady, N::kCordoned},
    {N::kSuspect, N::kCordoned},
    {N::kCordoned, N::kReady},
    {N::kReady, N::kDown},
    {N::kSuspect, N::kDown},
    {N::kCordoned, N::kDown},
    {N::kDown, N::kReady},
}};

}  // namespace

std::string_view job_state_name(JobState state) {
  for (const auto& [s, name] : kJobNames)
    if (s == state) return name;
  return "unknown";
}

std::optional<JobState> parse_job_state(std::string_view name) {
  for (const auto& [s, n] : kJobNames)
    if (n == name) return s;
  return std::nullopt;
}

std::string_view node_state_name(NodeState state) {
  for (const auto& [s, name] : kNodeNames)
    if (s == state) return name;
  return "unknown";
}

std::optional<NodeState> parse_node_state(std::string_view name) {
  for (const auto& [s, n] : kNodeNames)
    if (n == name) return s;
  return std::nullopt;
}

bool is_terminal(JobState state) {
  return state == J::kSucceeded || state == J::kFailed || state == J::kCancelled;
}

bool has_processes(JobState state) {
  return state == J::kPlaced || state == J::kRunning || state == J::kStopping;
}

Status check_job_transition(JobState from, JobState to) {
  for (const auto& [a, b] : kJobEdges)
    if (a == from && b == to) return Status();
  return Status::invalid_argument("job state " + std::string(job_state_name(from)) + " -> " +
                                  std::string(job_state_name(to)) + " is not allowed");
}

Status check_node_transition(NodeState from, NodeState to) {
  for (const auto& [a, b] : kNodeEdges)
    if (a == from && b == to) return Status();
  return Status::invalid_argument("node state " + std::string(node_state_name(from)) + " -> " +
                                  std::string(node_state_name(to)) + " is not allowed");
}

std::string_view fault_cause_name(FaultCause cause) {
  switch (cause) {
    case FaultCause::kRankExit: return "rank_exit";
    case FaultCause::kHung: return "hung";
    case FaultCause::kStartTimeout: return "start_timeout";
    case FaultCause::kNodeLost: return "node_lost";
    case FaultCause::kStartFailed: return "start_failed";
  }
  return "unknown";
}

}  // namespace kiln::sched
