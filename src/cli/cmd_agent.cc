// `kiln agent`: run the node agent until SIGINT/SIGTERM (or --duration-s), serving /metrics,
// /healthz and /facts. With --json it prints one JSON line when serving and one when stopping.
// With --join URL it is also a node of that coordinator: it owns the ranks the coordinator
// assigns to this node (kiln/sched/node_agent.h).
#include <sys/resource.h>

#include <kiln/base/clock.h>
#include <kiln/preflight/agent.h>
#include <kiln/sched/duration.h>
#include <kiln/sched/node_agent.h>

#include <nlohmann/json.hpp>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <system_error>

#include "cli/command.h"
#include "cli/signals.h"

namespace kiln::cli {
namespace {

struct AgentFlags {
  std::string config_path;
  int metrics_port = -1;  // -1: from the config, else 0 (pick a free port)
  std::string metrics_bind;
  double duration_s = 0;  // 0: until a signal
  bool json = false;
  // --join: a node of a coordinator.
  std::string join;
  std::string node_name;
  std::string labels;
  int slots = 1;
  std::string work_dir;
  std::vector<std::string> check_dirs;
  std::string node_token_file;
  std::string rank_address;
  std::string logs_bind;
  std::string keep_logs = "0ms";
};

Result<std::map<std::string, std::string>> parse_labels(const std::string& text) {
  std::map<std::string, std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size()) {
      return Status::invalid_argument("--labels: '" + item + "' is not key=value");
    }
    out[item.substr(0, eq)] = item.substr(eq + 1);
    start = end + 1;
  }
  return out;
}

Result<std::string> read_node_token(const std::string& path) {
  if (path.empty()) {
    const char* env = std::getenv("KILN_NODE_TOKEN");
    if (env != nullptr && *env != '\0') return std::string(env);
    return Status::invalid_argument("--join needs --node-token-file FILE or KILN_NODE_TOKEN");
  }
  std::ifstream in(path);
  std::string token;
  if (!in || !std::getline(in, token) || token.empty()) {
    return Status::invalid_argument("--node-token-file " + path + ": no token in it");
  }
  return token;
}

int run_agent(const AgentFlags& flags, const GlobalOptions& globals) {
  TerminationSignals signals;  // first: the HTTP threads must inherit the blocked mask
  std::shared_ptr<LogSink> sink = open_log_sink(globals);
  if (!sink) return kExitBadInput;
  Logger log(sink, "agent");

  preflight::AgentOptions options;
  if (!flags.config_path.empty()) {
    Status s = preflight::load_agent_config(flags.config_path, &options);
    if (!s.ok()) return report_error("agent", s);
  }
  if (flags.metrics_port >= 0) options.http.port = flags.metrics_port;
  if (!flags.metrics_bind.empty()) options.http.bind_address = flags.metrics_bind;
  Result<std::map<std::string, std::string>> labels = parse_labels(flags.labels);
  if (!labels.ok()) return report_error("agent", labels.status());
  // --labels name the node's failure domains for the coordinator and for its metrics alike.
  for (const auto& [key, value] : *labels)
    options.labels[key] = value;

  obs::MetricsRegistry registry;
  Result<std::unique_ptr<preflight::NodeAgent>> agent =
      preflight::NodeAgent::start(options, &registry, log);
  if (!agent.ok()) return report_error("agent", agent.status());
  std::unique_ptr<sched::JoinedAgent> joined;
  if (!flags.join.empty()) {
    // Each rank holds 5 descriptors (3 pipes, its pidfd, its log): take what the hard limit allows.
    rlimit files{};
    if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
      files.rlim_cur = files.rlim_max;
      (void)setrlimit(RLIMIT_NOFILE, &files);
    }
    sched::JoinOptions join;
    join.coordinator_url = flags.join;
    Result<std::string> token = read_node_token(flags.node_token_file);
    if (!token.ok()) return report_error("agent", token.status());
    join.node_token = *token;
    join.node_name = flags.node_name;
    join.labels = *labels;
    join.slots = flags.slots;
    join.work_dir = flags.work_dir;
    Result<int64_t> keep = sched::parse_duration_ms(flags.keep_logs);
    if (!keep.ok()) return report_error("agent", keep.status().with_context("--keep-logs"));
    join.keep_logs_ms = *keep;
    join.check_dirs = flags.check_dirs;
    join.rank_address = flags.rank_address;
    join.kiln_binary = self_executable();
    if (!flags.logs_bind.empty()) {
      // The coordinator is told this address: one it cannot dial would break `kiln logs`.
      if (flags.logs_bind == "0.0.0.0" || flags.logs_bind == "::") {
        return report_error("agent", Status::invalid_argument(
                                         "--logs-bind " + flags.logs_bind +
                                         ": give the address the coordinator reaches this node "
                                         "at (the agent tells it this address), not a wildcard"));
      }
      join.bind_address = flags.logs_bind;
    }
    if (const char* ca = std::getenv("KILN_CA_CERT"); ca != nullptr) join.ca_cert_path = ca;
    Result<std::unique_ptr<sched::JoinedAgent>> j = sched::JoinedAgent::start(join, log);
    if (!j.ok()) return report_error("agent", j.status());
    joined = std::move(*j);
  }
  if (flags.json) {
    nlohmann::ordered_json event;
    event["event"] = "serving";
    event["metrics_bind"] = options.http.bind_address;
    event["metrics_port"] = (*agent)->metrics_port();
    std::cout << event.dump() << std::endl;
  }

  const Deadline deadline = flags.duration_s > 0
                                ? Deadline::after_ms(static_cast<int64_t>(flags.duration_s * 1000))
                                : Deadline::never();
  int signal_number = 0;
  while (signal_number == 0 && !deadline.expired()) {
    signal_number = signals.wait(std::min(options.heartbeat_interval_ms, deadline.remaining_ms()));
    (*agent)->heartbeat();
  }
  joined.reset();  // stops its ranks
  (*agent)->stop();
  log.info("agent stopped", {{"signal", signal_number}});
  if (flags.json) {
    nlohmann::ordered_json event;
    event["event"] = "stopped";
    event["signal"] = signal_number;
    std::cout << event.dump() << std::endl;
  }
  return kExitOk;
}

}  // namespace

Command add_agent_command(CLI::App& parent) {
  auto flags = std::make_shared<AgentFlags>();
  CLI::App* app = parent.add_subcommand(
      "agent", "Run the node agent: serve this node's metrics, health and facts over HTTP");
  app->add_option("--config", flags->config_path, "agent config (YAML)")->check(CLI::ExistingFile);
  app->add_option("--metrics-port", flags->metrics_port, "serve /metrics here (0: pick one)")
      ->check(CLI::Range(0, 65535));
  app->add_option("--metrics-bind", flags->metrics_bind, "address to serve on (default 127.0.0.1)");
  app->add_option("--duration-s", flags->duration_s, "stop after this many seconds")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            // CLI11's NonNegativeNumber lets nan through (nan < 0 is false), which ran for ever,
            // and inf overflows the deadline's milliseconds. A century of seconds is plenty.
            constexpr double kDurationSecondsMax = 100.0 * 365 * 24 * 3600;
            double v = 0;
            const char* end = text.data() + text.size();
            const auto [ptr, ec] = std::from_chars(text.data(), end, v);
            if (ec != std::errc() || ptr != end || !std::isfinite(v) || v < 0 ||
                v > kDurationSecondsMax) {
              return "--duration-s must be a number of seconds from 0 to " +
                     std::to_string(static_cast<int64_t>(kDurationSecondsMax)) + ", not '" + text +
                     "'";
            }
            return std::string();
          },
          "SECONDS"));
  app->add_flag("--json", flags->json, "print JSON lines when serving and stopping");
  app->add_option("--join", flags->join, "be a node of the coordinator at this URL");
  app->add_option("--node-name", flags->node_name, "this node's name (with --join)");
  app->add_option("--labels", flags->labels, "failure domains, outermost first: rack=r1,switch=s1");
  app->add_option("--slots", flags->slots, "ranks this node runs at once")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app->add_option("--work-dir", flags->work_dir, "ranks' logs and flight dumps (absolute path)");
  app->add_option("--keep-logs", flags->keep_logs,
                  "remove a job's logs this long after they were last written, once the node "
                  "runs none of its ranks (0ms: keep them)")
      ->capture_default_str();
  app->add_option("--check-dir", flags->check_dirs,
                  "with --join: a directory whose free space preflight checks (checkpoints, "
                  "data; repeatable; the work directory always is)");
  app->add_option("--rank-address", flags->rank_address,
                  "the address this node's ranks advertise for TCP (default: their host name's)");
  app->add_option("--logs-bind", flags->logs_bind,
                  "with --join: the address the coordinator reads this node's rank logs from "
                  "(default 127.0.0.1; on several hosts, one the coordinator reaches; the "
                  "endpoint takes the node token)");
  app->add_option("--node-token-file", flags->node_token_file,
                  "the coordinator's node token (default $KILN_NODE_TOKEN)");
  return {app, [flags](const GlobalOptions& globals) { return run_agent(*flags, globals); }};
}

}  // namespace kiln::cli
