// The coordinator's client commands: submit, status, events, logs, cancel, nodes, cordon,
// uncordon. Each resolves the server and token (server_address.h), calls the API (sched/api.h)
// with deadlines, and prints a table or, with --json, JSON lines (the scripted interface).

#include <chrono>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include <kiln/obs/http_client.h>

#include "cli/client.h"
#include "cli/cmd_logs.h"
#include "cli/command.h"

namespace kiln::cli {
namespace {

using json = nlohmann::json;

constexpr int64_t kFollowPollMs = 500;

std::string text_of(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return "";
  return j[key].is_string() ? j[key].get<std::string>() : j[key].dump();
}

std::string join_nodes(const json& nodes) {
  std::string out;
  if (!nodes.is_array()) return out;
  for (const json& n : nodes)
    out += (out.empty() ? "" : ",") + n.get<std::string>();
  return out;
}

void print_event(const json& e) {
  std::cout << text_of(e, "ts") << "  " << std::left << std::setw(11) << text_of(e, "type")
            << " attempt " << text_of(e, "attempt");
  for (const char* key : {"slurm_job_id", "cause", "rank", "node", "nodes", "why", "message",
                          "reason", "backoff_ms", "restart", "by"}) {
    if (e.contains(key)) std::cout << "  " << key << "=" << text_of(e, key);
  }
  std::cout << "\n";
}

int run_submit(const ClientFlags& flags, const std::string& path) {
  Result<JobFile> job = read_job_file(path);
  if (!job.ok()) return report_error("submit", job.status());
  Client c = connect(flags, "submit");
  if (!c.http) return c.error;
  int code = 0;
  Result<json> body = call(
      c.http->post("/v1/jobs",
                   json{{"spec", job->text}, {"source", path}, {"workdir", job->workdir}}.dump()),
      201, "submit", &code);
  if (!body.ok()) return code;
  if (flags.json) {
    std::cout << json{{"id", (*body)["id"]}, {"state", (*body)["state"]}}.dump() << "\n";
  } else {
    std::cout << text_of(*body, "id") << "\n";
  }
  return kExitOk;
}

int run_status(const ClientFlags& flags, const std::string& id) {
  Client c = connect(flags, "status");
  if (!c.http) return c.error;
  int code = 0;
  Result<json> body =
      call(c.http->get(id.empty() ? "/v1/jobs" : "/v1/jobs/" + id), 200, "status", &code);
  if (!body.ok()) return code;
  std::vector<json> jobs;
  if (id.empty()) {
    for (const json& j : (*body)["jobs"])
      jobs.push_back(j);
  } else {
    jobs.push_back(*body);
  }
  if (flags.json) {
    for (json& j : jobs) {
      j.erase("spec");  // `kiln status` is the state; the spec is in the API's answer
      std::cout << j.dump() << "\n";
    }
    return kExitOk;
  }
  std::cout << std::left << std::setw(10) << "ID" << std::setw(20) << "NAME" << std::setw(11)
            << "STATE" << std::setw(8) << "ATTEMPT" << std::setw(8) << "STEP" << std::setw(9)
            << "GOODPUT"
            << "NODES / WHY\n";
  for (const json& j : jobs) {
    std::ostringstream goodput;
    goodput << std::fixed << std::setprecision(2) << j.value("goodput", 0.0);
    std::string where = join_nodes(j["nodes"]);
    const std::string state = text_of(j, "state");
    if ((state == "queued" || state == "restarting") && !text_of(j, "waiting").empty()) {
      where = text_of(j, "waiting");
      if (j.value("queue_position", 0) > 0) {
        where = "#" + std::to_string(j.value("queue_position", 0)) + " in queue " +
                text_of(j, "queue") + ": " + where;
      }
    } else if ((state == "failed" || state == "cancelled") && !text_of(j, "reason").empty()) {
      where = text_of(j, "reason");
    }
    std::cout << std::setw(10) << text_of(j, "id") << std::setw(20) << text_of(j, "name")
              << std::setw(11) << state << std::setw(8) << text_of(j, "attempt") << std::setw(8)
              << text_of(j, "last_step") << std::setw(9) << goodput.str() << where << "\n";
  }
  // One job: what its ranks are doing and what its failures came down to.
  if (!id.empty()) {
    const json& j = jobs.front();
    if (j.contains("ranks") && j["ranks"].is_array() && !j["ranks"].empty()) {
      std::cout << "\nranks:\n";
      for (const json& r : j["ranks"]) {
        std::ostringstream line;
        line << "  rank " << text_of(r, "rank") << " on " << text_of(r, "node") << ": "
             << text_of(r, "state") << ", step " << text_of(r, "step");
        if (r.value("straggler", false) && r.contains("z") && r["z"].is_number()) {
          line << std::fixed << std::setprecision(1) << ", STRAGGLER (z " << r["z"].get<double>()
               << ")";
        }
        std::cout << line.str() << "\n";
      }
    }
    if (j.contains("signatures") && j["signatures"].is_array() && !j["signatures"].empty()) {
      std::cout << "\nerrors (attempt: what happened):\n";
      for (const json& e : j["signatures"])
        std::cout << "  " << text_of(e, "attempt") << ": " << text_of(e, "text") << "\n";
    }
  }
  return kExitOk;
}

// "1.5 GiB", "300 MiB", "12 KiB", "0 B".
std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  size_t u = 0;
  while (bytes >= 1024 && u + 1 < std::size(units)) {
    bytes /= 1024;
    ++u;
  }
  std::ostringstream out;
  out << std::fixed << std::setprecision(u == 0 || bytes >= 100 ? 0 : 1) << bytes << " "
      << units[u];
  return out.str();
}

// "running 3, queued 1" from {"running": 3, "queued": 1}.
std::string counts_line(const json& counts) {
  std::string out;
  if (!counts.is_object()) return "-";
  for (const auto& [state, n] : counts.items())
    out += (out.empty() ? "" : ", ") + state + " " + n.dump();
  return out.empty() ? "none" : out;
}

int run_cluster_status(const ClientFlags& flags) {
  Client c = connect(flags, "status");
  if (!c.http) return c.error;
  int code = 0;
  Result<json> body = call(c.http->get("/v1/cluster"), 200, "status", &code);
  if (!body.ok()) return code;
  if (flags.json) {
    std::cout << body->dump() << "\n";
    return kExitOk;
  }
  auto percent = [&](const char* key) {
    const json& v = (*body)[key];
    if (!v.is_number()) return std::string("-");
    std::ostringstream out;
    out << std::fixed << std::setprecision(1) << 100 * v.get<double>() << "%";
    return out.str();
  };
  std::cout << "goodput " << percent("goodput") << "   ETTR " << percent("ettr")
            << "   (unfinished jobs)\n";
  std::cout << "jobs:   " << counts_line((*body)["jobs_by_state"]) << "\n";
  std::cout << "nodes:  " << counts_line((*body)["nodes_by_state"]) << "\n";
  const json& idle = (*body)["idle_nodes"];
  std::cout << "idle:   " << (idle.is_array() ? idle.size() : 0) << " node(s)";
  if (idle.is_array() && !idle.empty()) std::cout << ": " << join_nodes(idle);
  std::cout << "\n";
  const json& storage = (*body)["storage_by_team"];
  std::cout << "checkpoint storage by team:";
  if (!storage.is_object() || storage.empty()) std::cout << " none measured";
  std::cout << "\n";
  if (storage.is_object()) {
    for (const auto& [team, bytes] : storage.items()) {
      std::cout << "  " << std::left << std::setw(20) << team
                << human_bytes(bytes.is_number() ? bytes.get<double>() : 0) << "\n";
    }
  }
  return kExitOk;
}

int run_events(const ClientFlags& flags, const std::string& id, bool follow) {
  Client c = connect(flags, "events");
  if (!c.http) return c.error;
  int64_t after = 0;
  while (true) {
    int code = 0;
    Result<json> body =
        call(c.http->get("/v1/jobs/" + id + "/events?after=" + std::to_string(after)), 200,
             "events", &code);
    if (!body.ok()) return code;
    bool ended = false;
    for (const json& e : (*body)["events"]) {
      after = std::max<int64_t>(after, e.value("seq", int64_t{0}));
      if (flags.json) {
        std::cout << e.dump() << "\n";
      } else {
        print_event(e);
      }
      const std::string type = text_of(e, "type");
      ended = ended || type == "succeeded" || type == "failed" || type == "cancelled";
    }
    std::cout << std::flush;
    if (!follow || ended) return kExitOk;
    std::this_thread::sleep_for(std::chrono::milliseconds(kFollowPollMs));
  }
}

int run_cancel(const ClientFlags& flags, const std::string& id) {
  Client c = connect(flags, "cancel");
  if (!c.http) return c.error;
  int code = 0;
  Result<json> body = call(c.http->post("/v1/jobs/" + id + "/cancel", "{}"), 200, "cancel", &code);
  if (!body.ok()) return code;
  if (flags.json) {
    std::cout << json{{"id", (*body)["id"]}, {"state", (*body)["state"]}}.dump() << "\n";
  } else {
    std::cout << text_of(*body, "id") << " " << text_of(*body, "state") << "\n";
  }
  return kExitOk;
}

// "pass quick 40s" / "FAIL full 2h" / "-": the node's last preflight and its age.
std::string preflight_cell(const json& n) {
  auto p = n.find("preflight");
  if (p == n.end() || !p->is_object()) return "-";
  const int64_t age = p->value("age_s", int64_t{-1});
  std::string when;
  if (age < 0) {
    when = "?";
  } else if (age < 120) {
    when = std::to_string(age) + "s";
  } else if (age < 2 * 3600) {
    when = std::to_string(age / 60) + "m";
  } else if (age < 2 * 86400) {
    when = std::to_string(age / 3600) + "h";
  } else {
    when = std::to_string(age / 86400) + "d";
  }
  return std::string(p->value("passed", false) ? "pass " : "FAIL ") + p->value("level", "?") + " " +
         when;
}

void print_node(const json& n, bool as_json) {
  if (as_json) {
    std::cout << n.dump() << "\n";
    return;
  }
  std::string labels;
  for (const auto& [k, v] : n["labels"].items())
    labels += (labels.empty() ? "" : ",") + k + "=" + v.get<std::string>();
  std::cout << std::left << std::setw(12) << text_of(n, "name") << std::setw(10)
            << text_of(n, "state") << std::setw(20) << labels << std::setw(6) << text_of(n, "slots")
            << std::setw(18) << preflight_cell(n) << text_of(n, "since") << "  "
            << text_of(n, "reason") << "\n";
}

int run_nodes(const ClientFlags& flags) {
  Client c = connect(flags, "nodes");
  if (!c.http) return c.error;
  int code = 0;
  Result<json> body = call(c.http->get("/v1/nodes"), 200, "nodes", &code);
  if (!body.ok()) return code;
  if (!flags.json) {
    std::cout << std::left << std::setw(12) << "NODE" << std::setw(10) << "STATE" << std::setw(20)
              << "LABELS" << std::setw(6) << "SLOTS" << std::setw(18) << "PREFLIGHT"
              << "SINCE  REASON\n";
  }
  for (const json& n : (*body)["nodes"])
    print_node(n, flags.json);
  return kExitOk;
}

int run_cordon(const ClientFlags& flags, const std::string& node, const std::string& reason,
               bool on) {
  const std::string command = on ? "cordon" : "uncordon";
  Client c = connect(flags, command);
  if (!c.http) return c.error;
  int code = 0;
  Result<json> body = call(c.http->post("/v1/nodes/" + node + "/" + command,
                                        on ? json{{"reason", reason}}.dump() : "{}"),
                           200, command, &code);
  if (!body.ok()) return code;
  print_node(*body, flags.json);
  return kExitOk;
}

}  // namespace

std::vector<Command> add_job_commands(CLI::App& parent) {
  std::vector<Command> out;
  {
    auto flags = std::make_shared<ClientFlags>();
    auto path = std::make_shared<std::string>();
    CLI::App* app = parent.add_subcommand("submit", "Submit a job spec (YAML) to the coordinator");
    app->add_option("spec", *path, "the job spec, e.g. configs/jobs/tiny-2nodes.yaml")->required();
    add_client_flags(app, flags.get());
    out.push_back({app, [flags, path](const GlobalOptions&) { return run_submit(*flags, *path); }});
  }
  {
    auto flags = std::make_shared<ClientFlags>();
    auto id = std::make_shared<std::string>();
    auto cluster = std::make_shared<bool>(false);
    CLI::App* app = parent.add_subcommand(
        "status", "Show one job, every job of your team, or the cluster (--cluster)");
    CLI::Option* job_arg = app->add_option("job", *id, "job id (default: all)");
    app->add_flag("--cluster", *cluster,
                  "the cluster instead: goodput and ETTR, jobs and nodes by state, idle nodes, "
                  "checkpoint storage per team")
        ->excludes(job_arg);
    add_client_flags(app, flags.get());
    out.push_back({app, [flags, id, cluster](const GlobalOptions&) {
                     return *cluster ? run_cluster_status(*flags) : run_status(*flags, *id);
                   }});
  }
  {
    auto flags = std::make_shared<ClientFlags>();
    auto id = std::make_shared<std::string>();
    auto follow = std::make_shared<bool>(false);
    CLI::App* app = parent.add_subcommand("events", "Show a job's events (faults with culprits)");
    app->add_option("job", *id, "job id")->required();
    app->add_flag("--follow,-f", *follow, "keep printing new events until the job ends");
    add_client_flags(app, flags.get());
    out.push_back({app, [flags, id, follow](const GlobalOptions&) {
                     return run_events(*flags, *id, *follow);
                   }});
  }
  out.push_back(add_logs_command(parent));
  {
    auto flags = std::make_shared<ClientFlags>();
    auto id = std::make_shared<std::string>();
    CLI::App* app = parent.add_subcommand("cancel", "Cancel a job (its ranks checkpoint and stop)");
    app->add_option("job", *id, "job id")->required();
    add_client_flags(app, flags.get());
    out.push_back({app, [flags, id](const GlobalOptions&) { return run_cancel(*flags, *id); }});
  }
  {
    auto flags = std::make_shared<ClientFlags>();
    CLI::App* app = parent.add_subcommand("nodes", "Show the cluster's nodes and their state");
    add_client_flags(app, flags.get());
    out.push_back({app, [flags](const GlobalOptions&) { return run_nodes(*flags); }});
  }
  {
    auto flags = std::make_shared<ClientFlags>();
    auto node = std::make_shared<std::string>();
    auto reason = std::make_shared<std::string>();
    CLI::App* app = parent.add_subcommand("cordon", "Keep new ranks off a node (admin)");
    app->add_option("node", *node, "node name")->required();
    app->add_option("--reason", *reason, "why (shown in kiln nodes)")->required();
    add_client_flags(app, flags.get());
    out.push_back({app, [flags, node, reason](const GlobalOptions&) {
                     return run_cordon(*flags, *node, *reason, true);
                   }});
  }
  {
    auto flags = std::make_shared<ClientFlags>();
    auto node = std::make_shared<std::string>();
    CLI::App* app =
        parent.add_subcommand("uncordon", "Let a cordoned node take ranks again (admin)");
    app->add_option("node", *node, "node name")->required();
    add_client_flags(app, flags.get());
    out.push_back({app, [flags, node](const GlobalOptions&) {
                     return run_cordon(*flags, *node, "", false);
                   }});
  }
  return out;
}

}  // namespace kiln::cli
