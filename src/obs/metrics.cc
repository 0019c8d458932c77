// MetricsRegistry and MetricGroup. See include/kiln/obs/metrics.h.
//
// prometheus-cpp throws std::invalid_argument on invalid names and on a name registered with two
// types. Metric names are programmer constants, so both become KILN_CHECK failures here and never
// escape as exceptions.
#include <kiln/base/build_info.h>
#include <kiln/base/check.h>
#include <kiln/base/cpu.h>
#include <kiln/obs/metrics.h>

#include <prometheus/text_serializer.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "obs/process_collector.h"

namespace kiln::obs {

MetricsRegistry::MetricsRegistry() : registry_(std::make_shared<prometheus::Registry>()) {
  const BuildInfo& build = build_info();
  auto& info = prometheus::BuildGauge()
                   .Name("kiln_build_info")
                   .Help("Kiln build that this process runs; the value is always 1.")
                   .Register(*registry_);
  info.Add({{"version", std::string(build.version)},
            {"commit", std::string(build.git_commit)},
            {"build_type", std::string(build.build_type)},
            {"isa", std::string(cpu_isa_name(detect_cpu_features().best_isa()))}})
      .Set(1);
  collectables_.push_back(std::make_shared<ProcessCollector>());
}

MetricsRegistry::~MetricsRegistry() = default;

void MetricsRegistry::add_collectable(std::shared_ptr<prometheus::Collectable> collectable) {
  std::lock_guard lock(mu_);
  collectables_.push_back(std::move(collectable));
}

std::vector<prometheus::MetricFamily> MetricsRegistry::collect() const {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  std::vector<std::shared_ptr<prometheus::Collectable>> extra;
  {
    std::lock_guard lock(mu_);
    extra = collectables_;
  }
  for (const auto& c : extra) {
    std::vector<prometheus::MetricFamily> more = c->Collect();
    families.insert(families.end(), std::make_move_iterator(more.begin()),
                    std::make_move_iterator(more.end()));
  }
  std::stable_sort(families.begin(), families.end(),
                   [](const auto& a, const auto& b) { return a.name < b.name; });
  return families;
}

std::string MetricsRegistry::expose_text() const {
  return prometheus::TextSerializer().Serialize(collect());
}

MetricGroup::MetricGroup(MetricsRegistry* registry) {
  if (registry != nullptr) {
    registry_ = &registry->registry();
  } else {
    private_registry_ = std::make_unique<prometheus::Registry>();
    registry_ = private_registry_.get();
  }
}

MetricGroup::~MetricGroup() {
  for (auto it = removers_.rbegin(); it != removers_.rend(); ++it)
    (*it)();
}

namespace {

// Registers (or finds) the family and adds one series to it; returns the series and a function
// that removes it again.
template <typename T, typename Builder, typename... Args>
T& add_series(prometheus::Registry* registry, Builder builder, const std::string& name,
              const std::string& help, const prometheus::Labels& labels,
              std::vector<std::function<void()>>* removers, Args&&... args) {
  prometheus::Family<T>* family = nullptr;
  try {
    family = &builder.Name(name).Help(help).Register(*registry);
  } catch (const std::exception& e) {
    KILN_CHECK(false) << "metric family '" << name << "': " << e.what();
  }
  KILN_CHECK(!family->Has(labels))
      << "metric series '" << name << "' with these labels already exists (two owners?)";
  T* series = nullptr;
  try {
    series = &family->Add(labels, std::forward<Args>(args)...);
  } catch (const std::exception& e) {
    KILN_CHECK(false) << "metric series '" << name << "': " << e.what();
  }
  removers->push_back([family, series] { family->Remove(series); });
  return *series;
}

}  // namespace

prometheus::Counter& MetricGroup::add_counter(const std::string& name, const std::string& help,
                                              const prometheus::Labels& labels) {
  return add_series<prometheus::Counter>(registry_, prometheus::BuildCounter(), name, help, labels,
                                         &removers_);
}

prometheus::Gauge& MetricGroup::add_gauge(const std::string& name, const std::string& help,
                                          const prometheus::Labels& labels) {
  return add_series<prometheus::Gauge>(registry_, prometheus::BuildGauge(), name, help, labels,
                                       &removers_);
}

prometheus::Histogram& MetricGroup::add_histogram(
    const std::string& name, const std::string& help,
    const prometheus::Histogram::BucketBoundaries& buckets, const prometheus::Labels& labels) {
  return add_series<prometheus::Histogram>(registry_, prometheus::BuildHistogram(), name, help,
                                           labels, &removers_, buckets);
}

prometheus::MetricFamily single_sample_family(const std::string& name, const std::string& help,
                                              prometheus::MetricType type, double value) {
  KILN_CHECK(type == prometheus::MetricType::Counter || type == prometheus::MetricType::Gauge)
      << name;
  prometheus::MetricFamily family;
  family.name = name;
  family.help = help;
  family.type = type;
  prometheus::ClientMetric metric;
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(metric);
  return family;
}

prometheus::Histogram::BucketBoundaries exponential_buckets(double start, double factor,
                                                            int count) {
  KILN_CHECK(start > 0 && factor > 1 && count >= 1)
      << "start=" << start << " factor=" << factor << " count=" << count;
  prometheus::Histogram::BucketBoundaries bounds;
  for (int i = 0; i < count; ++i)
    bounds.push_back(start * std::pow(factor, i));
  return bounds;
}

}  // namespace kiln::obs
