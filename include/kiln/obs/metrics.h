// Metrics: a per-process registry (prometheus-cpp core) and component-owned metric groups.
//
// One MetricsRegistry per process, made in main() and passed down; there is no global registry.
// Each component owns a MetricGroup: it adds its series when it is built and they disappear from
// the exposition when it is destroyed (seastar's metric_groups). Names follow Prometheus
// conventions, with the unit last: kiln_allreduce_seconds, kiln_comm_bytes_sent_total.
//
// Every registry also exports, without being asked:
//   kiln_build_info{version,commit,build_type,isa} 1
//   process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
//   process_open_fds, process_max_fds, process_start_time_seconds, process_threads
//
// Thread-safe: series may be added, removed and updated from any thread, also during a scrape.
#ifndef KILN_OBS_METRICS_H_
#define KILN_OBS_METRICS_H_

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/labels.h>
#include <prometheus/metric_family.h>
#include <prometheus/metric_type.h>
#include <prometheus/registry.h>

namespace kiln::obs {

class MetricsRegistry {
 public:
  MetricsRegistry();
  ~MetricsRegistry();
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // Where MetricGroups register their families.
  prometheus::Registry& registry() { return *registry_; }

  // Adds a source of metrics computed at scrape time (node statistics, say). The registry keeps
  // it alive until the registry is destroyed.
  void add_collectable(std::shared_ptr<prometheus::Collectable> collectable);

  // Every family from every source, in a stable order.
  std::vector<prometheus::MetricFamily> collect() const;

  // The Prometheus text exposition format, version 0.0.4.
  std::string expose_text() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_;  // GUARDED_BY(mu_)
};

// The metric series of one component. Series are added through the group and removed when it is
// destroyed; families (name + help + type) stay registered, empty, so that a component rebuilt
// later (a new communicator, say) adds its series to the same family.
//
// REQUIRES: the registry outlives the group; a (name, labels) pair is added by one group only
// (adding an existing series is a programmer error and hits KILN_CHECK, as do invalid names).
class MetricGroup {
 public:
  // With a null registry the series live in a private registry that nobody scrapes, so components
  // never need an "if metrics enabled" branch.
  explicit MetricGroup(MetricsRegistry* registry);
  ~MetricGroup();
  MetricGroup(const MetricGroup&) = delete;
  MetricGroup& operator=(const MetricGroup&) = delete;

  prometheus::Counter& add_counter(const std::string& name, const std::string& help,
                                   const prometheus::Labels& labels = {});
  prometheus::Gauge& add_gauge(const std::string& name, const std::string& help,
                               const prometheus::Labels& labels = {});
  prometheus::Histogram& add_histogram(const std::string& name, const std::string& help,
                                       const prometheus::Histogram::BucketBoundaries& buckets,
                                       const prometheus::Labels& labels = {});

 private:
  prometheus::Registry* registry_;                          // not owned
  std::unique_ptr<prometheus::Registry> private_registry_;  // when built with a null registry
  std::vector<std::function<void()>> removers_;             // undo each Add, in reverse order
};

// A family with one unlabelled sample, for Collectables that compute their values at scrape time.
// REQUIRES: type is Counter or Gauge.
prometheus::MetricFamily single_sample_family(const std::string& name, const std::string& help,
                                              prometheus::MetricType type, double value);

// `count` bucket bounds start, start*factor, start*factor^2, ...
// REQUIRES: start > 0, factor > 1, count >= 1.
prometheus::Histogram::BucketBoundaries exponential_buckets(double start, double factor, int count);

}  // namespace kiln::obs

#endif  // KILN_OBS_METRICS_H_
