// `kiln agent`: run the node agent until SIGINT/SIGTERM (or --duration-s), serving /metrics,
// /healthz and /facts. With --json it prints one JSON line when serving and one when stopping.
#include <kiln/base/clock.h>
#include <kiln/preflight/agent.h>

#include <nlohmann/json.hpp>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <iostream>
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
};

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

  obs::MetricsRegistry registry;
  Result<std::unique_ptr<preflight::NodeAgent>> agent =
      preflight::NodeAgent::start(options, &registry, log);
  if (!agent.ok()) return report_error("agent", agent.status());
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
  return {app, [flags](const GlobalOptions& globals) { return run_agent(*flags, globals); }};
}

}  // namespace kiln::cli
