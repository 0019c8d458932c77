// JobSpec: what a user asks the coordinator to run, parsed strictly from YAML and carried as JSON.
//
// The YAML a user writes (every key but `name`, and `config` or `command`, is optional):
//
//   name: tiny-2nodes
//   config: configs/tiny.yaml        # or: command: [kiln, train, configs/tiny.yaml, --max-steps,
//   "40"] nodes: 2                         # or min_nodes: 1 with nodes: 2 (elastic)
//   ranks_per_node: 1
//   resources: {cpus: 1, memory: 2GiB, gpus: 0}   # per rank; memory: integer bytes, or a string
//                                                  # with KiB/MiB/GiB/TiB (1024) or KB/MB/GB/TB
//                                                  (1000)
//   queue: default
//   priority: 0
//   env:
//     PLAIN: value
//     API_KEY: {value: s3cret, secret: true}
//   checkpoint: {dir: ckpt/tiny, every: 10}
//   max_restarts: 3
//   restart_backoff: 1s              # durations are strings with units (kiln/sched/duration.h)
//   restart_backoff_max: 60s
//   progress_timeout: 60s
//   start_timeout: 10m
//   preflight: none                  # none | quick | full
//   time_limit: 2h                   # the job is stopped (failed) past it; backfill plans with it
//   gpu_model: A100|H100             # nodes of any of these GPU models (the `gpu_model` label)
//   topology: {same: switch, required: true}   # or {spread: rack}; see kiln/sched/policy.h
//
// Invariants of a JobSpec returned by any function here (YAML or JSON): `command` is not empty
// (it defaults to {"kiln", "train", config}); 1 <= effective_min_nodes() <= nodes; every env
// name is a valid, unreserved name and appears once; every limit below holds.
//
// The JSON form (job_spec_to_json) names the struct's fields one for one, with durations in
// integer milliseconds ("restart_backoff_ms") and memory in bytes ("resources.memory_bytes"), and
// env as a list of {"name", "value", "secret"} in order. Without secrets, a secret variable is
// written as {"name": .., "secret": true}: its value appears nowhere in the text.
#ifndef KILN_SCHED_JOB_SPEC_H_
#define KILN_SCHED_JOB_SPEC_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/base/result.h>

#include <nlohmann/json.hpp>

namespace kiln::sched {

// Limits of a spec, each with its reason.
// A job name (and a queue name) appears in ids, paths and metric labels: short and plain.
inline constexpr size_t kJobNameBytesMax = 64;
// Far more nodes than one coordinator places; a typo (20000 for 2) fails at submit, not in queue.
inline constexpr int kJobNodesMax = 4096;
// One rank per core on the largest machines, with room to spare.
inline constexpr int kRanksPerNodeMax = 1024;
inline constexpr int kRankCpusMax = 1024;
inline constexpr int kRankGpusMax = 64;
inline constexpr int kPriorityMin = -1000;
inline constexpr int kPriorityMax = 1000;
inline constexpr int kMaxRestartsMax = 1000;
// The spec travels in every submit and is stored with every job: a few KiB is normal.
inline constexpr size_t kCommandArgsMax = 1024;
inline constexpr size_t kEnvVarsMax = 256;
inline constexpr size_t kEnvNameBytesMax = 256;
inline constexpr size_t kEnvValueBytesMax = 64 * 1024;

struct EnvVar {
  std::string name;
  std::string value;
  bool secret = false;  // stored sealed, never written to logs or plain JSON
};

struct RankResources {
  int cpus = 1;
  int64_t memory_bytes = 0;  // 0: no limit
  int gpus = 0;
};

enum class PreflightLevel { kNone, kQuick, kFull };

// "none", "quick", "full".
std::string_view preflight_level_name(PreflightLevel level);

struct JobSpec {
  std::string name;                        // required; 1..64 of [A-Za-z0-9._-], first alphanumeric
  std::vector<std::string> command;        // the rank's argv; default {"kiln","train",config}
  std::string config;                      // training config path; required when command is absent
  int nodes = 1;                           // nodes wanted; also max_nodes unless elastic
  int min_nodes = 0;                       // 0: same as nodes (not elastic)
  int ranks_per_node = 1;                  // [1, 1024]
  RankResources resources;                 // per rank
  std::string queue = "default";           // same characters as name
  int priority = 0;                        // [-1000, 1000]
  std::vector<EnvVar> env;                 // names [A-Za-z_][A-Za-z0-9_]*, not KILN_* (reserved)
  std::string checkpoint_dir;              // empty: none (restarts start from step 0)
  int checkpoint_every = 0;                // steps; 0: the trainer's default
  int max_restarts = 3;                    // [0, 1000]
  int64_t restart_backoff_ms = 1000;       // first restart's delay; doubles per restart
  int64_t restart_backoff_max_ms = 60000;  // >= restart_backoff_ms
  int64_t progress_timeout_ms = 300000;    // no step heartbeat for this long: hung (> 0)
  int64_t start_timeout_ms = 600000;  // placed ranks must report a first step within this (> 0)
  PreflightLevel preflight = PreflightLevel::kNone;
  int64_t time_limit_ms = 0;             // 0: none
  std::string gpu_model;                 // "" any; "A|B" either
  std::string topology_same = "none";    // none | rack | switch
  bool topology_required = false;        // same is a requirement, not a preference
  std::string topology_spread = "none";  // none | rack

  // min_nodes, or nodes when min_nodes is 0.
  int effective_min_nodes() const;
};

// Parses YAML text (the layout above) strictly through kiln's ConfigDocument: unknown keys,
// wrong types, out-of-range values, min_nodes > nodes, a bad or reserved (KILN_) env name, a bad
// duration or memory size, and neither command nor config are all errors. kInvalidArgument lists
// every problem, each naming source_name, line, column and key ("job.yaml:3:8: key 'nodes': ...").
Result<JobSpec> parse_job_spec(std::string_view yaml, const std::string& source_name);

// Reads the file at `path` (ConfigDocument::load_file's bounds and errors) and parses it.
Result<JobSpec> load_job_spec(const std::string& path);

// The JSON form (see the top of this file). with_secrets=false leaves out every secret value.
nlohmann::json job_spec_to_json(const JobSpec& spec, bool with_secrets);

// Reads either JSON form back, checking the same rules as parse_job_spec; a secret without a
// value reads as value "". Absent fields take their defaults; an unknown field is an error.
// kInvalidArgument naming the field ("job spec: field 'resources.cpus': ...").
Result<JobSpec> job_spec_from_json(const nlohmann::json& json);

}  // namespace kiln::sched

#endif  // KILN_SCHED_JOB_SPEC_H_
