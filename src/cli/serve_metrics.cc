#include "cli/serve_metrics.h"

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <cmath>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace kiln::cli {
namespace {

// The cluster-wide figures see every team's jobs.
const sched::Caller kEveryone{"metrics", "", true};

// Jobs, nodes, queue and goodput, read from the coordinator when Prometheus scrapes.
class StateCollector final : public prometheus::Collectable {
 public:
  StateCollector(sched::Coordinator* c, const sched::Lifecycle* lifecycle)
      : c_(c), lifecycle_(lifecycle) {}

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
      m.label = {prometheus::ClientMetric::Label{"job_id", id}};
      m.gauge.value = value;
      goodput.metric.push_back(m);
    }
    std::vector<prometheus::MetricFamily> out = {
        jobs, nodes,
        obs::single_sample_family("kiln_queue_length", "Jobs queued for placement",
                                  prometheus::MetricType::Gauge, f.queued),
        goodput};
    append_running_jobs(f, &out);
    const sched::Coordinator::ClusterFigures cluster = c_->cluster_figures(kEveryone);
    if (!std::isnan(cluster.goodput)) {
      out.push_back(obs::single_sample_family(
          "kiln_cluster_goodput_ratio",
          "Productive step time over wall time since admission, all unfinished jobs together",
          prometheus::MetricType::Gauge, cluster.goodput));
    }
    if (!std::isnan(cluster.ettr)) {
      out.push_back(obs::single_sample_family(
          "kiln_cluster_ettr_ratio",
          "Productive step time over wall time since each job first ran, all unfinished jobs",
          prometheus::MetricType::Gauge, cluster.ettr));
    }
    if (lifecycle_ != nullptr) {
      prometheus::MetricFamily storage{
          "kiln_team_checkpoint_bytes",
          "Bytes of checkpoints each team's jobs hold (measured by the storage lifecycle)",
          prometheus::MetricType::Gauge,
          {}};
      for (const auto& [team, bytes] : lifecycle_->checkpoint_bytes_by_team()) {
        prometheus::ClientMetric m;
        m.label = {prometheus::ClientMetric::Label{"team", team}};
        m.gauge.value = static_cast<double>(bytes);
        storage.metric.push_back(m);
      }
      out.push_back(std::move(storage));
    }
    out.push_back(obs::single_sample_family(
        "kiln_nodes_idle", "Ready nodes that run nothing (idle capacity)",
        prometheus::MetricType::Gauge, static_cast<double>(cluster.idle_nodes.size())));
    return out;
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

  // Each running job's progress, by its id alone (`job_id`: Prometheus keeps `job` for the
  // scrape job); name, team and queue are on kiln_job_info (join on `job_id`), not on every
  // series. The rules in deploy/prometheus/rules.yml read these.
  static void append_running_jobs(const sched::Coordinator::Figures& f,
                                  std::vector<prometheus::MetricFamily>* out) {
    using prometheus::ClientMetric;
    auto family = [](const char* name, const char* help) {
      return prometheus::MetricFamily{name, help, prometheus::MetricType::Gauge, {}};
    };
    prometheus::MetricFamily info = family(
        "kiln_job_info", "1 per running job, with its name, team, queue and attempt as labels");
    prometheus::MetricFamily step = family("kiln_job_step", "The furthest rank's last step");
    prometheus::MetricFamily age =
        family("kiln_job_progress_age_seconds",
               "Seconds since the rank whose step moved longest ago last moved");
    prometheus::MetricFamily timeout =
        family("kiln_job_progress_timeout_seconds",
               "The job's progress_timeout: this long without a step and it is restarted as hung");
    prometheus::MetricFamily loss =
        family("kiln_job_loss", "Rank 0's last train loss (NaN when it is not finite)");
    prometheus::MetricFamily tokens = family(
        "kiln_job_tokens_per_second", "Rank 0's last step's tokens per second, every rank's");
    prometheus::MetricFamily rank_step = family(
        "kiln_rank_step_seconds", "Each rank's last step time (its collective wait included)");
    prometheus::MetricFamily rank_compute =
        family("kiln_rank_compute_seconds",
               "Each rank's own work in its last step (the step less its wait on the gradient "
               "collective): a straggler's is above its peers'");
    prometheus::MetricFamily rank_z =
        family("kiln_rank_straggler_z",
               "Each rank's robust z-score of its own work per step among its peers, over its "
               "last steps: above 3.5 it is a straggler (and a 'straggler' event)");
    prometheus::MetricFamily ettr =
        family("kiln_job_ettr_ratio",
               "Productive step time over wall time since the job first ran (effective "
               "training time ratio; goodput counts from admission)");
    auto sample = [](prometheus::MetricFamily* fam, std::vector<ClientMetric::Label> labels,
                     double value) {
      ClientMetric m;
      m.label = std::move(labels);
      m.gauge.value = value;
      fam->metric.push_back(std::move(m));
    };
    for (const auto& [id, j] : f.running) {
      const ClientMetric::Label job{"job_id", id};
      sample(&info,
             {job,
              {"name", j.name},
              {"team", j.team},
              {"queue", j.queue},
              {"attempt", std::to_string(j.attempt)}},
             1);
      sample(&timeout, {job}, j.progress_timeout_s);
      if (!std::isnan(j.ettr)) sample(&ettr, {job}, j.ettr);
      for (size_t r = 0; r < j.rank_straggler_z.size(); ++r) {
        if (!std::isnan(j.rank_straggler_z[r]))
          sample(&rank_z, {job, {"rank", std::to_string(r)}}, j.rank_straggler_z[r]);
      }
      if (j.step < 0) continue;  // no step yet: nothing to say of its progress
      sample(&step, {job}, static_cast<double>(j.step));
      sample(&age, {job}, j.progress_age_s);
      if (j.has_loss) {
        sample(&loss, {job}, j.loss);
        sample(&tokens, {job}, j.tokens_per_s);
      }
      for (size_t r = 0; r < j.rank_compute_s.size(); ++r) {
        if (j.rank_compute_s[r] >= 0) {
          sample(&rank_compute, {job, {"rank", std::to_string(r)}}, j.rank_compute_s[r]);
        }
      }
      for (size_t r = 0; r < j.rank_step_s.size(); ++r) {
        if (j.rank_step_s[r] > 0)
          sample(&rank_step, {job, {"rank", std::to_string(r)}}, j.rank_step_s[r]);
      }
    }
    for (prometheus::MetricFamily* fam :
         {&info, &step, &age, &timeout, &loss, &tokens, &rank_step, &rank_compute, &rank_z, &ettr})
      out->push_back(std::move(*fam));
  }

  sched::Coordinator* c_;
  const sched::Lifecycle* lifecycle_;
};

}  // namespace

void ServeMetrics::count_events() {
  if (store_ == nullptr) return;
  if (events_seen_seq_ < 0) {
    // Counting starts now: a counter starts at 0 with its process (Prometheus's rate() and
    // increase() read a restart as a reset), so the history before is not counted again.
    Result<int64_t> last = store_->last_event_seq();
    if (!last.ok()) return;
    events_seen_seq_ = *last;
    return;
  }
  Result<std::vector<sched::EventRecord>> events =
      store_->events_after(events_seen_seq_, sched::kStoreRowsMax);
  if (!events.ok()) return;
  for (const sched::EventRecord& e : *events) {
    events_seen_seq_ = e.seq;
    auto it = events_.find(e.type);
    if (it == events_.end()) {
      // Event types are the coordinator's own vocabulary (a few dozen); the bound only guards
      // the exposition against a store written by something else.
      if (events_.size() >= kEventTypesMax) continue;
      it = events_
               .emplace(e.type, &group_.add_counter("kiln_events_total",
                                                    "Job and node events by type (faults, "
                                                    "restarts, stragglers, cordons, ...)",
                                                    {{"type", e.type}}))
               .first;
    }
    it->second->Increment();
  }
}

ServeMetrics::ServeMetrics(obs::MetricsRegistry* registry, sched::Coordinator* coordinator,
                           sched::StateStore* store, const sched::Lifecycle* lifecycle)
    : group_(registry), coordinator_(coordinator), store_(store) {
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
  if (registry != nullptr)
    registry->add_collectable(std::make_shared<StateCollector>(coordinator, lifecycle));
}

void ServeMetrics::sample() {
  count_events();
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
