// The coordinator's HTTP routes (api.h): authentication, JSON in and out, audit.
#include <kiln/sched/api.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>
#include <utility>

#include <kiln/base/clock.h>
#include <kiln/base/json.h>
#include <kiln/obs/http_client.h>
#include <kiln/sched/rank_process.h>

#include "sched/coordinator/node_preflight.h"
#include "sched/coordinator/step_json.h"

namespace kiln::sched {
namespace {

using obs::HttpRequest;
using obs::HttpResponse;
using json = nlohmann::json;

// Bounds on what one agent report may carry; a node runs at most this many ranks.
constexpr size_t kReportRanksMax = 4096;
constexpr size_t kLogReadBytesMax = 1 << 20;

HttpResponse json_answer(int status, const json& body) {
  HttpResponse r;
  r.status = status;
  r.content_type = "application/json";
  r.body = body.dump() + "\n";
  return r;
}

HttpResponse error_answer(int status, const std::string& message) {
  HttpResponse r = json_answer(status, {{"error", message}});
  if (status == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"kiln\"");
  return r;
}

int http_status_of(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kUnavailable: return 503;
    case StatusCode::kAborted: return 409;
    default: return 500;
  }
}

std::string bearer_of(const HttpRequest& req) {
  const std::string h = req.header("authorization");
  constexpr std::string_view kPrefix = "Bearer ";
  if (h.size() <= kPrefix.size() || h.compare(0, kPrefix.size(), kPrefix) != 0) return "";
  return h.substr(kPrefix.size());
}

int64_t int_param(const HttpRequest& req, const std::string& name, int64_t fallback) {
  const std::string v = req.param(name);
  int64_t out = fallback;
  if (v.empty()) return fallback;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || ptr != v.data() + v.size()) return fallback;
  return out;
}

std::string iso(int64_t wall_ns) {
  return wall_ns == 0 ? std::string() : format_wall_time_utc(wall_ns);
}

template <typename T>
Result<T> field(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end()) return Status::invalid_argument(std::string("missing field '") + name + "'");
  try {
    return it->template get<T>();
  } catch (const json::exception&) {
    return Status::invalid_argument(std::string("field '") + name + "' has the wrong type");
  }
}

template <typename T>
T field_or(const json& j, const char* name, T fallback) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->template get<T>();
  } catch (const json::exception&) {
    return fallback;
  }
}

class Routes {
 public:
  explicit Routes(ApiContext context) : c_(std::move(context)) {}

  // The caller, or an answer to send instead (401/403).
  std::optional<HttpResponse> user(const HttpRequest& req, Caller* caller) const {
    const std::string token = bearer_of(req);
    if (token.empty()) return error_answer(401, "no token: send Authorization: Bearer <token>");
    std::optional<Caller> who = c_.tokens->caller_for(token);
    if (!who) {
      if (c_.tokens->is_node_token(token)) {
        return error_answer(403, "a node token may only report for its node");
      }
      return error_answer(401, "unknown token");
    }
    *caller = *who;
    return std::nullopt;
  }

  void audit(const Caller& who, const std::string& action, const std::string& object,
             const std::string& result) const {
    AuditRecord a;
    a.ts_ns = system_clock().wall_ns();
    a.who = who.name + " (team " + who.team + ")";
    a.action = action;
    a.object = object;
    a.result = result;
    Status s = c_.audit->append_audit(a);
    if (!s.ok()) c_.log.error("audit write failed", {{"error", s.to_string()}});
  }

  HttpResponse submit(const HttpRequest& req) const {
    Caller caller;
    if (auto denied = user(req, &caller)) return *denied;
    json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    if (!body.is_object()) return error_answer(400, "the body is not a JSON object");
    Result<std::string> yaml = field<std::string>(body, "spec");
    Result<std::string> workdir = field<std::string>(body, "workdir");
    if (!yaml.ok()) return error_answer(400, yaml.status().message());
    if (!workdir.ok()) return error_answer(400, workdir.status().message());
    const std::string source = field_or<std::string>(body, "source", "job.yaml");
    Result<JobSpec> spec = parse_job_spec(*yaml, source);
    if (!spec.ok()) {
      audit(caller, "submit", source, "refused: " + spec.status().message());
      return error_answer(400, spec.status().message());
    }
    const std::string name = spec->name;
    Result<JobRecord> job = c_.coordinator->submit(caller, std::move(*spec), *workdir);
    if (!job.ok()) {
      audit(caller, "submit", name, "refused: " + job.status().message());
      return error_answer(http_status_of(job.status()), job.status().message());
    }
    audit(caller, "submit", job->id, "accepted: " + name);
    HttpResponse r = json_answer(201, {{"id", job->id}, {"state", job->state}});
    r.headers.emplace_back("Location", "/v1/jobs/" + job->id);
    return r;
  }

  HttpResponse list(const HttpRequest& req) const {
    Caller caller;
    if (auto denied = user(req, &caller)) return *denied;
    Result<std::vector<JobStatus>> all = c_.coordinator->jobs(caller);
    if (!all.ok()) return error_answer(http_status_of(all.status()), all.status().message());
    json out = json::array();
    for (const JobStatus& s : *all)
      out.push_back(job_status_json(s));
    return json_answer(200, {{"jobs", out}});
  }

  HttpResponse status(const HttpRequest& req) const {
    Caller caller;
    if (auto denied = user(req, &caller)) return *denied;
    Result<JobStatus> s = c_.coordinator->job_detail(caller, req.path_params.at("id"));
    if (!s.ok()) return error_answer(http_status_of(s.status()), s.status().message());
    return json_answer(200, job_detail_json(*s));
  }

  HttpResponse events(const HttpRequest& req) const {
    Caller caller;
    if (auto denied = user(req, &caller)) return *denied;
    const int64_t after = int_param(req, "after", 0);
    const int64_t limit = std::clamp<int64_t>(int_param(req, "limit", 1000), 1, 10000);
    Result<std::vector<EventRecord>> events =
        c_.coordinator->events(caller, req.path_params.at("id"), after, static_cast<size_t>(limit));
    if (!events.ok()) {
      return error_answer(http_status_of(events.status()), events.status().message());
    }
    json out = json::array();
    for (const EventRecord& e : *events)
      out.push_back(event_json(e));
    return json_answer(200, {{"events", out}});
  }

  HttpResponse steps(const HttpRequest& req) const {
    Caller caller;
    if (auto denied = user(req, &caller)) return *denied;
    const std::string id = req.path_params.at("id");
    const int64_t max = std::clamp<int64_t>(int_param(req, "max", 2000), 64,
                                            static_cast<int64_t>(kStepPointsPerJobMax));
    Result<JobSteps> steps = c_.coordinator->steps(caller, id, static_cast<size_t>(max));
    if (!steps.ok()) return error_answer(http_status_of(steps.status()), steps.status().message());
    json out = step_columns_json(id, steps->points);
    out["stored"] = steps->stored;
    return json_answer(200, out);
  }

  HttpResponse cluster(const HttpRequest& req) const {
    Caller caller;
    if (auto denied = user(req, &caller)) return *denied;
    const Coordinator::ClusterFigures f = c_.coordinator->cluster_figures(caller);
    auto ratio = [](double v) { return std::isnan(v) ? json(nullptr) : json(v); };
    json storage = json::object();
    if (c_.lifecycle != nullptr) {
      for (const auto& [team, bytes] : c_.lifecycle->checkpoint_bytes_by_team())
        if (caller.admin || team == caller.team) storage[team] = bytes;
    }
    return json_answer(200, {{"goodput", ratio(f.goodput)},
                             {"ettr", ratio(f.ettr)},
                             {"jobs_by_state", f.jobs_by_state},
                             {"nodes_by_state", f.nodes_by_state},
                             {"idle_nodes", f.idle_nodes},
                             {"storage_by_team", storage}});
  }

  HttpResponse cancel(const HttpRequest& req) const {
    Caller caller;
    if (auto denied = user(req, &caller)) return *denied;
    const std::string id = req.path_params.at("id");
    Result<JobRecord> job = c_.coordinator->cancel(caller, id);
    audit(caller, "cancel", id, job.ok() ? "ok: " + job->state : job.status().message());
    if (!job.ok()) return error_answer(http_status_of(job.status()), job.status().message());
    Result<JobStatus> s = c_.coordinator->job(caller, id);
    if (!s.ok()) return error_answer(http_status_of(s.status()), s.status().message());
    return json_answer(200, job_status_json(*s));
  }

  HttpResponse logs(const HttpRequest& req) const {
    Caller caller;
    if (auto denied = user(req, &caller)) return *denied;
    const std::string id = req.path_params.at("id");
    const int64_t rank = int_param(req, "rank", 0);
    Result<JobStatus> st = c_.coordinator->job(caller, id);
    if (!st.ok()) return error_answer(http_status_of(st.status()), st.status().message());
    const int64_t attempt = int_param(req, "attempt", st->record.attempt);
    Result<std::string> node =
        c_.coordinator->node_of_rank(caller, id, static_cast<int>(rank), static_cast<int>(attempt));
    if (!node.ok()) return error_answer(http_status_of(node.status()), node.status().message());
    Result<std::vector<NodeRecord>> nodes = c_.coordinator->nodes();
    if (!nodes.ok()) return error_answer(500, nodes.status().message());
    std::string address;
    for (const NodeRecord& n : *nodes)
      if (n.name == *node) address = n.agent_address;
    if (address.empty()) {
      return error_answer(503, "node " + *node + " has no agent address to read logs from");
    }
    obs::HttpClientOptions o;
    o.base_url = address;
    o.bearer_token = c_.node_token;
    o.connect_timeout_ms = 2000;
    o.io_timeout_ms = 5000;
    Result<std::unique_ptr<obs::HttpClient>> client = obs::HttpClient::create(o);
    if (!client.ok()) return error_answer(503, client.status().message());
    const int64_t bytes =
        std::clamp<int64_t>(int_param(req, "bytes", kLogReadBytesMax), 1, kLogReadBytesMax);
    Result<HttpResponse> r = (*client)->get(
        "/v1/logs?job=" + id + "&attempt=" + std::to_string(attempt) +
        "&rank=" + std::to_string(rank) + "&offset=" + std::to_string(int_param(req, "offset", 0)) +
        "&bytes=" + std::to_string(bytes));
    if (!r.ok()) {
      return error_answer(503, "node " + *node + "'s agent: " + r.status().message());
    }
    return *r;
  }

  HttpResponse nodes(const HttpRequest& req) const {
    Caller caller;
    if (auto denied = user(req, &caller)) return *denied;
    Result<std::vector<NodeRecord>> all = c_.coordinator->nodes();
    if (!all.ok()) return error_answer(500, all.status().message());
    json out = json::array();
    const int64_t now_ns = wall_now_ns();
    for (const NodeRecord& n : *all) {
      json j = node_json(n);
      // How old the last preflight is, by this coordinator's clock (the one that recorded it).
      if (j["preflight"].is_object()) {
        j["preflight"]["age_s"] =
            std::max<int64_t>(0, (now_ns - n.preflight.checked_ns) / 1'000'000'000);
      }
      out.push_back(std::move(j));
    }
    return json_answer(200, {{"nodes", out}});
  }

  HttpResponse preflight(const HttpRequest& req) const {
    Caller caller;
    if (auto denied = user(req, &caller)) return *denied;
    // Facts name libraries, paths and the environment: an operator's business.
    if (!caller.admin) return error_answer(403, "preflight needs an admin token");
    Result<std::vector<NodeRecord>> all = c_.coordinator->nodes();
    if (!all.ok()) return error_answer(500, all.status().message());
    std::vector<NodeRecord> chosen;
    const std::string wanted = req.param("nodes");
    if (wanted.empty()) {
      for (const NodeRecord& n : *all)
        if (n.state != "down") chosen.push_back(n);
    } else {
      size_t start = 0;
      while (start <= wanted.size()) {
        const size_t comma = std::min(wanted.find(',', start), wanted.size());
        const std::string name = wanted.substr(start, comma - start);
        start = comma + 1;
        if (name.empty()) continue;
        auto it = std::find_if(all->begin(), all->end(),
                               [&](const NodeRecord& n) { return n.name == name; });
        if (it == all->end()) return error_answer(404, "no node " + name);
        if (std::none_of(chosen.begin(), chosen.end(),
                         [&](const NodeRecord& n) { return n.name == name; })) {
          chosen.push_back(*it);
        }
        if (chosen.size() > kPreflightNodesMax) break;
      }
    }
    if (chosen.size() > kPreflightNodesMax) {
      return error_answer(400, "preflight checks at most " + std::to_string(kPreflightNodesMax) +
                                   " nodes per request; name them with ?nodes=");
    }
    const std::string level = req.param("level").empty() ? "quick" : req.param("level");
    return run_preflight(caller, chosen, level, nullptr, wanted.empty() ? "*" : wanted);
  }

  // POST /v1/preflight {"job": YAML, "source", "workdir"[, "level", "team", "trial_steps",
  // "trial_nodes"]}: the nodes the job could run on, at the job's level (quick when it asks
  // none), and at full the job's trial run.
  HttpResponse preflight_job(const HttpRequest& req) const {
    Caller caller;
    if (auto denied = user(req, &caller)) return *denied;
    if (!caller.admin) return error_answer(403, "preflight needs an admin token");
    json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    if (!body.is_object()) return error_answer(400, "the body is not a JSON object");
    Result<std::string> yaml = field<std::string>(body, "job");
    Result<std::string> workdir = field<std::string>(body, "workdir");
    if (!yaml.ok()) return error_answer(400, yaml.status().message());
    if (!workdir.ok()) return error_answer(400, workdir.status().message());
    if (workdir->empty() || (*workdir)[0] != '/') {
      return error_answer(400, "workdir '" + *workdir + "' is not an absolute path");
    }
    const std::string source = field_or<std::string>(body, "source", "job.yaml");
    Result<JobSpec> spec = parse_job_spec(*yaml, source);
    if (!spec.ok()) return error_answer(400, spec.status().message());
    std::string level = field_or<std::string>(body, "level", "");
    if (level.empty()) {
      level = spec->preflight == PreflightLevel::kNone
                  ? "quick"
                  : std::string(preflight_level_name(spec->preflight));
    }
    const int steps = field_or<int>(body, "trial_steps", preflight::kTrialStepsDefault);
    const int trial_nodes = field_or<int>(body, "trial_nodes", preflight::kTrialNodesDefault);
    if (trial_nodes < 1 || trial_nodes > preflight::kTrialNodesMax) {
      return error_answer(400, "trial_nodes " + std::to_string(trial_nodes) + " is outside 1.." +
                                   std::to_string(preflight::kTrialNodesMax));
    }
    TrialCheckOptions trial;
    if (level == "full") {
      Result<preflight::TrialSpec> t = preflight::trial_from_command(spec->command, steps);
      if (!t.ok()) return error_answer(400, source + ": " + t.status().message());
      trial.spec = std::move(*t);
      trial.workdir = *workdir;
      trial.nodes = trial_nodes;
      // The trial runs with the rights the job's ranks would have: its team's Unix user.
      trial.user = c_.tokens->unix_user_of(field_or<std::string>(body, "team", caller.team));
    }
    Result<std::vector<NodeRecord>> all = c_.coordinator->nodes();
    if (!all.ok()) return error_answer(500, all.status().message());
    // The nodes the job could be placed on: up, of a GPU model it accepts, and idle: a full
    // check or a trial beside a running job would measure that job, and slow it.
    const std::vector<std::string> models = split_gpu_models(spec->gpu_model);
    const std::set<std::string> busy = c_.coordinator->busy_nodes();
    std::vector<NodeRecord> chosen;
    json skipped = json::array();
    for (const NodeRecord& n : *all) {
      if (n.state == "down") continue;
      if (busy.count(n.name) != 0) {
        skipped.push_back(n.name);
        continue;
      }
      auto model = n.labels.find("gpu_model");
      const std::string m = model == n.labels.end() ? "" : model->second;
      if (!models.empty() && std::find(models.begin(), models.end(), m) == models.end()) continue;
      chosen.push_back(n);
    }
    if (chosen.empty()) {
      return error_answer(
          409, "no idle node that is up can take job " + spec->name +
                   (skipped.empty() ? std::string()
                                    : " (" + std::to_string(skipped.size()) + " run jobs now)"));
    }
    if (chosen.size() > kPreflightNodesMax) {
      return error_answer(400, "job " + spec->name + " could run on " +
                                   std::to_string(chosen.size()) +
                                   " nodes; preflight checks at most " +
                                   std::to_string(kPreflightNodesMax) + " per request");
    }
    json extra = {{"busy", std::move(skipped)}};  // left out: they run jobs
    if (level == "full") extra["trial_user"] = trial.user.empty() ? "(the agents')" : trial.user;
    return run_preflight(caller, chosen, level, level == "full" ? &trial : nullptr,
                         "job " + spec->name, std::move(extra));
  }

  HttpResponse run_preflight(const Caller& caller, const std::vector<NodeRecord>& chosen,
                             const std::string& level, const TrialCheckOptions* trial,
                             const std::string& what, json extra = json::object()) const {
    if (level != "quick" && level != "full") {
      return error_answer(400, "level '" + level + "': quick or full");
    }
    if (c_.preflight == nullptr) return error_answer(503, "this coordinator runs no preflight");
    Result<preflight::PreflightReport> report = c_.preflight->check(chosen, level, trial);
    if (!report.ok()) {
      return error_answer(report.status().is_unavailable()                         ? 503
                          : report.status().code() == StatusCode::kInvalidArgument ? 400
                                                                                   : 500,
                          report.status().message());
    }
    audit(caller, "preflight", what, "ok");
    json body = preflight::report_json(*report);
    body["lock"] = c_.preflight->has_lock();
    body["level"] = level;
    for (auto& [key, value] : extra.items())
      body[key] = std::move(value);
    return json_answer(200, body);
  }

  HttpResponse cordon(const HttpRequest& req, bool on) const {
    Caller caller;
    if (auto denied = user(req, &caller)) return *denied;
    const std::string name = req.path_params.at("name");
    if (!caller.admin) {
      audit(caller, on ? "cordon" : "uncordon", name, "refused: not an admin token");
      return error_answer(403, "managing nodes needs an admin token");
    }
    std::string reason;
    if (on) {
      json body = json::parse(req.body, nullptr, false);
      reason = body.is_object() ? field_or<std::string>(body, "reason", "") : "";
      if (reason.empty()) return error_answer(400, "cordon needs a reason");
    }
    Result<NodeRecord> node =
        on ? c_.coordinator->cordon(caller, name, reason) : c_.coordinator->uncordon(caller, name);
    audit(caller, on ? "cordon" : "uncordon", name,
          node.ok() ? "ok: " + node->state : node.status().message());
    if (!node.ok()) return error_answer(http_status_of(node.status()), node.status().message());
    return json_answer(200, node_json(*node));
  }

  HttpResponse report(const HttpRequest& req) const {
    if (!c_.tokens->is_node_token(bearer_of(req))) {
      return error_answer(bearer_of(req).empty() ? 401 : 403, "agent reports need the node token");
    }
    json body = json::parse(req.body, nullptr, false);
    if (!body.is_object()) return error_answer(400, "the body is not a JSON object");
    Result<AgentReport> report = agent_report_from_json(body);
    if (!report.ok()) return error_answer(400, report.status().message());
    Result<AgentAnswer> answer = c_.coordinator->report(*report);
    if (!answer.ok()) {
      return error_answer(http_status_of(answer.status()), answer.status().message());
    }
    return json_answer(200, to_json(*answer));
  }

 private:
  ApiContext c_;
};

}  // namespace

json to_json(const AgentReport& report) {
  json ranks = json::array();
  for (const RankReport& r : report.ranks) {
    ranks.push_back({{"job", r.job_id},
                     {"attempt", r.attempt},
                     {"rank", r.rank},
                     {"pid", r.pid},
                     {"running", r.running},
                     {"step", r.step},
                     {"step_ms", r.step_ms},
                     // JSON has no NaN: a diverged loss travels as null.
                     {"loss", std::isfinite(r.loss) ? json(r.loss) : json(nullptr)},
                     {"tokens_per_s", r.tokens_per_s},
                     {"comm_exposed_ms", r.comm_exposed_ms},
                     {"recent", step_samples_json(r.recent)},
                     {"progress_age_ms", r.progress_age_ms},
                     {"proc_state", std::string(1, r.proc_state)},
                     {"exited", r.exited},
                     {"code", r.code},
                     {"stopped_by_agent", r.stopped_by_agent},
                     {"describe", r.describe},
                     {"ended_age_ms", r.ended_age_ms},
                     {"culprit_rank", r.culprit_rank},
                     {"start_error", r.start_error},
                     {"last_error", r.last_error},
                     {"oom_killed", r.oom_killed}});
  }
  return {{"node", report.node},
          {"labels", report.labels},
          {"slots", report.slots},
          {"cpus", report.cpus},
          {"memory_bytes", report.memory_bytes},
          {"gpus", report.gpus},
          {"address", report.address},
          {"incarnation", report.incarnation},
          {"ranks", ranks}};
}

Result<AgentReport> agent_report_from_json(const json& j) {
  AgentReport out;
  KILN_ASSIGN_OR_RETURN(out.node, field<std::string>(j, "node"));
  if (out.node.empty() || out.node.size() > 128) {
    return Status::invalid_argument("field 'node': 1 to 128 characters");
  }
  out.labels = field_or<std::map<std::string, std::string>>(j, "labels", {});
  out.slots = std::clamp(field_or<int>(j, "slots", 1), 0, 1 << 20);
  out.cpus = std::clamp(field_or<int>(j, "cpus", 0), 0, 1 << 20);
  out.address = field_or<std::string>(j, "address", "");
  out.incarnation = field_or<std::string>(j, "incarnation", "");
  if (out.incarnation.size() > 128) {
    return Status::invalid_argument("field 'incarnation': at most 128 characters");
  }
  out.memory_bytes = std::max<int64_t>(field_or<int64_t>(j, "memory_bytes", 0), 0);
  out.gpus = std::clamp(field_or<int>(j, "gpus", 0), 0, 1 << 16);
  auto ranks = j.find("ranks");
  if (ranks != j.end()) {
    if (!ranks->is_array()) return Status::invalid_argument("field 'ranks' is not an array");
    if (ranks->size() > kReportRanksMax) {
      return Status::invalid_argument("field 'ranks' has " + std::to_string(ranks->size()) +
                                      " entries, more than " + std::to_string(kReportRanksMax));
    }
    for (const json& r : *ranks) {
      if (!r.is_object()) return Status::invalid_argument("an entry of 'ranks' is not an object");
      RankReport rr;
      KILN_ASSIGN_OR_RETURN(rr.job_id, field<std::string>(r, "job"));
      KILN_ASSIGN_OR_RETURN(rr.attempt, field<int>(r, "attempt"));
      KILN_ASSIGN_OR_RETURN(rr.rank, field<int>(r, "rank"));
      rr.pid = field_or<pid_t>(r, "pid", 0);
      rr.running = field_or<bool>(r, "running", false);
      rr.step = field_or<int64_t>(r, "step", -1);
      rr.step_ms = field_or<double>(r, "step_ms", 0);
      rr.progress_age_ms = field_or<int64_t>(r, "progress_age_ms", -1);
      {
        auto loss = r.find("loss");
        rr.loss = loss == r.end()     ? 0
                  : loss->is_number() ? loss->get<double>()
                  : loss->is_null()   ? std::numeric_limits<double>::quiet_NaN()
                                      : 0;
      }
      rr.tokens_per_s = field_or<double>(r, "tokens_per_s", 0);
      rr.comm_exposed_ms = field_or<double>(r, "comm_exposed_ms", 0);
      if (auto recent = r.find("recent"); recent != r.end()) {
        rr.recent = step_samples_from_json(*recent);
      }
      const std::string ps = field_or<std::string>(r, "proc_state", "?");
      rr.proc_state = ps.empty() ? '?' : ps[0];
      rr.exited = field_or<bool>(r, "exited", false);
      rr.code = field_or<int>(r, "code", 0);
      rr.stopped_by_agent = field_or<bool>(r, "stopped_by_agent", false);
      rr.describe = utf8_text(field_or<std::string>(r, "describe", ""), 4096);
      rr.ended_age_ms = field_or<int64_t>(r, "ended_age_ms", 0);
      rr.culprit_rank = field_or<int>(r, "culprit_rank", -1);
      // Cut on a character: a split one would make the fault event unwritable (its JSON).
      rr.start_error = utf8_text(field_or<std::string>(r, "start_error", ""), 4096);
      rr.last_error = utf8_text(field_or<std::string>(r, "last_error", ""), kLastStderrBytes);
      rr.oom_killed = field_or<bool>(r, "oom_killed", false);
      out.ranks.push_back(std::move(rr));
    }
  }
  return out;
}

json to_json(const AgentAnswer& answer) {
  json ranks = json::array();
  for (const RankAssignment& a : answer.ranks) {
    ranks.push_back({{"job", a.job_id},
                     {"attempt", a.attempt},
                     {"rank", a.rank},
                     {"stop", a.stop},
                     {"grace_ms", a.grace_ms},
                     {"argv", a.argv},
                     {"env", a.env},
                     {"cwd", a.cwd},
                     {"team", a.team},
                     {"user", a.user},
                     {"checkpoint_dir", a.checkpoint_dir}});
  }
  return {{"heartbeat_interval_ms", answer.heartbeat_interval_ms},
          {"cordoned", answer.cordoned},
          {"ranks", ranks}};
}

Result<AgentAnswer> agent_answer_from_json(const json& j) {
  AgentAnswer out;
  out.heartbeat_interval_ms =
      std::clamp<int64_t>(field_or<int64_t>(j, "heartbeat_interval_ms", 500), 50, 60000);
  out.cordoned = field_or<bool>(j, "cordoned", false);
  auto ranks = j.find("ranks");
  if (ranks == j.end() || !ranks->is_array()) {
    return Status::invalid_argument("the answer has no 'ranks' array");
  }
  if (ranks->size() > kReportRanksMax) {
    return Status::invalid_argument("the answer assigns more than " +
                                    std::to_string(kReportRanksMax) + " ranks");
  }
  for (const json& r : *ranks) {
    RankAssignment a;
    KILN_ASSIGN_OR_RETURN(a.job_id, field<std::string>(r, "job"));
    KILN_ASSIGN_OR_RETURN(a.attempt, field<int>(r, "attempt"));
    KILN_ASSIGN_OR_RETURN(a.rank, field<int>(r, "rank"));
    KILN_ASSIGN_OR_RETURN(a.argv, field<std::vector<std::string>>(r, "argv"));
    a.stop = field_or<bool>(r, "stop", false);
    a.grace_ms = field_or<int64_t>(r, "grace_ms", 5000);
    a.env = field_or<std::map<std::string, std::string>>(r, "env", {});
    a.cwd = field_or<std::string>(r, "cwd", "");
    a.team = field_or<std::string>(r, "team", "");
    a.user = field_or<std::string>(r, "user", "");
    a.checkpoint_dir = field_or<std::string>(r, "checkpoint_dir", "");
    out.ranks.push_back(std::move(a));
  }
  return out;
}

json job_status_json(const JobStatus& s) {
  const JobRecord& j = s.record;
  return {{"id", j.id},
          {"name", j.spec.name},
          {"state", j.state},
          {"attempt", j.attempt},
          {"nodes", j.nodes},
          {"team", j.team},
          {"restarts", j.restarts},
          {"max_restarts", j.spec.max_restarts},
          {"reason", j.reason},
          {"waiting", s.waiting},
          {"waiting_kind", s.waiting_kind},
          {"queue", j.spec.queue},
          {"queue_position", s.queue_position},
          {"goodput", s.goodput},
          {"last_step", j.last_step},
          {"submitted", iso(j.submitted_ns)},
          {"admitted", iso(j.admitted_ns)},
          {"running_since", iso(j.running_ns)},
          {"finished", iso(j.finished_ns)},
          {"workdir", j.workdir},
          {"spec", job_spec_to_json(j.spec, /*with_secrets=*/false)}};
}

json job_detail_json(const JobStatus& s) {
  json out = job_status_json(s);
  json ranks = json::array();
  for (const RankStatus& r : s.ranks) {
    ranks.push_back({{"rank", r.rank},
                     {"node", r.node},
                     {"state", r.state},
                     {"step", r.step},
                     {"step_ms", r.step_ms},
                     {"compute_ms", r.compute_ms},
                     {"comm_exposed_ms", r.comm_exposed_ms},
                     {"describe", r.describe},
                     {"straggler", r.straggler},
                     {"z", std::isfinite(r.z) ? json(r.z) : json(nullptr)}});
  }
  json signatures = json::array();
  for (const ErrorSignature& e : s.signatures) {
    signatures.push_back({{"kind", e.kind},
                          {"text", e.text},
                          {"attempt", e.attempt},
                          {"rank", e.rank},
                          {"node", e.node},
                          {"step", e.step}});
  }
  out["ranks"] = std::move(ranks);
  out["signatures"] = std::move(signatures);
  return out;
}

json event_json(const EventRecord& e) {
  json out = {{"seq", e.seq}, {"ts", iso(e.ts_ns)}, {"type", e.type}, {"attempt", e.attempt}};
  if (!e.job_id.empty()) out["job"] = e.job_id;
  // A fault's cause, rank and node (and any other detail) sit beside type: scripts read them
  // as top-level fields.
  if (e.detail.is_object()) {
    for (const auto& [key, value] : e.detail.items())
      if (!out.contains(key)) out[key] = value;
  }
  return out;
}

json node_json(const NodeRecord& n) {
  return {{"name", n.name},
          {"state", n.state},
          {"labels", n.labels},
          {"reason", n.reason},
          {"slots", n.slots},
          {"since", iso(n.state_since_ns)},
          {"recent_faults", n.fault_ns.size()},
          {"preflight", n.preflight.level.empty() ? json(nullptr)
                                                  : json{{"level", n.preflight.level},
                                                         {"passed", n.preflight.passed},
                                                         {"checked", iso(n.preflight.checked_ns)},
                                                         {"summary", n.preflight.summary}}}};
}

void add_api_routes(obs::HttpServer* server, const ApiContext& context) {
  auto routes = std::make_shared<Routes>(context);
  server->route("POST", "/v1/jobs", [routes](const HttpRequest& r) { return routes->submit(r); });
  server->route("GET", "/v1/jobs", [routes](const HttpRequest& r) { return routes->list(r); });
  server->route("GET", "/v1/jobs/{id}",
                [routes](const HttpRequest& r) { return routes->status(r); });
  server->route("GET", "/v1/jobs/{id}/events",
                [routes](const HttpRequest& r) { return routes->events(r); });
  server->route("GET", "/v1/jobs/{id}/steps",
                [routes](const HttpRequest& r) { return routes->steps(r); });
  server->route("GET", "/v1/cluster",
                [routes](const HttpRequest& r) { return routes->cluster(r); });
  server->route("POST", "/v1/jobs/{id}/cancel",
                [routes](const HttpRequest& r) { return routes->cancel(r); });
  server->route("GET", "/v1/jobs/{id}/logs",
                [routes](const HttpRequest& r) { return routes->logs(r); });
  server->route("GET", "/v1/nodes", [routes](const HttpRequest& r) { return routes->nodes(r); });
  server->route("POST", "/v1/nodes/{name}/cordon",
                [routes](const HttpRequest& r) { return routes->cordon(r, true); });
  server->route("POST", "/v1/nodes/{name}/uncordon",
                [routes](const HttpRequest& r) { return routes->cordon(r, false); });
  server->route("GET", "/v1/preflight",
                [routes](const HttpRequest& r) { return routes->preflight(r); });
  server->route("POST", "/v1/preflight",
                [routes](const HttpRequest& r) { return routes->preflight_job(r); });
  server->route("POST", "/v1/agent/report",
                [routes](const HttpRequest& r) { return routes->report(r); });
}

}  // namespace kiln::sched
