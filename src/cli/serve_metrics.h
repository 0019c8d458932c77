// The coordinator's /metrics: jobs and nodes by state and the queue length (computed at scrape
// time from the coordinator), each running job's goodput, and histograms of the time from submit
// to running, fault detection (fault to event) and recovery (fault to the first step of the next
// attempt), and restarts by cause (fed from the coordinator's samples every tick).
#ifndef KILN_CLI_SERVE_METRICS_H_
#define KILN_CLI_SERVE_METRICS_H_

#include <map>
#include <memory>
#include <string>

#include <kiln/obs/metrics.h>
#include <kiln/sched/coordinator.h>

namespace kiln::cli {

class ServeMetrics {
 public:
  ServeMetrics(obs::MetricsRegistry* registry, sched::Coordinator* coordinator);
  // Moves the coordinator's new samples into the histograms and counters.
  void sample();

 private:
  obs::MetricGroup group_;
  sched::Coordinator* coordinator_;
  prometheus::Histogram* submit_to_running_;
  prometheus::Histogram* detection_;
  prometheus::Histogram* recovery_;
  std::map<std::string, prometheus::Counter*> restarts_;
};

}  // namespace kiln::cli

#endif  // KILN_CLI_SERVE_METRICS_H_
