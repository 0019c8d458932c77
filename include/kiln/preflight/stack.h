// The software stack of a node, the version lock, and the stack-consistency check of preflight.
//
// A stack is a flat map from a dotted path into a node's facts (facts.h) to its value as text:
// "kiln.build_id", "libraries.openssl", "kernel.release", "environment.OMP_NUM_THREADS". It holds
// only what must be equal on every node of a job (a mismatch there shows up as a silent hang or
// a numerical drift, not as an error); what differs by nature (host name, free memory, the time,
// a node's own address) is left to the health checks. stack_of() says which paths.
//
// The lock (`kiln.lock`, written by `kiln lock`) is a stack taken from a node that passed, as
// readable, diffable YAML:
//
//   schema: kiln.lock/1
//   taken_from: {node: n1, at: "2026-12-03T06:00:00Z"}
//   stack:
//     kiln.build_id: 3cfce3f1e6585ef68b9f93aee381b0f9711cad02
//     libraries.openssl: OpenSSL 3.0.19 27 Jan 2026
//     environment.OMP_NUM_THREADS: "1"
//
// An operator may delete lines from `stack` (a path not in the lock is still checked across the
// nodes, just not against the lock), never add unknown sections. The environment is the
// exception: the lock's variables are all there may be, and a behaviour-changing variable the
// lock does not name must be unset.
#ifndef KILN_PREFLIGHT_STACK_H_
#define KILN_PREFLIGHT_STACK_H_

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <kiln/base/result.h>

namespace kiln::preflight {

using Stack = std::map<std::string, std::string>;

// The stack in `facts` (a document of collect_node_facts()): the Kiln build, OS, kernel release,
// CPU ISA level, BLAS core, every linked library's version and every shared object's resolved
// file, the kernel parameters Kiln depends on, GPU driver and CUDA versions, and the environment
// variables that change behaviour. A null fact is "null"; a section the document lacks is
// absent from the stack (check_stacks reports it as "(absent)").
Stack stack_of(const nlohmann::json& facts);

// A node that fails a check: its stack differs from the lock or from the other nodes (check
// "stack"), or a health figure is past its threshold (check "health", health.h).
struct Finding {
  std::string node;
  std::string path;      // "libraries.openssl", "kernel_params.shm_free_bytes"
  std::string expected;  // the lock's value, the one most other nodes have, or ">= 268435456"
  std::string found;     // "(absent)" when the node's stack lacks the path
  std::string against;   // "lock", "majority" (expected is most nodes' value), "no majority",
                         // "threshold"
  std::string check = "stack";
};

// Checks every node's stack against the lock (when not null) and against the other nodes.
// Against the lock: each path the lock names must have its value on each node (the lock decides
// those paths, whatever most nodes have), and each `environment.` path the lock does not name
// must be absent ("(unset)"). Across nodes, for every other path any node has: the
// value held by a strict majority of nodes is expected and each other node is named (the odd one
// out); when no value has a strict majority, every node is named, with the values seen as
// `expected` ("a | b"). Findings come sorted by node, then path.
std::vector<Finding> check_stacks(const std::map<std::string, Stack>& nodes, const Stack* lock);

// The lock's optional `trial:` section: what a trial run of a job's model (trial.h) gave on the
// node the lock was taken from, and how far a node's trial may stray from it.
//
//   trial:
//     job: "configs/jobs/tiny-2nodes.yaml"
//     signature: "steps 5; --batch 4 --seq 128 --threads 1; config sha256 9f86d0..."
//     loss: 10.446307                  # the last step's train loss
//     tokens_per_s: 1502.36            # one rank, over the steps after the first
//     loss_rtol: 0.0001                # an operator may widen these two
//     tokens_per_s_fraction: 0.5
struct TrialExpectation {
  std::string job;        // the job file it was taken for, for people
  std::string signature;  // trial_signature(): a trial is held against it only when equal
  double loss = 0;
  double tokens_per_s = 0;
  // Same build, data, seed and shapes give the same loss up to the order of sums (here, to
  // every digit); another corpus moved a 3-step loss by 1.3e-3 (e2e.preflight_trial prints
  // both). 1e-4 sits between, with room for another CPU's order of sums.
  double loss_rtol = 1e-4;
  // Throughput varies with the host's load: half is a node that lost its cores, not noise.
  double tokens_per_s_fraction = 0.5;
};

struct Lock {
  Stack stack;
  std::optional<TrialExpectation> trial;
};

// The lock file's text for `lock`, taken from `node` at `at` (RFC 3339).
std::string render_lock(const Lock& lock, const std::string& node, const std::string& at);

// Reads a lock file strictly (base/config.h): errors name the file, line and key.
Result<Lock> load_lock(const std::string& path);

// Reads a facts document (`kiln facts --json` saved to a file, at most kFactsBytesMax): errors
// name the file, and say what is wrong (not JSON, not an object, another schema).
inline constexpr size_t kFactsBytesMax = size_t{1} << 20;
Result<nlohmann::json> load_facts(const std::string& path);

}  // namespace kiln::preflight

#endif  // KILN_PREFLIGHT_STACK_H_
