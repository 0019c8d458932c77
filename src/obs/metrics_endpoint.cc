// /metrics and /healthz. See include/kiln/obs/metrics_endpoint.h.
#include <kiln/obs/metrics_endpoint.h>

#include <nlohmann/json.hpp>

namespace kiln::obs {

void add_metrics_routes(HttpServer* server, const MetricsRegistry* registry, HealthCheck health) {
  server->get("/metrics", [registry](const HttpRequest&) {
    HttpResponse response;
    response.content_type = kPrometheusTextContentType;
    response.body = registry->expose_text();
    return response;
  });
  server->get("/healthz", [health = std::move(health)](const HttpRequest&) {
    const HealthReport report = health ? health() : HealthReport{};
    nlohmann::ordered_json body;
    body["status"] = report.healthy ? "ok" : "unhealthy";
    if (!report.detail.empty()) body["detail"] = report.detail;
    HttpResponse response;
    response.status = report.healthy ? 200 : 503;
    response.content_type = "application/json";
    response.body = body.dump() + "\n";
    return response;
  });
}

}  // namespace kiln::obs
