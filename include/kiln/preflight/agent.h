// NodeAgent: the per-node daemon behind `kiln agent`. It serves this node's health and facts so
// that Prometheus (and later the coordinator) can watch every node:
//
//   GET /metrics  kiln_node_* gauges, kiln_agent_* liveness, process_* and kiln_build_info
//   GET /healthz  503 when the agent's own heartbeat loop has stalled
//   GET /facts    the node-facts document (see facts.h)
//
// The caller owns the loop: it calls heartbeat() every `heartbeat_interval_ms` and stop() when
// done (the CLI does this around sigtimedwait, so a signal stops it promptly).
#ifndef KILN_PREFLIGHT_AGENT_H_
#define KILN_PREFLIGHT_AGENT_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include <kiln/base/log.h>
#include <kiln/base/result.h>
#include <kiln/base/status.h>
#include <kiln/obs/http_server.h>
#include <kiln/obs/metrics.h>
#include <kiln/obs/metrics_endpoint.h>

namespace kiln::preflight {

struct AgentOptions {
  // Where /metrics, /healthz and /facts are served.
  obs::HttpServerOptions http;
  // How often the caller calls heartbeat(); /healthz turns unhealthy after
  // kStalledHeartbeats intervals without one.
  int64_t heartbeat_interval_ms = 1000;
  // Failure-domain and topology labels of this node (rack, switch, ...), exported as the labels
  // of kiln_agent_info. Keys must be valid Prometheus label names.
  std::map<std::string, std::string> labels;
};

// Heartbeats that may be missed before the agent reports itself unhealthy.
inline constexpr int64_t kStalledHeartbeats = 3;

// Reads an agent config file into `options`, overriding only the keys it contains:
//
//   metrics:
//     port: 9400            # 0..65535; 0 picks a free port
//     bind: 127.0.0.1
//   heartbeat_interval_ms: 1000   # 10..3600000
//   labels: {rack: r1, switch: s3}
//
// Unknown keys, wrong types, out-of-range values and bad label names are kInvalidArgument errors
// naming the file, line and key.
Status load_agent_config(const std::string& path, AgentOptions* options);

class NodeAgent {
 public:
  // Registers the agent's metrics in `registry` and starts serving. kIoError if the port cannot be
  // bound. REQUIRES: `registry` outlives the agent; one agent per registry.
  static Result<std::unique_ptr<NodeAgent>> start(const AgentOptions& options,
                                                  obs::MetricsRegistry* registry, Logger log);
  ~NodeAgent();
  NodeAgent(const NodeAgent&) = delete;
  NodeAgent& operator=(const NodeAgent&) = delete;

  int metrics_port() const { return server_->port(); }

  // Records that the agent's loop is alive. Thread-safe.
  void heartbeat();

  // Stops serving. Idempotent.
  void stop();

 private:
  NodeAgent(const AgentOptions& options, obs::MetricsRegistry* registry, Logger log);
  obs::HealthReport health() const;

  const AgentOptions options_;
  Logger log_;
  obs::MetricGroup metrics_;
  prometheus::Counter& heartbeats_total_;
  prometheus::Gauge& last_heartbeat_seconds_;
  std::atomic<int64_t> last_heartbeat_ns_;  // monotonic
  std::unique_ptr<obs::HttpServer> server_;
};

}  // namespace kiln::preflight

#endif  // KILN_PREFLIGHT_AGENT_H_
