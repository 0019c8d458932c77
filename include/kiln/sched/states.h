// The job and node state machines of the coordinator, as tables of allowed transitions.
//
// Every change of a job's or a node's state goes through check_job_transition /
// check_node_transition, and every transition is recorded as an event of the same name (the
// coordinator writes the new state and its event in one SQLite transaction). The names are part of
// the scripted interface (`kiln status --json`'s state, `kiln events --json`'s type): add, never
// rename.
//
// Job:
//   queued ──► admitted ──► placed ──► running ──► succeeded
//     │           │           │           │
//     └───────────┴───────────┴───────────┴──► stopping ──► restarting ──► placed (next attempt)
//                                                  │    └──► failed     (restart budget spent)
//     cancel from any live state ──────────────────┴──────► cancelled
//     stopping ──► queued: preempted (it checkpointed at SIGTERM and waits to be placed again)
// "fault" and "preempted" are events, not states: each moves a placed or running job to stopping.
//
// Node: ready ⇄ suspect (a fault pointed at it), suspect/ready ──► cordoned (repeated faults or an
// admin), cordoned ──► ready (uncordon), any ──► down (its agent stopped heartbeating), down ──►
// ready (the agent registered again; a cordoned node stays cordoned).
#ifndef KILN_SCHED_STATES_H_
#define KILN_SCHED_STATES_H_

#include <optional>
#include <string>
#include <string_view>

#include <kiln/base/status.h>

namespace kiln::sched {

enum class JobState {
  kQueued,
  kAdmitted,
  kPlaced,
  kRunning,
  kStopping,
  kRestarting,
  kSucceeded,
  kFailed,
  kCancelled,
};

enum class NodeState { kReady, kSuspect, kCordoned, kDown };

std::string_view job_state_name(JobState state);
std::optional<JobState> parse_job_state(std::string_view name);
std::string_view node_state_name(NodeState state);
std::optional<NodeState> parse_node_state(std::string_view name);

// succeeded, failed, cancelled: nothing more happens to the job.
bool is_terminal(JobState state);
// placed, running, stopping: the job has (or may still have) processes on nodes.
bool has_processes(JobState state);

// OK iff the table allows `from` -> `to`; else kInvalidArgument naming both states
// (a coordinator bug or a stale request: the change is never applied).
Status check_job_transition(JobState from, JobState to);
Status check_node_transition(NodeState from, NodeState to);

// Why a job's attempt ended in a fault. The names appear in events and metrics.
enum class FaultCause {
  kRankExit,      // a rank exited non-zero or was killed by a signal nobody in Kiln sent
  kHung,          // a rank's step counter stalled past the job's progress timeout
  kStartTimeout,  // placed ranks never reported a first step within the start timeout
  kNodeLost,      // the node's agent stopped heartbeating
  kStartFailed,   // the agent could not start a rank (bad command, missing directory)
};
std::string_view fault_cause_name(FaultCause cause);

}  // namespace kiln::sched

#endif  // KILN_SCHED_STATES_H_
