// The coordinator's /metrics: jobs and nodes by state and the queue length (computed at scrape
// time from the coordinator), each running job's goodput, and histograms of the time from submit
// to running, fault detection (fault to event) and recovery (fault to the first step of the next
// attempt), and restarts by cause (fed from the coordinator's samples every tick); every
// event by type as a counter (kiln_events_total, read from the state store every tick); the
// cluster's goodput and ETTR, idle nodes, each running job's ETTR and its ranks' straggler
// scores.
#ifndef KILN_CLI_SERVE_METRICS_H_
#define KILN_CLI_SERVE_METRICS_H_

#include <map>
#include <memory>
#include <string>

#include <kiln/obs/metrics.h>
#include <kiln/sched/coordinator.h>
#include <kiln/sched/lifecycle.h>

namespace kiln::cli {

class ServeMetrics {
 public:
  // `store` (may be null: no event counters) is read for the events written since the last
  // sample().
  ServeMetrics(obs::MetricsRegistry* registry, sched::Coordinator* coordinator,
               sched::StateStore* store, const sched::Lifecycle* lifecycle = nullptr);
  // Moves the coordinator's new samples into the histograms and counters.
  void sample();

 private:
  static constexpr size_t kEventTypesMax = 64;
  void count_events();

  obs::MetricGroup group_;
  sched::Coordinator* coordinator_;
  prometheus::Histogram* submit_to_running_;
  prometheus::Histogram* detection_;
  prometheus::Histogram* recovery_;
  std::map<std::string, prometheus::Counter*> restarts_;
  sched::StateStore* store_;
  int64_t events_seen_seq_ = -1;                        // -1: not started
  std::map<std::string, prometheus::Counter*> events_;  // kiln_events_total by type
};

}  // namespace kiln::cli

#endif  // KILN_CLI_SERVE_METRICS_H_
