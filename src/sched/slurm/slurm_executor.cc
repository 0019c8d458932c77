// The Slurm executor's loop: intent, observe, act, report (slurm.h).
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <utility>

#include <kiln/base/file_system.h>
#include <kiln/sched/slurm.h>

#include <kiln/sched/command.h>

namespace kiln::sched {
namespace {

// The batch script of every allocation: one Kiln node agent per node (srun, one task per node,
// all of the node's allocated CPUs), which then starts the attempt's ranks as the coordinator
// tells it. Everything it needs comes in the job's environment (sbatch passes its own), so the
// script holds no secret and is the same for every job.
constexpr const char* kBatchScript = R"SH(#!/bin/bash
# Written by `kiln serve --executor slurm`: one Kiln node agent per node of this allocation; the
# agents join the coordinator at $KILN_COORDINATOR and run the ranks it assigns to their node.
# Each agent serves its ranks' logs (to the coordinator, with the node token) on the address its
# node uses to reach the coordinator, which is the one the coordinator can reach it back on.
set -u
args=(agent --join "$KILN_COORDINATOR" --slots "$KILN_SLOTS" --metrics-port 0)
[ -n "${KILN_RANK_ADDRESS:-}" ] && args+=(--rank-address "$KILN_RANK_ADDRESS")
exec srun --ntasks-per-node=1 --cpus-per-task="${SLURM_CPUS_ON_NODE:-1}" --kill-on-bad-exit=0 \
  --mpi=none bash -c 'd="$KILN_AGENT_DIR/$SLURMD_NODENAME" && mkdir -p "$d" || exit 1
    host=${KILN_COORDINATOR#*://}; host=${host%%[:/]*}
    read -r ip _ < <(getent ahostsv4 "$host" 2>/dev/null)
    route=$(ip -4 -o route get "${ip:-$host}" 2>/dev/null)
    if [[ $route == *" src "* ]]; then src=${route#* src }; set -- "$@" --logs-bind "${src%% *}"; fi
    exec "$KILN_BIN" --log-file "$d/agent.log" "$@" --node-name "$SLURMD_NODENAME" --work-dir "$d"' \
  kiln-agent "${args[@]}"
)SH";

// "<prefix>.<job>.<attempt>" -> (job, attempt); false for anyone else's job.
bool parse_name(const std::string& name, const std::string& prefix, std::string* job,
                int* attempt) {
  if (name.rfind(prefix + ".", 0) != 0) return false;
  const size_t dot = name.rfind('.');
  if (dot <= prefix.size()) return false;
  const std::string tail = name.substr(dot + 1);
  if (tail.empty() || tail.size() > 9 ||
      !std::all_of(tail.begin(), tail.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  *job = name.substr(prefix.size() + 1, dot - prefix.size() - 1);
  *attempt = std::stoi(tail);
  return !job->empty();
}

int64_t id_number(const std::string& id) {
  int64_t v = 0;
  for (char c : id) {
    if (c < '0' || c > '9') break;
    v = v * 10 + (c - '0');
  }
  return v;
}

// Slurm keeps a node's reason whole, but a reason is for people: Kiln's are cut at this.
constexpr size_t kReasonMax = 200;

std::string first_line(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  return line.size() > 400 ? line.substr(0, 400) : line;
}

}  // namespace

SlurmExecutor::SlurmExecutor(SlurmOptions options, Coordinator* coordinator, Logger log)
    : options_(std::move(options)), coordinator_(coordinator), log_(std::move(log)) {}

SlurmExecutor::~SlurmExecutor() {
  stop();
}

Result<std::string> SlurmExecutor::run(const std::vector<std::string>& argv) {
  slurm::CommandSpec spec;
  spec.argv = argv;
  spec.env = options_.env;
  spec.timeout_ms = options_.command_timeout_ms;
  KILN_ASSIGN_OR_RETURN(slurm::CommandOutput out, slurm::run_command(spec));
  if (out.exit_code != 0) {
    std::string err = first_line(out.err.empty() ? out.out : out.err);
    return Status::unavailable(slurm::command_line(argv) + ": exit " +
                               std::to_string(out.exit_code) + (err.empty() ? "" : ": " + err));
  }
  return std::move(out.out);
}

Status SlurmExecutor::start() {
  if (options_.kiln_binary.empty() || options_.kiln_binary[0] != '/') {
    return Status::invalid_argument("the Slurm executor needs the kiln binary's absolute path");
  }
  KILN_RETURN_IF_ERROR(make_dirs_durably(posix_file_system(), options_.work_dir + "/allocations"));
  KILN_RETURN_IF_ERROR(make_dirs_durably(posix_file_system(), options_.work_dir + "/nodes"));
  script_path_ = options_.work_dir + "/kiln-agents.sbatch";
  {
    const std::string tmp = script_path_ + ".tmp";
    std::ofstream out(tmp, std::ios::trunc);
    out << kBatchScript;
    out.close();
    if (!out) return Status::io_error(tmp + ": cannot write the batch script");
    if (chmod(tmp.c_str(), 0755) != 0) return os_error(tmp, "chmod", errno);
    if (rename(tmp.c_str(), script_path_.c_str()) != 0) {
      return os_error(script_path_, "rename", errno);
    }
  }
  // Slurm must answer before the coordinator says it serves.
  Result<std::string> probe = run({"sinfo", "-h", "-o", "%P"});
  if (!probe.ok()) {
    return probe.status().with_context("Slurm does not answer (is SLURM_CONF set?)");
  }
  KILN_RETURN_IF_ERROR(round());
  thread_ = std::thread([this] {
    while (!stopping_.load()) {
      Status s = round();
      if (!s.ok()) log_.warn("slurm round", {{"error", s.to_string()}});
      for (int64_t waited = 0; waited < options_.poll_ms && !stopping_.load(); waited += 50)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  return Status();
}

void SlurmExecutor::stop() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
}

Status SlurmExecutor::observe(ExecutorReport* report, std::vector<SlurmJob>* ours) {
  std::vector<std::string> sinfo = {"sinfo", "-N", "-h", "-o", kSinfoFormat};
  if (!options_.partition.empty()) sinfo.insert(sinfo.end(), {"-p", options_.partition});
  KILN_ASSIGN_OR_RETURN(std::string nodes_text, run(sinfo));
  KILN_ASSIGN_OR_RETURN(report->nodes, parse_sinfo(nodes_text));
  KILN_ASSIGN_OR_RETURN(std::string jobs_text,
                        run({"squeue", "-h", "-t", "all", "-o", kSqueueFormat}));
  KILN_ASSIGN_OR_RETURN(std::vector<SlurmJob> jobs, parse_squeue(jobs_text));
  // Per (job, attempt) the newest allocation of that name (a name is submitted once, but an
  // administrator may have requeued or resubmitted one by hand).
  std::map<std::pair<std::string, int>, SlurmJob> by_name;
  for (SlurmJob& j : jobs) {
    std::string job;
    int attempt = 0;
    if (!parse_name(j.name, options_.name_prefix, &job, &attempt)) continue;
    auto key = std::make_pair(job, attempt);
    auto it = by_name.find(key);
    if (it == by_name.end() || id_number(j.id) > id_number(it->second.id)) by_name[key] = j;
  }
  for (auto& [key, j] : by_name) {
    ExternalAllocation a;
    a.job_id = key.first;
    a.attempt = key.second;
    a.id = j.id;
    a.state = j.state;
    a.reason = j.reason;
    a.nodes = j.nodes;
    a.ended = slurm_state_ended(j.state);
    report->allocations.push_back(std::move(a));
    ours->push_back(j);
  }
  return Status();
}

Status SlurmExecutor::submit(const AllocationIntent& a, ExecutorReport* report) {
  std::vector<std::string> argv = {
      "sbatch", "--parsable", "--job-name=" + a.name, "--nodes=" + std::to_string(a.nodes.size()),
      "--ntasks-per-node=" + std::to_string(a.ranks_per_node),
      "--cpus-per-task=" + std::to_string(std::max(a.cpus_per_rank, 1)),
      // Kiln restarts a failed attempt itself, as a new allocation.
      "--no-requeue", "--output=" + options_.work_dir + "/allocations/%x.%j.out"};
  auto joined = [](const std::vector<std::string>& names) {
    std::string out;
    for (const std::string& n : names)
      out += (out.empty() ? "" : ",") + n;
    return out;
  };
  // Kiln's placement exactly, or (manager_places) Slurm's own among the nodes Kiln accepts.
  const std::string nodelist = a.manager_places ? "" : joined(a.nodes);
  if (!a.manager_places) argv.push_back("--nodelist=" + nodelist);
  if (a.manager_places && !a.exclude.empty()) argv.push_back("--exclude=" + joined(a.exclude));
  if (a.memory_per_rank_bytes > 0) {
    const int64_t per_cpu = a.memory_per_rank_bytes / std::max(a.cpus_per_rank, 1);
    argv.push_back("--mem-per-cpu=" + std::to_string((per_cpu + (1 << 20) - 1) >> 20) + "M");
  }
  if (a.gpus_per_rank > 0) {
    argv.push_back("--gres=gpu:" + std::to_string(a.gpus_per_rank * a.ranks_per_node));
  }
  if (a.time_limit_ms > 0) {
    // Kiln stops the attempt at its limit (ranks checkpoint); Slurm's limit comes later, as a
    // backstop: the limit plus ten minutes, in whole minutes.
    argv.push_back("--time=" + std::to_string((a.time_limit_ms + 60'000 - 1) / 60'000 + 10));
  }
  if (!options_.partition.empty()) argv.push_back("--partition=" + options_.partition);
  if (!a.workdir.empty()) argv.push_back("--chdir=" + a.workdir);
  argv.push_back(script_path_);
  slurm::CommandSpec spec;
  spec.argv = argv;
  spec.env = options_.env;
  spec.env.insert(spec.env.end(), {{"KILN_BIN", options_.kiln_binary},
                                   {"KILN_COORDINATOR", options_.coordinator_url},
                                   {"KILN_NODE_TOKEN", options_.node_token},
                                   {"KILN_SLOTS", std::to_string(a.ranks_per_node)},
                                   {"KILN_AGENT_DIR", options_.work_dir + "/nodes"},
                                   {"KILN_RANK_ADDRESS", options_.rank_address}});
  if (!options_.ca_cert.empty()) spec.env.emplace_back("KILN_CA_CERT", options_.ca_cert);
  spec.timeout_ms = options_.command_timeout_ms;
  Result<slurm::CommandOutput> out = slurm::run_command(spec);
  std::string error;
  if (!out.ok()) {
    error = out.status().to_string();
  } else if (out->exit_code != 0) {
    error = first_line(out->err.empty() ? out->out : out->err);
    if (error.empty()) error = "sbatch exited " + std::to_string(out->exit_code);
  }
  if (!error.empty()) {
    report->submit_errors[a.job_id] = error;
    log_.warn("sbatch failed", {{"job", a.job_id}, {"attempt", a.attempt}, {"error", error}});
    return Status();
  }
  ExternalAllocation s;
  s.job_id = a.job_id;
  s.attempt = a.attempt;
  s.id = first_line(out->out).substr(0, first_line(out->out).find(';'));  // "id[;cluster]"
  s.state = "PENDING";
  if (!a.manager_places) s.nodes = a.nodes;  // else known once Slurm runs it
  log_.info("allocation submitted", {{"job", a.job_id},
                                     {"attempt", a.attempt},
                                     {"slurm_job", s.id},
                                     {"nodes", a.manager_places ? "(Slurm's choice)" : nodelist}});
  report->submitted.push_back(std::move(s));
  return Status();
}

Status SlurmExecutor::round() {
  ExecutorIntent intent = coordinator_->executor_intent(options_.name_prefix);
  ExecutorReport report;
  std::vector<SlurmJob> ours;
  KILN_RETURN_IF_ERROR(observe(&report, &ours));

  // Drains first: a node Kiln readmits is resumed before an allocation asks for it.
  for (const ExternalNode& n : report.nodes) {
    auto want = intent.drains.find(n.name);
    const bool ours_drain = n.drained && n.reason.rfind("kiln:", 0) == 0;
    std::vector<std::string> argv;
    // Kiln's own drain whose reason moved on (suspect, then cordoned) is drained again with the
    // new reason; the first 60 characters decide, in case Slurm shortens what it keeps.
    const bool reason_moved =
        want != intent.drains.end() && ours_drain &&
        n.reason.substr(0, 60) != want->second.substr(0, std::min<size_t>(60, kReasonMax));
    if (want != intent.drains.end() && (!n.drained || reason_moved)) {
      argv = {"scontrol", "update", "NodeName=" + n.name, "State=DRAIN",
              "Reason=" + want->second.substr(0, kReasonMax)};
    } else if (want == intent.drains.end() && ours_drain) {
      argv = {"scontrol", "update", "NodeName=" + n.name, "State=RESUME"};
    }
    if (argv.empty()) continue;
    Result<std::string> done = run(argv);
    if (!done.ok()) {
      log_.warn("scontrol update failed", {{"node", n.name}, {"error", done.status().to_string()}});
    } else {
      log_.info("node state set in Slurm", {{"node", n.name}, {"command", argv[3]}});
    }
  }

  std::set<std::pair<std::string, int>> wanted;
  for (const AllocationIntent& a : intent.allocations)
    wanted.insert({a.job_id, a.attempt});
  // Allocations nobody wants any more (the attempt ended, the job was cancelled): scancel.
  for (const ExternalAllocation& a : report.allocations) {
    if (a.ended || wanted.count({a.job_id, a.attempt}) != 0) continue;
    Result<std::string> done = run({"scancel", a.id});
    if (!done.ok()) {
      log_.warn("scancel failed", {{"slurm_job", a.id}, {"error", done.status().to_string()}});
    } else {
      log_.info("allocation cancelled",
                {{"job", a.job_id}, {"attempt", a.attempt}, {"slurm_job", a.id}});
    }
  }
  // Wanted allocations Slurm has never seen: sbatch. One whose allocation ended is not
  // submitted again: the coordinator turns the end into a fault and a new attempt.
  std::set<std::pair<std::string, int>> known;
  for (const ExternalAllocation& a : report.allocations)
    known.insert({a.job_id, a.attempt});
  for (const AllocationIntent& a : intent.allocations) {
    if (known.count({a.job_id, a.attempt}) != 0) continue;
    KILN_RETURN_IF_ERROR(submit(a, &report));
  }
  return coordinator_->executor_report(report);
}

}  // namespace kiln::sched
