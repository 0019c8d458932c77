// See include/kiln/preflight/agent.h.
#include <kiln/base/clock.h>
#include <kiln/base/config.h>
#include <kiln/obs/metrics_endpoint.h>
#include <kiln/preflight/agent.h>
#include <kiln/preflight/facts.h>
#include <kiln/preflight/node_collector.h>

#include <prometheus/check_names.h>

namespace kiln::preflight {

Status load_agent_config(const std::string& path, AgentOptions* options) {
  KILN_ASSIGN_OR_RETURN(ConfigDocument doc, ConfigDocument::load_file(path));
  ConfigReader root = doc.root();
  ConfigReader metrics = root.section("metrics");
  metrics.read_int("port", &options->http.port, 0, 65535)
      .read_string("bind", &options->http.bind_address);
  root.read_int("heartbeat_interval_ms", &options->heartbeat_interval_ms, 10, 3'600'000);
  root.read_string_map("labels", &options->labels, kOptional, [](const std::string& key) {
    if (!prometheus::CheckLabelName(key)) {
      return std::string(
          "not a valid Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*, no "
          "leading __)");
    }
    return std::string();
  });
  return doc.finish();
}

NodeAgent::NodeAgent(const AgentOptions& options, obs::MetricsRegistry* registry, Logger log)
    : options_(options),
      log_(std::move(log)),
      metrics_(registry),
      heartbeats_total_(metrics_.add_counter("kiln_agent_heartbeats_total",
                                             "Heartbeats of the node agent's loop.")),
      last_heartbeat_seconds_(
          metrics_.add_gauge("kiln_agent_last_heartbeat_timestamp_seconds",
                             "Wall time of the node agent's last heartbeat (Unix seconds).")),
      last_heartbeat_ns_(monotonic_now_ns()) {
  prometheus::Labels info_labels(options_.labels.begin(), options_.labels.end());
  metrics_
      .add_gauge("kiln_agent_info", "This node's topology labels; the value is always 1.",
                 info_labels)
      .Set(1);
}

Result<std::unique_ptr<NodeAgent>> NodeAgent::start(const AgentOptions& options,
                                                    obs::MetricsRegistry* registry, Logger log) {
  std::string bad_labels;  // every bad name at once, not only the first
  for (const auto& [key, value] : options.labels) {
    if (!prometheus::CheckLabelName(key))
      bad_labels += (bad_labels.empty() ? "'" : ", '") + key + "'";
  }
  if (!bad_labels.empty()) {
    return Status::invalid_argument("agent labels " + bad_labels + ": not valid label names");
  }
  registry->add_collectable(std::make_shared<NodeCollector>());
  std::unique_ptr<NodeAgent> agent(new NodeAgent(options, registry, std::move(log)));
  agent->server_ = std::make_unique<obs::HttpServer>(options.http);
  NodeAgent* self = agent.get();
  obs::add_metrics_routes(agent->server_.get(), registry, [self] { return self->health(); });
  agent->server_->get("/facts", [](const obs::HttpRequest&) {
    obs::HttpResponse response;
    response.content_type = "application/json";
    response.body = collect_node_facts().dump() + "\n";
    return response;
  });
  KILN_RETURN_IF_ERROR(agent->server_->start());
  agent->heartbeat();
  agent->log_.info("agent serving",
                   {{"bind", options.http.bind_address}, {"port", agent->server_->port()}});
  return agent;
}

NodeAgent::~NodeAgent() {
  stop();
}

void NodeAgent::heartbeat() {
  last_heartbeat_ns_.store(monotonic_now_ns());
  heartbeats_total_.Increment();
  last_heartbeat_seconds_.Set(static_cast<double>(wall_now_ns()) * 1e-9);
}

void NodeAgent::stop() {
  if (server_) server_->stop();
}

obs::HealthReport NodeAgent::health() const {
  const int64_t since_ms = (monotonic_now_ns() - last_heartbeat_ns_.load()) / 1'000'000;
  if (since_ms > kStalledHeartbeats * options_.heartbeat_interval_ms) {
    return {false, "agent loop stalled: no heartbeat for " + std::to_string(since_ms) + " ms"};
  }
  return {};
}

}  // namespace kiln::preflight
