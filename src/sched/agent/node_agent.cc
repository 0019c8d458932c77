#include <kiln/sched/node_agent.h>

#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include <kiln/base/file_system.h>
#include <kiln/launch/rank_env.h>
#include <kiln/obs/http_client.h>
#include <kiln/obs/http_server.h>
#include <kiln/preflight/facts.h>
#include <kiln/sched/api.h>
#include <kiln/sched/flight_culprit.h>
#include <kiln/sched/rank_log.h>
#include <kiln/sched/rank_process.h>

#include "sched/agent/probe.h"

namespace kiln::sched {
namespace {

constexpr int64_t kNsPerMs = 1'000'000;
constexpr int64_t kRetryMaxMs = 1000;         // between reports while the coordinator is away
constexpr int64_t kUnassignedGraceMs = 5000;  // a rank nobody assigns any more gets this
constexpr size_t kLogReadBytesMax = 1 << 20;
constexpr int64_t kLogSweepMs = 10 * 60 * 1000;  // how often old jobs' logs are looked for
constexpr size_t kLogSweepEntriesMax = 20'000;   // entries one sweep may look at

std::string key_of(const std::string& job, int attempt, int rank) {
  return job + "/" + std::to_string(attempt) + "/" + std::to_string(rank);
}

// /proc/<pid>/stat's state letter ('R', 'S', 'T' for stopped, ...); '?' when unreadable.
char proc_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(in, text);
  // The command name in parentheses may hold spaces: the state follows the last ')'.
  const size_t close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return '?';
  return text[close + 2];
}

Status make_dir(const std::string& dir) {
  std::string path;
  for (size_t i = 0; i <= dir.size(); ++i) {
    if (i == dir.size() || (dir[i] == '/' && i > 0)) {
      path = dir.substr(0, i);
      if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
        return os_error(path, "mkdir", errno);
      }
    }
  }
  return Status();
}

struct HeldRank {
  RankAssignment assignment;
  bool started = false;
  bool stop_sent = false;
  pid_t pid = 0;
  std::string start_error;
  std::optional<RankExitInfo> exit;
  int64_t exit_mono_ns = 0;
  int culprit_rank = -1;
  std::string attempt_dir;
};

}  // namespace

struct JoinedAgent::Impl {
  JoinOptions options;
  Logger log;
  std::unique_ptr<obs::HttpClient> client;
  std::unique_ptr<obs::HttpServer> server;
  std::unique_ptr<RankSupervisor> supervisor;

  std::mutex mu;
  std::condition_variable wake;
  bool stopping = false;
  bool woken = false;
  std::map<std::string, HeldRank> ranks;  // GUARDED_BY(mu)
  std::atomic<int64_t> reports{0};
  int gpus = 0;  // NVIDIA devices on this node (/dev/nvidia<N>), counted at start
  // "<pid>.<start wall ns>": this agent process among every one that ever ran on the node.
  std::string incarnation;
  std::atomic<bool> probing{false};  // one probe at a time: it holds one of two HTTP workers
  std::thread loop;

  std::string attempt_dir(const std::string& job, int attempt) const {
    return options.work_dir + "/" + job + "/attempt-" + std::to_string(attempt);
  }

  // Supervisor thread: record the end, find whom the attempt's flight recorders blame, wake the
  // loop so the coordinator hears of it now.
  void on_exit(const RankExitInfo& info) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = ranks.find(info.key);
    if (it == ranks.end()) return;
    HeldRank& r = it->second;
    r.exit = info;
    r.exit_mono_ns = options.clock->monotonic_ns();
    if (!(info.exited && info.code == 0)) {
      Result<FlightDumpReport> dumps = culprit_from_flight_dumps(r.attempt_dir + "/flight");
      if (dumps.ok() && dumps->culprit) r.culprit_rank = dumps->culprit->rank;
    }
    woken = true;
    wake.notify_all();
  }

  AgentReport build_report() {
    AgentReport report;
    report.node = options.node_name;
    report.labels = options.labels;
    report.slots = options.slots;
    report.cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
    report.memory_bytes = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
    report.gpus = gpus;
    report.address =
        server ? "http://" + options.bind_address + ":" + std::to_string(server->port()) : "";
    report.incarnation = incarnation;
    const int64_t now = options.clock->monotonic_ns();
    std::lock_guard<std::mutex> lock(mu);
    for (auto& [key, r] : ranks) {
      RankReport rr;
      rr.job_id = r.assignment.job_id;
      rr.attempt = r.assignment.attempt;
      rr.rank = r.assignment.rank;
      rr.pid = r.pid;
      if (std::optional<RankProgress> p = supervisor->progress(key)) {
        rr.step = p->step;
        rr.step_ms = p->step_ms;
        rr.loss = p->loss;
        rr.tokens_per_s = p->tokens_per_s;
        rr.comm_exposed_ms = p->comm_exposed_ms;
        rr.progress_age_ms = p->updated_mono_ns > 0 ? (now - p->updated_mono_ns) / kNsPerMs : -1;
        // Rank 0 speaks for the job's curves (its loss is the job's); the others' step times
        // are in their own fields.
        if (rr.rank == 0) {
          for (const RankProgress::Recent& recent : p->recent) {
            StepSample sample = recent.sample;
            sample.age_ms = std::max<int64_t>(0, (now - recent.arrived_mono_ns) / kNsPerMs);
            rr.recent.push_back(sample);
          }
        }
      }
      if (!r.start_error.empty()) {
        rr.running = false;
        rr.exited = true;
        rr.code = 127;
        rr.start_error = r.start_error;
        rr.describe = r.start_error;
      } else if (!r.started) {
        // Assigned as stopped before it ever ran: it has nothing to stop.
        rr.running = false;
        rr.exited = true;
        rr.code = launch::kExitStoppedResumable;
        rr.stopped_by_agent = true;
        rr.describe = "rank " + std::to_string(rr.rank) + " was never started (stopped first)";
      } else if (r.exit) {
        rr.running = false;
        rr.exited = r.exit->exited;
        rr.code = r.exit->code;
        rr.stopped_by_agent = r.exit->stopped_by_agent;
        rr.describe = r.exit->describe() + " on node " + options.node_name;
        rr.ended_age_ms = (now - r.exit_mono_ns) / kNsPerMs;
        rr.culprit_rank = r.culprit_rank;
        rr.last_error = r.exit->last_stderr;
        rr.oom_killed = r.exit->oom_killed;
      } else {
        rr.running = true;
        rr.proc_state = proc_state(r.pid);
      }
      report.ranks.push_back(std::move(rr));
    }
    return report;
  }

  // Starts one assigned rank; on failure the rank is held with its error (reported, not retried).
  void start_rank(const std::string& key, HeldRank* r) {
    const RankAssignment& a = r->assignment;
    r->attempt_dir = attempt_dir(a.job_id, a.attempt);
    Status s = launch::check_job_id(a.job_id, "job");
    if (s.ok()) s = make_dir(r->attempt_dir + "/flight");
    RankSpawn spawn;
    spawn.rank = a.rank;
    spawn.argv = a.argv;
    spawn.env = a.env;
    spawn.env["KILN_FLIGHT_RECORDER_DIR"] = r->attempt_dir + "/flight";
    if (!options.rank_address.empty()) spawn.env["KILN_COMM_ADDR"] = options.rank_address;
    spawn.cwd = a.cwd;
    spawn.log_path = r->attempt_dir + "/rank-" + std::to_string(a.rank) + ".log";
    if (s.ok() && !a.user.empty()) {
      struct passwd* pw = getpwnam(a.user.c_str());
      if (pw == nullptr) {
        s = Status::invalid_argument("no Unix user '" + a.user + "' on node " + options.node_name);
      } else {
        spawn.uid = pw->pw_uid;
        spawn.gid = pw->pw_gid;
        // The rank writes its flight dumps as that user.
        if (chown(r->attempt_dir.c_str(), pw->pw_uid, pw->pw_gid) != 0 ||
            chown((r->attempt_dir + "/flight").c_str(), pw->pw_uid, pw->pw_gid) != 0) {
          s = os_error(r->attempt_dir, "chown", errno);
        }
      }
    }
    if (s.ok() && !a.checkpoint_dir.empty()) {
      s = make_dir(a.checkpoint_dir).with_context("checkpoint directory");
      // The team's user alone may enter it: another team's ranks cannot read its checkpoints.
      if (s.ok() && spawn.uid) {
        if (chown(a.checkpoint_dir.c_str(), *spawn.uid, *spawn.gid) != 0) {
          s = os_error(a.checkpoint_dir, "chown", errno);
        } else if (chmod(a.checkpoint_dir.c_str(), 0700) != 0) {
          s = os_error(a.checkpoint_dir, "chmod", errno);
        }
      }
    }
    if (s.ok()) {
      Result<pid_t> pid = supervisor->start(key, spawn);
      if (pid.ok()) {
        r->pid = *pid;
        r->started = true;
        log.info("rank started",
                 {{"job", a.job_id}, {"attempt", a.attempt}, {"rank", a.rank}, {"pid", *pid}});
        return;
      }
      s = pid.status();
    }
    r->start_error = "node " + options.node_name + " could not start rank " +
                     std::to_string(a.rank) + ": " + s.message();
    log.error("rank start failed", {{"job", a.job_id}, {"rank", a.rank}, {"error", s.to_string()}});
  }

  // Returns whether a rank was started or let go: the coordinator should hear of it now.
  bool apply(const AgentAnswer& answer) {
    std::lock_guard<std::mutex> lock(mu);
    bool changed = false;
    std::map<std::string, const RankAssignment*> wanted;
    for (const RankAssignment& a : answer.ranks)
      wanted[key_of(a.job_id, a.attempt, a.rank)] = &a;
    for (const auto& [key, a] : wanted) {
      auto it = ranks.find(key);
      if (it == ranks.end()) {
        HeldRank r;
        r.assignment = *a;
        if (!a->stop) start_rank(key, &r);
        ranks.emplace(key, std::move(r));
        changed = true;
        continue;
      }
      HeldRank& r = it->second;
      if (a->stop && r.started && !r.exit && !r.stop_sent) {
        Status s = supervisor->stop(key, a->grace_ms);
        if (!s.ok()) log.warn("stop failed", {{"rank", key}, {"error", s.to_string()}});
        // A rank the kernel stopped (SIGSTOP) takes no SIGTERM until it runs again.
        if (r.pid > 0) kill(-r.pid, SIGCONT);
        r.stop_sent = true;
      }
    }
    for (auto it = ranks.begin(); it != ranks.end();) {
      if (wanted.count(it->first) != 0) {
        ++it;
        continue;
      }
      HeldRank& r = it->second;
      if (r.started && !r.exit) {
        if (!r.stop_sent) {
          Status s = supervisor->stop(it->first, kUnassignedGraceMs);
          if (!s.ok()) log.warn("stop failed", {{"rank", it->first}, {"error", s.to_string()}});
          if (r.pid > 0) kill(-r.pid, SIGCONT);
          r.stop_sent = true;
        }
        ++it;
        continue;
      }
      if (r.started) {
        Status s = supervisor->forget(it->first);
        if (!s.ok()) log.warn("forget failed", {{"rank", it->first}, {"error", s.to_string()}});
      }
      it = ranks.erase(it);
      changed = true;
    }
    return changed;
  }

  // Removes the directories of jobs this node runs no rank of whose newest file is older than
  // keep_logs_ms (JoinOptions). Only "j-*" directories: the work directory may hold other things
  // (the agent's own log).
  void sweep_logs() {
    namespace fs = std::filesystem;
    if (options.keep_logs_ms <= 0) return;
    std::set<std::string> held;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (const auto& [key, r] : ranks)
        held.insert(r.assignment.job_id);
    }
    const auto cutoff =
        fs::file_time_type::clock::now() - std::chrono::milliseconds(options.keep_logs_ms);
    std::error_code ec;
    size_t walked = 0;  // over the whole sweep: it runs on the report loop's thread
    for (fs::directory_iterator it(options.work_dir, ec);
         !ec && it != fs::directory_iterator() && walked < kLogSweepEntriesMax; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.rfind("j-", 0) != 0 || held.count(name) != 0 || !it->is_directory(ec)) continue;
      bool recent = false;
      bool whole = true;  // the walk saw every entry (else the job is left for the next sweep)
      std::error_code wec;
      for (fs::recursive_directory_iterator f(it->path(), wec);
           !wec && f != fs::recursive_directory_iterator() && !recent; f.increment(wec)) {
        if (++walked >= kLogSweepEntriesMax) {
          whole = false;
          break;
        }
        recent = f->last_write_time(wec) > cutoff;
      }
      if (recent || wec || !whole) continue;
      fs::remove_all(it->path(), wec);
      if (wec) {
        log.warn("removing an old job's logs",
                 {{"dir", it->path().string()}, {"error", wec.message()}});
      } else {
        log.info("removed an old job's logs", {{"dir", it->path().string()}});
      }
    }
  }

  void run() {
    int64_t interval_ms = 500;
    int64_t failures = 0;
    int64_t swept_mono_ns = 0;
    bool answered = false;  // an answer was applied: `ranks` is the coordinator's intent
    while (true) {
      // Every kLogSweepMs, or twice per keep when that is shorter (a test's seconds).
      const int64_t sweep_ms = std::clamp<int64_t>(options.keep_logs_ms / 2, 1000, kLogSweepMs);
      // Only once the coordinator's answer says which jobs this node runs: a restarted agent
      // does not know its surviving ranks before that.
      if (answered && (options.clock->monotonic_ns() - swept_mono_ns > sweep_ms * 1'000'000 ||
                       swept_mono_ns == 0)) {
        sweep_logs();
        swept_mono_ns = options.clock->monotonic_ns();
      }
      AgentReport report = build_report();
      // replace: a byte that is not UTF-8 in a rank's text becomes U+FFFD, never an exception.
      Result<obs::HttpResponse> r = client->post(
          "/v1/agent/report",
          to_json(report).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
      int64_t wait_ms = interval_ms;
      if (r.ok() && r->status == 200) {
        nlohmann::json body = nlohmann::json::parse(r->body, nullptr, false);
        Result<AgentAnswer> answer = agent_answer_from_json(body);
        if (answer.ok()) {
          if (failures > 0) log.info("coordinator reachable again", {{"after_failures", failures}});
          failures = 0;
          ++reports;
          interval_ms = answer->heartbeat_interval_ms;
          // Ranks just started (or let go) are reported at once, not a heartbeat later.
          wait_ms = apply(*answer) ? 0 : interval_ms;
          answered = true;
        } else {
          log.error("bad answer from the coordinator", {{"error", answer.status().to_string()}});
        }
      } else {
        // Keep every rank running; try again soon.
        if (failures % 20 == 0) {
          log.warn("coordinator unreachable; ranks keep running",
                   {{"error",
                     r.ok() ? std::to_string(r->status) + " " + r->body : r.status().to_string()},
                    {"failures", failures}});
        }
        ++failures;
        wait_ms = std::min<int64_t>(100 * failures, kRetryMaxMs);
      }
      std::unique_lock<std::mutex> lock(mu);
      if (wait_ms > 0) {
        wake.wait_for(lock, std::chrono::milliseconds(wait_ms), [&] { return stopping || woken; });
      }
      woken = false;
      if (stopping) return;
    }
  }

  // Whether `req` carries the node token; else fills `out` with the 401.
  bool authorized(const obs::HttpRequest& req, obs::HttpResponse* out) const {
    out->content_type = "application/json";
    if (req.header("authorization") == "Bearer " + options.node_token) return true;
    out->status = 401;
    out->body = R"({"error":"the node token is needed"})";
    return false;
  }

  // This node's facts (kiln/preflight/facts.h), for the coordinator's preflight.
  obs::HttpResponse serve_facts(const obs::HttpRequest& req) {
    obs::HttpResponse out;
    if (!authorized(req, &out)) return out;
    std::vector<std::string> dirs = {options.work_dir};
    dirs.insert(dirs.end(), options.check_dirs.begin(), options.check_dirs.end());
    out.body = preflight::collect_node_facts(dirs).dump();
    // This node's wall clock as it answers: the asker's clock-offset figure (preflight health).
    out.headers.emplace_back("X-Kiln-Wall-Ns", std::to_string(options.clock->wall_ns()));
    // Which agent answered: the coordinator's pass holds for this incarnation only.
    out.headers.emplace_back("X-Kiln-Agent", incarnation);
    return out;
  }

  // Runs one of Kiln's own checks for the coordinator's full preflight (probe.h).
  obs::HttpResponse serve_probe(const obs::HttpRequest& req) {
    obs::HttpResponse out;
    if (!authorized(req, &out)) return out;
    Result<ProbeRequest> request =
        probe_request_from_json(nlohmann::json::parse(req.body, nullptr, false));
    if (!request.ok() || options.kiln_binary.empty()) {
      out.status = 400;
      out.body = nlohmann::json{{"error", request.ok() ? "this agent runs no probes"
                                                       : request.status().message()}}
                     .dump();
      return out;
    }
    if (probing.exchange(true)) {
      out.status = 503;
      out.body = R"({"error":"another probe is running on this node"})";
      return out;
    }
    // A trial runs as the job's team user would (the rank's rights, not the agent's).
    ProbeUser run_as;
    if (!request->user.empty()) {
      // getpwnam_r: ranks start on another thread, which looks users up too.
      struct passwd entry {};
      struct passwd* pw = nullptr;
      std::vector<char> buf(16384);
      if (getpwnam_r(request->user.c_str(), &entry, buf.data(), buf.size(), &pw) != 0) pw = nullptr;
      if (pw == nullptr) {
        probing = false;
        out.status = 400;
        out.body = nlohmann::json{{"error", "no Unix user '" + request->user + "' on node " +
                                                options.node_name}}
                       .dump();
        return out;
      }
      // Never root: a team mapped to uid or gid 0 is a misconfiguration, not a privilege.
      if (pw->pw_uid == 0 || pw->pw_gid == 0) {
        probing = false;
        out.status = 400;
        out.body =
            nlohmann::json{{"error", "user '" + request->user + "' on node " + options.node_name +
                                         " is root (uid or gid 0): a trial never runs as root"}}
                .dump();
        return out;
      }
      run_as = {pw->pw_uid, pw->pw_gid};
    }
    log.info("probe", {{"check", request->check}, {"rank", request->rank}});
    Result<slurm::CommandOutput> ran = slurm::run_command(
        probe_command(*request, options.kiln_binary, options.node_name, options.rank_address,
                      request->user.empty() ? nullptr : &run_as));
    probing = false;
    if (!ran.ok()) {
      out.status = 500;
      out.body = nlohmann::json{{"error", ran.status().message()}}.dump();
      return out;
    }
    out.body = to_json(ProbeResult{ran->exit_code, ran->out, ran->err}).dump();
    return out;
  }

  obs::HttpResponse serve_logs(const obs::HttpRequest& req) {
    obs::HttpResponse out;
    if (!authorized(req, &out)) return out;
    const std::string job = req.param("job");
    Status s = launch::check_job_id(job, "job");
    int attempt = 0;
    int rank = 0;
    int64_t offset = 0;
    int64_t bytes = static_cast<int64_t>(kLogReadBytesMax);
    try {
      attempt = std::stoi(req.param("attempt"));
      rank = std::stoi(req.param("rank"));
      offset = std::stoll(req.param("offset"));
      if (!req.param("bytes").empty()) bytes = std::stoll(req.param("bytes"));
    } catch (const std::exception&) {
      s = Status::invalid_argument("attempt, rank and offset must be integers");
    }
    if (s.ok() && (attempt < 0 || rank < 0 || offset < 0 || bytes <= 0)) {
      s = Status::invalid_argument("attempt, rank, offset and bytes must not be negative");
    }
    if (!s.ok()) {
      out.status = 400;
      out.body = nlohmann::json{{"error", s.message()}}.dump();
      return out;
    }
    const std::string path = attempt_dir(job, attempt) + "/rank-" + std::to_string(rank) + ".log";
    // At least one whole record fits in any read (read_rank_log requires it), at most 1 MiB.
    const size_t budget =
        std::clamp<size_t>(static_cast<size_t>(bytes), kRankLogRecordBytesMax, kLogReadBytesMax);
    Result<RankLogChunk> chunk = read_rank_log(path, offset, budget);
    if (!chunk.ok()) {
      out.status = chunk.status().is_not_found() ? 404 : 500;
      out.body =
          nlohmann::json{{"error", "node " + options.node_name + ": " + chunk.status().message()}}
              .dump();
      return out;
    }
    nlohmann::json lines = nlohmann::json::array();
    for (const std::string& line : chunk->lines) {
      nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
      if (!record.is_discarded()) lines.push_back(std::move(record));
    }
    out.body = nlohmann::json{{"lines", lines},
                              {"next", chunk->next_offset},
                              {"skipped_bytes", chunk->skipped_bytes},
                              {"node", options.node_name}}
                   .dump();
    return out;
  }
};

JoinedAgent::JoinedAgent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<JoinedAgent>> JoinedAgent::start(JoinOptions options, Logger log) {
  if (options.node_name.empty()) return Status::invalid_argument("--node-name is required");
  if (options.work_dir.empty() || options.work_dir[0] != '/') {
    return Status::invalid_argument("the work directory must be an absolute path, not '" +
                                    options.work_dir + "'");
  }
  KILN_RETURN_IF_ERROR(make_dir(options.work_dir).with_context("work directory"));
  auto impl = std::make_unique<Impl>();
  Impl* self = impl.get();
  impl->options = std::move(options);
  impl->log = std::move(log);
  impl->incarnation =
      std::to_string(getpid()) + "." + std::to_string(impl->options.clock->wall_ns());
  for (int i = 0; i < 64; ++i) {
    if (access(("/dev/nvidia" + std::to_string(i)).c_str(), F_OK) == 0) ++impl->gpus;
  }
  obs::HttpClientOptions client;
  client.base_url = impl->options.coordinator_url;
  client.bearer_token = impl->options.node_token;
  client.ca_cert_path = impl->options.ca_cert_path;
  client.connect_timeout_ms = static_cast<int>(impl->options.request_timeout_ms);
  client.io_timeout_ms = static_cast<int>(impl->options.request_timeout_ms);
  KILN_ASSIGN_OR_RETURN(impl->client, obs::HttpClient::create(client));
  RankSupervisor::Options sup;
  sup.on_exit = [self](const RankExitInfo& info) { self->on_exit(info); };
  sup.clock = impl->options.clock;
  sup.log = impl->log;
  KILN_ASSIGN_OR_RETURN(impl->supervisor, RankSupervisor::create(std::move(sup)));
  obs::HttpServerOptions http;
  http.bind_address = impl->options.bind_address;
  http.port = impl->options.port;
  http.threads = 2;
  impl->server = std::make_unique<obs::HttpServer>(http);
  impl->server->route("GET", "/v1/logs",
                      [self](const obs::HttpRequest& req) { return self->serve_logs(req); });
  impl->server->route("GET", "/v1/facts",
                      [self](const obs::HttpRequest& req) { return self->serve_facts(req); });
  impl->server->route("POST", "/v1/probe",
                      [self](const obs::HttpRequest& req) { return self->serve_probe(req); });
  impl->server->get("/healthz", [](const obs::HttpRequest&) {
    obs::HttpResponse r;
    r.body = "ok\n";
    return r;
  });
  KILN_RETURN_IF_ERROR(impl->server->start().with_context("the agent's endpoint"));
  impl->log.info("agent joined", {{"coordinator", impl->options.coordinator_url},
                                  {"node", impl->options.node_name},
                                  {"slots", impl->options.slots},
                                  {"endpoint_port", impl->server->port()}});
  impl->loop = std::thread([self] { self->run(); });
  return std::unique_ptr<JoinedAgent>(new JoinedAgent(std::move(impl)));
}

JoinedAgent::~JoinedAgent() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
    impl_->wake.notify_all();
  }
  if (impl_->loop.joinable()) impl_->loop.join();
  impl_->server->stop();
  impl_->supervisor.reset();  // kills what still runs
}

std::string JoinedAgent::address() const {
  return "http://" + impl_->options.bind_address + ":" + std::to_string(impl_->server->port());
}

int64_t JoinedAgent::reports_sent() const {
  return impl_->reports.load();
}

}  // namespace kiln::sched
