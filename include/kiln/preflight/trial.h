// The trial run of `kiln preflight --job JOB.yaml --level full`: a few steps of the job's model,
// alone on each of a few of the job's nodes, held against the expectation recorded with the lock
// (stack.h's TrialExpectation) and against each other.
//
// Each trial node runs the same single-rank computation, `kiln train CONFIG --max-steps N --json`
// with the job's overrides of shape, seed and threads. Same build, data, seed and shapes give the
// same loss up to the order of sums, so a node's loss is held against the lock's (taken on a node
// that passed) and against the other trial nodes, and the odd one out is named: a kernel that
// computes wrong on one node, a corrupt copy of the data, another library. Throughput is held
// against the lock's and the fastest trial node's. Traffic between nodes is the link check's
// (links.h), which runs in the same preflight between the same nodes.
//
// A failure that every trial node shares (the only node whose figures could be compared
// included) is the job's or the lock's, not a node's: it fails the preflight (a "job finding")
// and cordons no node.
#ifndef KILN_PREFLIGHT_TRIAL_H_
#define KILN_PREFLIGHT_TRIAL_H_

#include <string>
#include <vector>

#include <kiln/base/result.h>
#include <kiln/preflight/stack.h>

namespace kiln::preflight {

// A handful of steps: enough for a first step's allocations to pass and a throughput to settle,
// few enough to cost seconds, not minutes.
inline constexpr int kTrialStepsDefault = 5;
inline constexpr int kTrialStepsMax = 100;
inline constexpr int kTrialNodesDefault = 2;
inline constexpr int kTrialNodesMax = 16;

struct TrialSpec {
  std::string config;  // the training config, relative to the job's directory
  std::vector<std::string>
      overrides;  // flag, value pairs of the job's command (trial_from_command)
  int steps = kTrialStepsDefault;
};

// The trial of a job whose ranks run `kiln train CONFIG [flags]` (argv[0] "kiln" or a path to a
// kiln binary). The flags that shape the computation are kept (--batch, --seq, --threads,
// --seed, --grad-accum, --zero); those that only steer the run (--max-steps, --val-every,
// --json, --ckpt-*, --metrics-*, --comm-timeout-ms, --cpu-bind, --peak-gflops,
// --stop-after-step) are dropped. kInvalidArgument names anything else: another program, another
// subcommand, a flag the trial does not know (so it cannot silently run another computation).
Result<TrialSpec> trial_from_command(const std::vector<std::string>& argv, int steps);

// The kiln arguments of the trial: train CONFIG --max-steps N --val-every 0 --json OVERRIDES.
std::vector<std::string> trial_args(const TrialSpec& spec);

// "steps 5; --batch 4 --seq 128 --threads 1; config sha256 9f86d0...": two trials' figures
// compare only when their signatures are equal (the same computation on the same config text).
std::string trial_signature(const TrialSpec& spec, const std::string& config_sha256);

// One node's trial.
struct TrialResult {
  std::string node;
  bool ran = false;  // false: `error` says why (no answer, a failed run, no final line)
  std::string error;
  std::string config_sha256;
  int steps = 0;
  double loss = 0;          // the last step's train loss (NaN when it diverged)
  double tokens_per_s = 0;  // over the steps after the first
};

// Reads the final line of `kiln train --json` in `out` (the run's exit code and error output
// explain a run without one).
TrialResult parse_trial_output(const std::string& node, int exit_code, const std::string& out,
                               const std::string& err);

struct TrialJudgement {
  std::vector<Finding> nodes;  // check "trial", each naming its node: the odd ones out
  std::vector<Finding> job;    // check "trial", node "": what every trial node shares
  // The trial's signature (on the config text most nodes read), and "lock" when the lock's
  // expectation applied (the same signature), else why it did not.
  std::string signature;
  std::string reference;
};

// Judges the results of one trial of `spec`, against `expected` (may be null) when its signature
// is the trial's, and across the nodes:
//   trial.run           a node whose run failed while another's ran
//   trial.config        a node that read another config text than most
//   trial.loss          a loss not within loss_rtol of the lock's, or of the loss most nodes
//                       agree on; not finite
//   trial.tokens_per_s  below tokens_per_s_fraction of the lock's, or of the fastest node's
// With no majority, or when every node fails the same way, the finding is the job's. The
// tolerances are `expected`'s whenever it is given, whatever its signature.
TrialJudgement judge_trials(const std::vector<TrialResult>& results, const TrialSpec& spec,
                            const TrialExpectation* expected);

}  // namespace kiln::preflight

#endif  // KILN_PREFLIGHT_TRIAL_H_
