#include "cli/serve_metrics.h"

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <initializer_list>
#include <map>
#include <string>

namespace kiln::cli {
namespace {

// Jobs, nodes, queue and goodput, read from the coordinator when Prometheus scrapes.
class StateCollector final : public prometheus::Collectable {
 public:
  explicit StateCollector(sched::Coordinator* c) : c_(c) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    sched::Coordinator::Figures f = c_->figures();
    prometheus::MetricFamily jobs =
        by_state("kiln_jobs", "Unfinished jobs by state", f.jobs_by_state,
                 {"queued", "admitted", "placed", "running", "stopping", "restarting"});
    prometheus::MetricFamily nodes = by_state("kiln_nodes", "Nodes by state", f.nodes_by_state,
                                              {"ready", "suspect", "cordoned", "down"});
    prometheus::MetricFamily goodput{
        "kiln_job_goodput_ratio",
        "Productive step time over wall time since admission (ETTR), per running job",
        prometheus::MetricType::Gauge,
        {}};
    for (const auto& [id, value] : f.goodput_by_job) {
      prometheus::ClientMetric m;
      m.label = {prometheus::ClientMetric::Label{"job", id}};
      m.gauge.value = value;
      goodput.metric.push_back(m);
    }
    return {jobs, nodes,
            obs::single_sample_family("kiln_queue_length", "Jobs queued for placement",
                                      prometheus::MetricType::Gauge, f.queued),
            goodput};
  }

 private:
  // One gauge per state, every state present (0 when none), so a query never misses a series.
  static prometheus::MetricFamily by_state(const std::string& name, const std::string& help,
                                           const std::map<std::string, int>& counts,
                                           std::initializer_list<const char*> states) {
    prometheus::MetricFamily family{name, help, prometheus::MetricType::Gauge, {}};
    for (const char* state : states) {
      prometheus::ClientMetric m;
      m.label = {prometheus::ClientMetric::Label{"state", state}};
      auto it = counts.find(state);
      m.gauge.value = it == counts.end() ? 0 : it->second;
      family.metric.push_back(m);
    }
    return family;
  }

  sched::Coordinator* c_;
};

}  // namespace

ServeMetrics::ServeMetrics(obs::MetricsRegistry* registry, sched::Coordinator* coordinator)
    : group_(registry), coordinator_(coordinator) {
  const auto buckets = obs::exponential_buckets(0.05, 2, 14);  // 50 ms .. ~7 min
  submit_to_running_ = &group_.add_histogram("kiln_job_submit_to_running_seconds",
                                             "From submit to every rank running", buckets);
  detection_ =
      &group_.add_histogram("kiln_fault_detection_seconds", "From a fault to its event", buckets);
  recovery_ = &group_.add_histogram("kiln_fault_recovery_seconds",
                                    "From a fault to the first step of the next attempt", buckets);
  for (const char* cause : {"rank_exit", "hung", "start_timeout", "node_lost", "start_failed"}) {
    restarts_[cause] = &group_.add_counter("kiln_job_faults_total", "Faults that stopped a job",
                                           {{"cause", cause}});
  }
  if (registry != nullptr) registry->add_collectable(std::make_shared<StateCollector>(coordinator));
}

void ServeMetrics::sample() {
  sched::Coordinator::Samples s = coordinator_->take_samples();
  for (double v : s.submit_to_running_s)
    submit_to_running_->Observe(v);
  for (double v : s.detection_s)
    detection_->Observe(v);
  for (double v : s.recovery_s)
    recovery_->Observe(v);
  for (const std::string& cause : s.restart_causes) {
    auto it = restarts_.find(cause);
    if (it != restarts_.end()) it->second->Increment();
  }
}

}  // namespace kiln::cli
