// The two routes every Kiln process serves when asked (`--metrics-port`):
//   GET /metrics  the registry in Prometheus text format 0.0.4
//   GET /healthz  200 {"status":"ok",...} or 503 {"status":"unhealthy","detail":...}
#ifndef KILN_OBS_METRICS_ENDPOINT_H_
#define KILN_OBS_METRICS_ENDPOINT_H_

#include <functional>
#include <string>

#include <kiln/obs/http_server.h>
#include <kiln/obs/metrics.h>

namespace kiln::obs {

struct HealthReport {
  bool healthy = true;
  std::string detail;  // why not, when unhealthy; shown to whoever probes
};

// Called on every /healthz request, from an HTTP worker thread; must be thread-safe and fast.
using HealthCheck = std::function<HealthReport()>;

inline constexpr const char* kPrometheusTextContentType =
    "text/plain; version=0.0.4; charset=utf-8";

// Adds /metrics and /healthz to `server`. A null `health` always reports healthy.
// REQUIRES: `registry` outlives `server`; start() has not been called yet.
void add_metrics_routes(HttpServer* server, const MetricsRegistry* registry, HealthCheck health);

}  // namespace kiln::obs

#endif  // KILN_OBS_METRICS_ENDPOINT_H_
